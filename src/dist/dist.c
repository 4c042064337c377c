/* Data-parallel training over MPI (include/tapegrad/dist.h): the job's ranks,
 * collectives, the rank's slice of a batch, and the DistributedDataParallel
 * reducer: gradient buckets all-reduced as backward finishes them, as
 * PyTorch's Reducer does (torch/csrc/distributed/c10d/reducer.cpp: buckets
 * in reverse registration order, the first capped at 1 MiB, each started in
 * bucket order once all its gradients are ready, divided by the world size
 * on the way in).
 *
 * Built with TG_HAVE_MPI when meson finds MPI; without it every function
 * serves one process and tg_dist_init refuses a job of several. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if TG_HAVE_MPI
#include <mpi.h>
#endif

static struct {
    bool inited, mpi; /* tg_dist_init ran; it started MPI */
    int rank, size, local_size;
#if TG_HAVE_MPI
    MPI_Comm comm;
#endif
} job = {.size = 1, .local_size = 1};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool tg_dist_available(void) { return TG_HAVE_MPI; }

/* The process count mpirun (Open MPI, or a PMI launcher) announced; 0 when
 * nothing launched this process. */
static long launched_size(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            long n = strtol(v, NULL, 10);
            return n > 0 ? n : 1;
        }
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

int tg_dist_launched(void) { return (int)launched_size(); }
int tg_dist_rank(void) { return job.rank; }
int tg_dist_size(void) { return job.size; }
int tg_dist_local_size(void) { return job.local_size; }

#if TG_HAVE_MPI
static int mpi_error(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return tg_error_status(TG_EDIST, "dist %s: %s", what, msg);
}
#define MPI_CHECK(what, call)                      \
    do {                                           \
        int rc_ = (call);                          \
        if (rc_ != MPI_SUCCESS) return mpi_error(what, rc_); \
    } while (0)
#endif

