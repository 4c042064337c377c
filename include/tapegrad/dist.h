/* tapegrad/dist.h: data-parallel training over MPI, as PyTorch's
 * DistributedDataParallel. N processes (ranks), started by mpirun, each
 * build the same model, take their slice of every global batch and average
 * their gradients with MPI all-reduce in buckets started while backward is
 * still running; every rank then takes the same optimizer step. Dropout
 * masks are the rank's slice of the masks one process would draw, so the
 * losses do not depend on N (up to float32 rounding of the sums).
 *
 *     tg_dist_init(&argc, &argv);                      // size 1 without mpirun
 *     tg_module *gpt = tg_gpt_new(model_tape, &cfg);   // same seed on every rank
 *     tg_dist_ddp *ddp = tg_dist_ddp_new(gpt, (tg_dist_ddp_options){0});
 *     tg_optimizer *opt = tg_adamw_new(model_tape, gpt, ...);
 *     for (...) {                                      // the same global batch on every rank
 *         tg_tensor *xs = tg_dist_batch_slice(step, x), *ys = tg_dist_batch_slice(step, y);
 *         tg_optimizer_zero_grad(opt);
 *         tg_backward(loss_of(xs, ys), NULL, false);   // buckets start as gradients finish
 *         tg_dist_ddp_sync(ddp);                       // wait; gradients are the global batch's
 *         tg_optimizer_step(opt);
 *     }
 *     tg_dist_ddp_free(ddp);
 *     tg_dist_finalize();
 *
 * Only the thread that called tg_dist_init makes MPI calls. The library
 * never aborts the job: a failed call returns TG_EDIST (or another status)
 * with a message; a program that cannot go on while other ranks wait in a
 * collective calls tg_dist_abort, which ends every rank. In a build without
 * MPI (tg_dist_available() false) the functions work for one process and
 * tg_dist_init refuses a job that mpirun started with several. */
#ifndef TAPEGRAD_DIST_H
#define TAPEGRAD_DIST_H

#include "tapegrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this build of tapegrad has MPI. */
TG_API bool tg_dist_available(void);
/* How many processes mpirun (or another MPI launcher) started in this job;
 * 0 when no launcher started this process. */
TG_API int tg_dist_launched(void);
/* MPI_Init_thread (funneled) when the process was launched by mpirun;
 * otherwise one rank of one, without MPI. TG_EDIST when mpirun started
 * several processes and this build has no MPI, or MPI fails to start.
 * Calling it again is a no-op. */
TG_API int tg_dist_init(int *argc, char ***argv);
/* MPI_Finalize (when tg_dist_init started MPI). */
TG_API int tg_dist_finalize(void);
/* This process's rank, the number of ranks (0 and 1 before tg_dist_init),
 * and the number of ranks on this machine (to share its cores). */
TG_API int tg_dist_rank(void);
TG_API int tg_dist_size(void);
TG_API int tg_dist_local_size(void);
/* Ends every rank of the job with this exit code (MPI_Abort); without MPI,
 * exits the process. For programs only: the library never calls it. */
TG_API void tg_dist_abort(int code);

typedef enum { TG_DIST_SUM = 0, TG_DIST_MAX = 1, TG_DIST_MIN = 2 } tg_dist_op;
/* Collectives over all ranks (every rank must call them, in the same order). */
TG_API int tg_dist_barrier(void);
TG_API int tg_dist_broadcast(void *buf, size_t bytes, int root);
/* In place: v[i] = op over the ranks of v[i]. */
TG_API int tg_dist_all_reduce_f64(double *v, int64_t n, tg_dist_op op);
/* In place on a contiguous float32 or float64 tensor. */
TG_API int tg_dist_all_reduce(tg_tensor *t, tg_dist_op op);
/* Every tensor of m's state_dict (parameters and buffers) from rank 0. */
TG_API int tg_dist_broadcast_module(tg_module *m);
/* Whether every rank passed TG_OK: TG_OK, or TG_EDIST naming the lowest
 * failing rank (*failed_rank, may be NULL; -1 when all passed). Lets ranks
 * that failed a step of their own (reading a file, building a model) stop
 * together, without a hang. */
TG_API int tg_dist_agree(int status, int *failed_rank);

/* This rank's share of a global batch of `global` rows: rows [*start,
 * *start + *count). TG_EINVAL when global is not divisible by the size. */
TG_API int tg_dist_batch_range(int64_t global, int64_t *start, int64_t *count);
/* The same as a view of x's first dimension (x: the global batch). */
TG_API tg_tensor *tg_dist_batch_slice(tg_tape *tp, tg_tensor *x);

/* ---- DistributedDataParallel ------------------------------------------------------ */

typedef struct tg_dist_ddp tg_dist_ddp; /* opaque */
typedef struct {
    /* bucket size cap in bytes (0: 25 MiB, DDP's bucket_cap_mb); the first
     * bucket is capped at 1 MiB as DDP's is, so the first all-reduce
     * starts early */
    size_t bucket_bytes;
} tg_dist_ddp_options;

/* Wraps model's parameters: broadcasts the model's state from rank 0,
 * groups the parameters that require grad (frozen ones are left alone: no
 * gradient to average) in reverse registration order into buckets (a
 * bucket closes when it reaches the cap; one dtype per bucket), makes
 * each parameter's .grad a view into its bucket (zeros; values it had are
 * kept) and sets the model's generator (tg_module_generator) to draw this
 * rank's slice of every dropout mask. From then on each tg_backward on this
 * thread starts a bucket's MPI_Iallreduce as soon as the bucket's gradients
 * are final, in bucket order, and drives the transfers while backward runs.
 * One per thread at a time. NULL on error, with a message. */
TG_API tg_dist_ddp *tg_dist_ddp_new(tg_module *model, tg_dist_ddp_options opt);
/* Before the optimizer step: starts the buckets backward did not finish (a
 * parameter no node reached contributes zeros), waits for every
 * all-reduce, and leaves each .grad the mean over the ranks. TG_ESTATE when
 * a gradient was replaced (tg_module_to_dtype after tg_dist_ddp_new) or
 * backward ran twice without a sync. */
TG_API int tg_dist_ddp_sync(tg_dist_ddp *d);
/* Stops watching backward; the parameters' .grad become NULL (they lived in
 * the buckets) and the generator draws whole masks again. */
TG_API void tg_dist_ddp_free(tg_dist_ddp *d);

typedef struct {
    int64_t buckets, params;
    size_t bytes;                  /* gradient bytes all-reduced per step */
    int64_t syncs;                 /* tg_dist_ddp_sync calls so far */
    int64_t started_in_backward;   /* last sync: buckets started before backward ended */
    double wait_seconds;           /* last sync: time spent waiting for the all-reduces */
    double total_wait_seconds;     /* all syncs */
} tg_dist_ddp_stats;
TG_API int tg_dist_ddp_get_stats(const tg_dist_ddp *d, tg_dist_ddp_stats *out);
/* Bucket i: its parameters are entries first .. first + count - 1 of the
 * reversed named_parameters list (entry 0 = the last registered); bytes. */
TG_API int tg_dist_ddp_bucket(const tg_dist_ddp *d, int64_t i, int64_t *first, int64_t *count, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