int tg_dist_init(int *argc, char ***argv)
{
    if (job.inited) return TG_OK;
    long n = launched_size();
    if (n == 0) {
        job.inited = true;
        return TG_OK;
    }
#if TG_HAVE_MPI
    int provided, flag = 0;
    MPI_Initialized(&flag);
    if (!flag) MPI_CHECK("init", MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    job.mpi = !flag;
    MPI_CHECK("init", MPI_Comm_dup(MPI_COMM_WORLD, &job.comm));
    MPI_CHECK("init", MPI_Comm_set_errhandler(job.comm, MPI_ERRORS_RETURN));
    MPI_CHECK("init", MPI_Comm_rank(job.comm, &job.rank));
    MPI_CHECK("init", MPI_Comm_size(job.comm, &job.size));
    MPI_Comm local;
    MPI_CHECK("init", MPI_Comm_split_type(job.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
    MPI_Comm_size(local, &job.local_size);
    MPI_Comm_free(&local);
    job.inited = true;
    return TG_OK;
#else
    (void)argc, (void)argv;
    if (n > 1)
        return tg_error_status(TG_EDIST,
                               "dist_init: mpirun started %ld processes, but this tapegrad was built without MPI, "
                               "so each would train alone (install libopenmpi-dev and rebuild)",
                               n);
    job.inited = true;
    return TG_OK;
#endif
}

int tg_dist_finalize(void)
{
    if (!job.inited) return TG_OK;
    job.inited = false;
    job.rank = 0, job.size = 1, job.local_size = 1;
#if TG_HAVE_MPI
    if (job.comm != MPI_COMM_NULL && job.comm != 0) MPI_Comm_free(&job.comm);
    job.comm = MPI_COMM_NULL;
    if (job.mpi) {
        job.mpi = false;
        MPI_CHECK("finalize", MPI_Finalize());
    }
#endif
    return TG_OK;
}

void tg_dist_abort(int code)
{
#if TG_HAVE_MPI
    int flag = 0;
    MPI_Initialized(&flag);
    if (flag) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    fflush(stdout);
    exit(code);
}

/* ---- collectives ---------------------------------------------------------------------- */

static bool many(void) { return job.size > 1; }

int tg_dist_barrier(void)
{
#if TG_HAVE_MPI
    if (many()) MPI_CHECK("barrier", MPI_Barrier(job.comm));
#endif
    return TG_OK;
}

int tg_dist_broadcast(void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= job.size)
        return tg_error_status(TG_EINVAL, "dist broadcast: root %d is not a rank of %d", root, job.size);
    if (bytes > 0 && !buf) return tg_error_status(TG_EINVAL, "dist broadcast: NULL buffer");
#if TG_HAVE_MPI
    for (size_t off = 0; many() && off < bytes; off += INT_MAX) {
        size_t k = bytes - off < INT_MAX ? bytes - off : INT_MAX;
        MPI_CHECK("broadcast", MPI_Bcast((char *)buf + off, (int)k, MPI_BYTE, root, job.comm));
    }
#endif
    return TG_OK;
}

static int all_reduce(void *v, int64_t n, tg_dtype dt, tg_dist_op op)
{
    if (op != TG_DIST_SUM && op != TG_DIST_MAX && op != TG_DIST_MIN)
        return tg_error_status(TG_EINVAL, "dist all_reduce: unknown op %d", (int)op);
    if (n < 0 || (n > 0 && !v)) return tg_error_status(TG_EINVAL, "dist all_reduce: bad buffer");
#if TG_HAVE_MPI
    MPI_Op mop = op == TG_DIST_SUM ? MPI_SUM : op == TG_DIST_MAX ? MPI_MAX : MPI_MIN;
    MPI_Datatype t = dt == TG_F32 ? MPI_FLOAT : MPI_DOUBLE;
    size_t es = tg_dtype_size(dt);
    for (int64_t off = 0; many() && off < n; off += INT_MAX) {
        int64_t k = n - off < INT_MAX ? n - off : INT_MAX;
        MPI_CHECK("all_reduce", MPI_Allreduce(MPI_IN_PLACE, (char *)v + (size_t)off * es, (int)k, t, mop, job.comm));
    }
#else
    (void)dt;
#endif
    return TG_OK;
}

int tg_dist_all_reduce_f64(double *v, int64_t n, tg_dist_op op) { return all_reduce(v, n, TG_F64, op); }

int tg_dist_all_reduce(tg_tensor *t, tg_dist_op op)
{
    if (!t) return tg_error_status(TG_EINVAL, "dist all_reduce: NULL tensor");
    if (!tg__is_float(t->dtype) || !tg_is_contiguous(t))
        return tg_error_status(TG_EINVAL, "dist all_reduce: expected a contiguous float32 or float64 tensor, got %s",
                               tg_dtype_name(t->dtype));
    tg__bump(t);
    return all_reduce(tg_data_ptr(t), tg_numel(t), t->dtype, op);
}

int tg_dist_broadcast_module(tg_module *m)
{
    if (!m) return tg_error_status(TG_EINVAL, "dist broadcast_module: NULL module");
    tg_tape *tp = tg_tape_new();
    tg_named_list sd;
    int st = tp ? tg_module_state_dict(tp, m, &sd) : tg_error_status(TG_ENOMEM, "dist broadcast_module: out of memory");
    for (int i = 0; st == TG_OK && i < sd.n; i++) {
        tg_tensor *t = sd.tensors[i];
        if (!tg_is_contiguous(t))
            st = tg_error_status(TG_EINVAL, "dist broadcast_module: '%s' is not contiguous", sd.names[i]);
        else
            st = tg_dist_broadcast(tg_data_ptr(t), tg_tensor_nbytes(t), 0);
        tg__bump(t);
    }
    tg_tape_free(tp);
    return st;
}

int tg_dist_agree(int status, int *failed_rank)
{
    int first = status == TG_OK ? job.size : job.rank;
#if TG_HAVE_MPI
    if (many()) MPI_CHECK("agree", MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, job.comm));
#endif
    if (failed_rank) *failed_rank = first < job.size ? first : -1;
    if (first >= job.size) return TG_OK;
    if (status != TG_OK) return status; /* this rank's own message stays */
    return tg_error_status(TG_EDIST, "rank %d of %d failed", first, job.size);
}

int tg_dist_batch_range(int64_t global, int64_t *start, int64_t *count)
{
    if (!start || !count) return tg_error_status(TG_EINVAL, "dist batch_range: NULL argument");
    if (global < 0 || global % job.size != 0)
        return tg_error_status(TG_EINVAL, "dist: the batch of %lld is not divisible by the %d ranks", (long long)global,
                               job.size);
    *count = global / job.size;
    *start = *count * job.rank;
    return TG_OK;
}

tg_tensor *tg_dist_batch_slice(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input("dist batch_slice");
    if (x->ndim < 1) return tg_error("dist batch_slice: a 0-d tensor has no batch dimension");
    int64_t start, count;
    if (tg_dist_batch_range(x->shape[0], &start, &count) != TG_OK) return NULL;
    return job.size == 1 ? x : tg_narrow(tp, x, 0, start, count);
}

/* ---- the reducer ----------------------------------------------------------------------- */

#define FIRST_BUCKET_BYTES ((size_t)1 << 20)
#define BUCKET_BYTES ((size_t)25 << 20)

typedef struct {
    int64_t first, count; /* entries of the reversed parameter list */
    int64_t numel;        /* elements, padding included */
    size_t bytes;         /* the parameters' own bytes */
    tg_dtype dtype;
    void *data;
    int64_t pending; /* parameters not yet ready in this backward */
    bool started, done;
#if TG_HAVE_MPI
    MPI_Request req;
#endif
} bucket;

struct tg_dist_ddp {
    tg_module *model;
    tg_generator *gen;
    tg_tape *tape; /* buckets and the gradient views */
    int64_t n;
    tg_tensor **params; /* reverse registration order */
    tg_tensor **views;  /* params[i]->grad as set up */
    int64_t *bucket_of;
    bool *ready;
    bucket *b;
    int64_t nb, next_start, next_done;
    int status; /* a failure inside backward, reported again by sync */
    char message[256];
    tg__grad_watch watch;
    tg_dist_ddp_stats stats;
    int64_t started_in_backward;
};

static tg_dist_ddp *active; /* one at a time: MPI calls come from one thread */

static int start_bucket(bucket *k)
{
    k->started = true;
    if (!many()) {
        k->done = true;
        return TG_OK;
    }
#if TG_HAVE_MPI
    /* divided on the way in, as DDP's default reduction does: x * (1 / N) */
    double inv = 1.0 / (double)job.size;
    if (k->dtype == TG_F32) {
        float *p = k->data, s = (float)inv;
        for (int64_t i = 0; i < k->numel; i++) p[i] *= s;
    } else {
        double *p = k->data;
        for (int64_t i = 0; i < k->numel; i++) p[i] *= inv;
    }
    MPI_CHECK("all_reduce of a gradient bucket",
              MPI_Iallreduce(MPI_IN_PLACE, k->data, (int)k->numel, k->dtype == TG_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM,
                             job.comm, &k->req));
#endif
    return TG_OK;
}

/* Starts the ready buckets in bucket order (every rank issues the same
 * collectives in the same order). */
static int start_ready(tg_dist_ddp *d)
{
    while (d->next_start < d->nb && d->b[d->next_start].pending == 0) {
        int st = start_bucket(&d->b[d->next_start++]);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

static int on_ready(void *ctx, int64_t i)
{
    tg_dist_ddp *d = ctx;
    if (d->ready[i]) {
        d->status = tg_error_status(TG_ESTATE, "dist ddp: backward ran again before tg_dist_ddp_sync "
                                               "(accumulating gradients over several backward calls is not supported)");
        snprintf(d->message, sizeof d->message, "%s", tg_last_error());
        return d->status;
    }
    d->ready[i] = true;
    bucket *k = &d->b[d->bucket_of[i]];
    k->pending--;
    int64_t before = d->next_start;
    int st = start_ready(d);
    d->started_in_backward += d->next_start - before;
    if (st != TG_OK) {
        d->status = st;
        snprintf(d->message, sizeof d->message, "%s", tg_last_error());
    }
    return st;
}

/* Drives the started transfers (Open MPI progresses a nonblocking
 * collective only inside MPI calls): the oldest unfinished one is tested. */
static int on_progress(void *ctx)
{
    tg_dist_ddp *d = ctx;
#if TG_HAVE_MPI
    while (d->next_done < d->next_start) {
        bucket *k = &d->b[d->next_done];
        int flag = 1;
        if (!k->done) MPI_CHECK("all_reduce of a gradient bucket", MPI_Test(&k->req, &flag, MPI_STATUS_IGNORE));
        if (!flag) break;
        k->done = true;
        d->next_done++;
    }
#else
    (void)d;
#endif
    return TG_OK;
}

static void reset_step(tg_dist_ddp *d)
{
    for (int64_t k = 0; k < d->nb; k++) {
        d->b[k].pending = d->b[k].count;
        d->b[k].started = d->b[k].done = false;
    }
    memset(d->ready, 0, sizeof *d->ready * (size_t)d->n);
    d->next_start = d->next_done = 0;
    d->started_in_backward = 0;
    d->status = TG_OK;
}

/* Where a parameter's elements start in its bucket: a 64-byte boundary. */
static int64_t aligned(int64_t off, tg_dtype dt)
{
    int64_t align = 64 / (int64_t)tg_dtype_size(dt);
    return (off + align - 1) / align * align;
}

/* Buckets of the reversed list: a bucket closes when it reaches its cap
 * (1 MiB for the first, then the cap) or the dtype changes. */
static int plan_buckets(tg_dist_ddp *d, size_t cap)
{
    d->b = tg_tape_alloc(d->tape, sizeof *d->b * (size_t)(d->n ? d->n : 1), true);
    if (!d->b) return TG_ENOMEM;
    int64_t nb = 0;
    for (int64_t i = 0; i < d->n; i++) {
        tg_tensor *p = d->params[i];
        bucket *k = nb ? &d->b[nb - 1] : NULL;
        size_t limit = nb == 1 ? (cap < FIRST_BUCKET_BYTES ? cap : FIRST_BUCKET_BYTES) : cap;
        if (!k || k->bytes >= limit || k->dtype != p->dtype) {
            k = &d->b[nb++];
            *k = (bucket){.first = i, .dtype = p->dtype};
        }
        k->numel = aligned(k->numel, p->dtype) + tg_numel(p);
        k->bytes += (size_t)tg_numel(p) * tg_dtype_size(p->dtype);
        k->count++;
        d->bucket_of[i] = nb - 1;
        if (k->numel > INT_MAX)
            return tg_error_status(TG_EINVAL, "dist ddp: a gradient bucket of %lld elements is too large for MPI",
                                   (long long)k->numel);
    }
    d->nb = nb;
    return TG_OK;
}

/* Each parameter's .grad becomes a view into its bucket (its old values kept). */
static int make_views(tg_dist_ddp *d)
{
    for (int64_t k = 0; k < d->nb; k++) {
        bucket *b = &d->b[k];
        tg_tensor *buf = tg_zeros(d->tape, b->dtype, 1, &b->numel);
        if (!buf) return TG_ENOMEM;
        b->data = buf->data;
        int64_t off = 0;
        for (int64_t i = b->first; i < b->first + b->count; i++) {
            tg_tensor *p = d->params[i];
            off = aligned(off, p->dtype);
            tg_tensor *v = tg__alias(d->tape, buf);
            if (!v) return TG_ENOMEM;
            v->ndim = p->ndim;
            memcpy(v->shape, p->shape, sizeof v->shape);
            tg__contiguous_strides(v->ndim, v->shape, v->stride);
            v->data = (char *)b->data + (size_t)off * tg_dtype_size(p->dtype);
            v->offset = 0;
            v->requires_grad = false;
            if (p->grad) tg_k_copy(v, p->grad);
            d->views[i] = v;
            off += tg_numel(p);
        }
    }
    for (int64_t i = 0; i < d->n; i++) d->params[i]->grad = d->views[i];
    return TG_OK;
}

tg_dist_ddp *tg_dist_ddp_new(tg_module *model, tg_dist_ddp_options opt)
{
    if (!model) return tg_error("dist ddp: NULL model");
    if (active) return tg_error("dist ddp: another tg_dist_ddp is active (free it first)");
    if (tg_dist_broadcast_module(model) != TG_OK) return NULL;
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error("dist ddp: out of memory");
    tg_named_list pl;
    tg_dist_ddp *d = tg_module_named_parameters(tp, model, &pl) == TG_OK ? tg_tape_alloc(tp, sizeof *d, true) : NULL;
    if (!d) {
        tg_tape_free(tp);
        return NULL;
    }
    d->model = model;
    d->tape = tp;
    d->gen = tg_module_generator(model);
    d->params = tg_tape_alloc(tp, sizeof *d->params * (size_t)(pl.n + 1), false);
    d->views = tg_tape_alloc(tp, sizeof *d->views * (size_t)(pl.n + 1), true);
    d->bucket_of = tg_tape_alloc(tp, sizeof *d->bucket_of * (size_t)(pl.n + 1), false);
    d->ready = tg_tape_alloc(tp, sizeof *d->ready * (size_t)(pl.n + 1), true);
    int st = d->params && d->views && d->bucket_of && d->ready ? TG_OK : TG_ENOMEM;
    for (int i = 0; st == TG_OK && i < pl.n; i++) {
        tg_tensor *p = pl.tensors[pl.n - 1 - i];
        if (!p->requires_grad) continue; /* frozen: no gradient to average */
        if (!tg__is_float(p->dtype) || !tg_is_contiguous(p))
            st = tg_error_status(TG_EINVAL, "dist ddp: parameter '%s' is not a contiguous float tensor",
                                 pl.names[pl.n - 1 - i]);
        d->params[d->n++] = p;
    }
    if (st == TG_OK) st = plan_buckets(d, opt.bucket_bytes ? opt.bucket_bytes : BUCKET_BYTES);
    if (st == TG_OK) st = make_views(d);
    if (st == TG_OK) {
        d->watch = (tg__grad_watch){.ready = on_ready, .progress = on_progress, .ctx = d, .n = d->n,
                                    .leaves = d->params};
        st = tg__grad_watch_set(&d->watch);
    }
    if (st == TG_OK) st = tg_generator_set_batch_slice(d->gen, job.rank, job.size);
    if (st != TG_OK) {
        tg__grad_watch_clear(&d->watch);
        for (int64_t i = 0; i < d->n; i++)
            if (d->views[i] && d->params[i]->grad == d->views[i]) d->params[i]->grad = NULL;
        tg_tape_free(tp);
        return NULL;
    }
    reset_step(d);
    d->stats.buckets = d->nb;
    d->stats.params = d->n;
    for (int64_t k = 0; k < d->nb; k++) d->stats.bytes += d->b[k].bytes;
    active = d;
    return d;
}

int tg_dist_ddp_sync(tg_dist_ddp *d)
{
    if (!d) return tg_error_status(TG_EINVAL, "dist ddp_sync: NULL");
    for (int64_t i = 0; i < d->n; i++)
        if (d->params[i]->grad != d->views[i])
            return tg_error_status(TG_ESTATE, "dist ddp_sync: a parameter's gradient was replaced after "
                                              "tg_dist_ddp_new (tg_module_to_dtype?); make the ddp after converting");
    /* what backward did not start (parameters no node reached) starts now,
     * in order; after a failed backward only what it started is waited for */
    int failed = d->status, st = TG_OK;
    if (failed == TG_OK) {
        for (int64_t k = d->next_start; k < d->nb; k++) d->b[k].pending = 0;
        st = start_ready(d);
    }
    double t0 = now();
#if TG_HAVE_MPI
    for (int64_t k = 0; st == TG_OK && k < d->nb; k++) {
        bucket *b = &d->b[k];
        if (b->started && !b->done) {
            int rc = MPI_Wait(&b->req, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) st = mpi_error("all_reduce of a gradient bucket", rc);
            b->done = true;
        }
    }
#endif
    double waited = now() - t0;
    if (failed != TG_OK) {
        reset_step(d);
        return tg_error_status(failed, "dist ddp_sync: backward failed: %s", d->message);
    }
    d->stats.syncs++;
    d->stats.started_in_backward = d->started_in_backward;
    d->stats.wait_seconds = waited;
    d->stats.total_wait_seconds += waited;
    reset_step(d);
    return st;
}

void tg_dist_ddp_free(tg_dist_ddp *d)
{
    if (!d) return;
    tg__grad_watch_clear(&d->watch);
    for (int64_t i = 0; i < d->n; i++)
        if (d->params[i]->grad == d->views[i]) d->params[i]->grad = NULL;
    tg_generator_set_batch_slice(d->gen, 0, 1);
    if (active == d) active = NULL;
    tg_tape_free(d->tape);
}

int tg_dist_ddp_get_stats(const tg_dist_ddp *d, tg_dist_ddp_stats *out)
{
    if (!d || !out) return tg_error_status(TG_EINVAL, "dist ddp_get_stats: NULL argument");
    *out = d->stats;
    return TG_OK;
}

int tg_dist_ddp_bucket(const tg_dist_ddp *d, int64_t i, int64_t *first, int64_t *count, size_t *bytes)
{
    if (!d || !first || !count || !bytes) return tg_error_status(TG_EINVAL, "dist ddp_bucket: NULL argument");
    if (i < 0 || i >= d->nb)
        return tg_error_status(TG_EINVAL, "dist ddp_bucket: bucket %lld of %lld", (long long)i, (long long)d->nb);
    *first = d->b[i].first, *count = d->b[i].count, *bytes = d->b[i].bytes;
    return TG_OK;
}
