/* The open module system: module objects, registration of parameters,
 * buffers and children, look-ups by dotted name, train/eval and the other
 * tree-wide settings, dtype conversion and the tree walkers (named_parameters,
 * state_dict). Nothing here knows a module type by name: Linear, the
 * attention modules and a user's own modules all come through this door. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

tg_tensor *tg_parameter_new(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape)
{
    if (!tg__is_float(dt)) return tg_error("parameter: dtype must be float32 or float64");
    tg_tensor *p = tg_zeros(tp, dt, ndim, shape);
    if (!p) return NULL;
    p->requires_grad = true;
    p->is_param = true;
    return p;
}

tg_tensor *tg__parameter_drawn(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape,
                               int (*init)(tg_tensor *w, void *ctx), void *ctx)
{
    if (dt != TG_BF16 && dt != TG_Q8) {
        tg_tensor *p = tg_parameter_new(tp, dt, ndim, shape);
        return p && init(p, ctx) == TG_OK ? p : NULL;
    }
    /* the random fills draw a bf16 (q8_0) tensor as float32 and round
     * (quantize) the values as they are made (src/tensor/rng.c): no float32
     * copy */
    tg_tensor *p = tg_empty(tp, dt, ndim, shape);
    if (!p || init(p, ctx) != TG_OK) return NULL;
    p->is_param = true; /* frozen: requires_grad stays false */
    return p;
}

/* ---- checks shared by the built-in modules ----------------------------------------------------- */

bool tg__check_size(const char *op, const char *what, int64_t v)
{
    if (v <= 0) {
        tg_error("%s: %s must be positive, got %lld", op, what, (long long)v);
        return false;
    }
    if (v > ((int64_t)1 << 31)) {
        tg_error("%s: %s of %lld is too large", op, what, (long long)v);
        return false;
    }
    return true;
}

bool tg__check_dropout(const char *op, double p)
{
    if (!(p >= 0 && p < 1)) {
        tg_error("%s: dropout probability %g is outside [0, 1)", op, p);
        return false;
    }
    return true;
}

bool tg__check_ninputs(const tg_module *m, int n, int want)
{
    if (n == want) return true;
    tg_error("%s: expected %d input%s, got %d", tg_module_type_name(m), want, want == 1 ? "" : "s", n);
    return false;
}

void tg__py_float(char *buf, size_t size, double v)
{
    /* repr(float): the shortest digits that read back as v; positional
     * notation for exponents in [-4, 16), with ".0" on whole numbers. */
    if (isnan(v)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "inf" : "-inf");
        return;
    }
    char digits[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, v);
        if (strtod(digits, NULL) == v) break;
    }
    snprintf(digits, sizeof digits, "%.*e", prec - 1, v);
    int exp10 = atoi(strchr(digits, 'e') + 1);
    if (exp10 < -4 || exp10 >= 16) {
        /* d.ddde-05: Python keeps at least two exponent digits, drops a bare ".0" */
        char mant[32];
        size_t ml = (size_t)(strchr(digits, 'e') - digits);
        memcpy(mant, digits, ml);
        mant[ml] = '\0';
        snprintf(buf, size, "%se%c%02d", mant, exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    int decimals = prec - 1 - exp10;
    if (decimals < 1) decimals = 1;
    snprintf(buf, size, "%.*f", decimals, v);
}

/* ---- the module object ------------------------------------------------------------------------- */

tg_module *tg_module_new(tg_tape *tp, const tg_module_type *type, size_t state_size)
{
    if (!tp) return tg_error("module: NULL tape");
    if (!type || !type->name || !type->name[0]) return tg_error("module: a module type needs a name");
    tg_module *m = tg_tape_alloc(tp, sizeof *m, true);
    if (!m) return NULL;
    m->type = type;
    m->tape = tp;
    m->training = true;
    if (state_size) {
        m->state = tg_tape_alloc(tp, state_size, true);
        if (!m->state) return NULL;
    }
    return m;
}

void *tg_module_state(tg_module *m) { return m ? m->state : tg_error("module_state: NULL module"); }
const void *tg_module_state_const(const tg_module *m)
{
    return m ? m->state : tg_error("module_state: NULL module");
}
const tg_module_type *tg_module_get_type(const tg_module *m) { return m ? m->type : NULL; }
const char *tg_module_type_name(const tg_module *m) { return !m ? NULL : m->class_name ? m->class_name : m->type->name; }
void tg__module_set_class(tg_module *m, const char *name) { m->class_name = name; }
tg_tape *tg_module_tape(const tg_module *m) { return m ? m->tape : NULL; }

/* ---- registration -------------------------------------------------------------------------------- */

static int find(const tg__entries *e, const char *name)
{
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->items[i].name, name) == 0) return i;
    return -1;
}

void *tg__entry_get(const tg__entries *e, const char *name)
{
    int i = find(e, name);
    return i < 0 ? NULL : e->items[i].ptr;
}

static const char *const kind_names[3] = {"parameter", "buffer", "module"};

/* Adds (or replaces, same kind and name) an entry, after the checks every
 * kind shares: a valid name not taken by another kind. */
static int put(tg_module *m, int kind, const char *name, void *ptr, bool persistent)
{
    tg__entries *all[3] = {&m->params, &m->buffers, &m->children};
    const char *what = kind_names[kind];
    if (!name) return tg_error_status(TG_EINVAL, "%s: register %s: NULL name", tg_module_type_name(m), what);
    if (!name[0]) return tg_error_status(TG_EINVAL, "%s: register %s: empty name", tg_module_type_name(m), what);
    if (strchr(name, '.'))
        return tg_error_status(TG_EINVAL, "%s: register %s: name '%s' must not contain \".\"", tg_module_type_name(m), what,
                               name);
    for (int k = 0; k < 3; k++)
        if (k != kind && find(all[k], name) >= 0)
            return tg_error_status(TG_EINVAL, "%s: register %s: attribute '%s' already exists as a %s",
                                   tg_module_type_name(m), what, name, kind_names[k]);
    tg__entries *e = all[kind];
    int i = find(e, name);
    if (i >= 0) { /* assignment to an existing attribute */
        e->items[i].ptr = ptr;
        e->items[i].persistent = persistent;
        return TG_OK;
    }
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 4;
        tg__entry *items = tg_tape_alloc(m->tape, sizeof *items * (size_t)cap, false);
        if (!items) return TG_ENOMEM;
        if (e->n) memcpy(items, e->items, sizeof *items * (size_t)e->n);
        e->items = items;
        e->cap = cap;
    }
    size_t len = strlen(name) + 1;
    char *copy = tg_tape_alloc(m->tape, len, false);
    if (!copy) return TG_ENOMEM;
    memcpy(copy, name, len);
    e->items[e->n++] = (tg__entry){copy, ptr, persistent};
    return TG_OK;
}

/* A NULL module is an error; a NULL item most likely follows an earlier
 * failure (a constructor that returned NULL), whose message is kept. */
static int check_args(const char *op, const tg_module *m, const void *item)
{
    if (!m) return tg_error_status(TG_EINVAL, "%s: NULL module", op);
    if (!item) {
        tg__error_null_input(op);
        return TG_EINVAL;
    }
    return TG_OK;
}

int tg_module_register_parameter(tg_module *m, const char *name, tg_tensor *p)
{
    int st = check_args("register_parameter", m, p);
    if (st) return st;
    if (!tg__is_float(p->dtype) && !tg__is_compact(p->dtype))
        return tg_error_status(TG_EINVAL, "%s: parameter '%s' must be float32 or float64 (or a frozen bfloat16 or q8_0), got %s",
                               tg_module_type_name(m), name ? name : "(null)", tg_dtype_name(p->dtype));
    if (p->grad_fn)
        return tg_error_status(TG_EINVAL, "%s: cannot register a non-leaf tensor as parameter '%s' (%s); "
                               "parameters must be created explicitly", tg_module_type_name(m), name ? name : "(null)",
                               tg_grad_fn_name(p));
    st = put(m, 0, name, p, true);
    if (st == TG_OK && !p->is_param) {
        p->is_param = true;
        p->requires_grad = !tg__is_compact(p->dtype); /* a bf16 or q8_0 weight is frozen */
    }
    return st;
}

int tg_module_register_buffer(tg_module *m, const char *name, tg_tensor *b, bool persistent)
{
    int st = check_args("register_buffer", m, b);
    return st ? st : put(m, 1, name, b, persistent);
}

/* Is target m itself or inside m's tree? */
static bool contains(const tg_module *m, const tg_module *target)
{
    if (m == target) return true;
    for (int i = 0; i < m->children.n; i++)
        if (contains(m->children.items[i].ptr, target)) return true;
    return false;
}

int tg_module_add_module(tg_module *m, const char *name, tg_module *child)
{
    int st = check_args("add_module", m, child);
    if (st) return st;
    if (contains(child, m))
        return tg_error_status(TG_EINVAL, "%s: add_module '%s': the %s is %s, which would make a cycle",
                               tg_module_type_name(m), name ? name : "(null)", tg_module_type_name(child),
                               child == m ? "the module itself" : "an ancestor of it");
    return put(m, 2, name, child, true);
}

/* ---- look-ups ------------------------------------------------------------------------------------ */

/* The child of m named by the next component of *path (advancing past it and
 * its dot); NULL with an error naming the component. */
static tg_module *step(const char *op, const tg_module *m, const char **path)
{
    const char *dot = strchr(*path, '.');
    size_t len = dot ? (size_t)(dot - *path) : strlen(*path);
    for (int i = 0; i < m->children.n; i++) {
        const char *nm = m->children.items[i].name;
        if (strlen(nm) == len && strncmp(nm, *path, len) == 0) {
            *path += len + (dot ? 1 : 0);
            return m->children.items[i].ptr;
        }
    }
    return tg_error("%s: %s has no submodule `%.*s`", op, tg_module_type_name(m), (int)len, *path);
}

/* The module holding the last component of dotted and that component. */
static const tg_module *owner(const char *op, const tg_module *m, const char *dotted, const char **leaf)
{
    if (!m) return tg_error("%s: NULL module", op);
    if (!dotted) return tg_error("%s: NULL name", op);
    const char *last = strrchr(dotted, '.');
    *leaf = last ? last + 1 : dotted;
    const char *path = dotted;
    while (m && path < *leaf) m = step(op, m, &path);
    return m;
}

tg_module *tg_module_get_submodule(const tg_module *m, const char *dotted_name)
{
    if (!m) return tg_error("get_submodule: NULL module");
    if (!dotted_name) return tg_error("get_submodule: NULL name");
    const char *path = dotted_name;
    tg_module *cur = (tg_module *)m;
    while (cur && *path) cur = step("get_submodule", cur, &path);
    return cur;
}

static tg_tensor *get_tensor(const char *op, const char *what, const tg_module *m, const char *dotted, int kind)
{
    const char *leaf = NULL;
    const tg_module *o = owner(op, m, dotted, &leaf);
    if (!o) return NULL;
    const tg__entries *e = kind == 0 ? &o->params : &o->buffers;
    int i = find(e, leaf);
    if (i < 0) return tg_error("%s: %s has no %s `%s`", op, tg_module_type_name(o), what, leaf);
    return e->items[i].ptr;
}

tg_tensor *tg_module_get_parameter(const tg_module *m, const char *dotted_name)
{
    return get_tensor("get_parameter", "parameter", m, dotted_name, 0);
}

tg_tensor *tg_module_get_buffer(const tg_module *m, const char *dotted_name)
{
    return get_tensor("get_buffer", "buffer", m, dotted_name, 1);
}

int tg_module_num_children(const tg_module *m) { return m ? m->children.n : 0; }

static bool child_index(const tg_module *m, int i)
{
    if (!m) return tg_error("child: NULL module"), false;
    if (i < 0 || i >= m->children.n)
        return tg_error("child: index %d is out of range for %s with %d children", i, tg_module_type_name(m),
                        m->children.n), false;
    return true;
}

tg_module *tg_module_child(const tg_module *m, int i)
{
    return child_index(m, i) ? m->children.items[i].ptr : NULL;
}

const char *tg_module_child_name(const tg_module *m, int i)
{
    return child_index(m, i) ? m->children.items[i].name : NULL;
}

/* ---- forward ---------------------------------------------------------------------------------------- */

bool tg__module_check_call(const char *op, const tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!m) return tg_error("%s: NULL module", op), false;
    const char *name = tg_module_type_name(m);
    if (n < 0 || (n > 0 && !inputs)) return tg_error("%s: bad input list (%d inputs)", name, n), false;
    for (int i = 0; i < n; i++)
        if (!inputs[i]) return tg__error_null_input(name), false;
    if (!m->type->forward)
        return tg_error("%s: this module has no forward (a container: call its children)", name), false;
    return true;
}

static bool tree_requires_grad(const tg_module *m)
{
    for (int i = 0; i < m->params.n; i++)
        if (((const tg_tensor *)m->params.items[i].ptr)->requires_grad) return true;
    for (int i = 0; i < m->children.n; i++)
        if (tree_requires_grad(m->children.items[i].ptr)) return true;
    return false;
}

bool tg__module_call_records(const tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!tg_is_grad_enabled()) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i]->requires_grad) return true;
    return tree_requires_grad(m);
}

tg_tensor *tg_module_call(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!tg__module_check_call("forward", m, n, inputs)) return NULL;
    if (m->recompute && tg__module_call_records(m, n, inputs)) return tg__recompute_call(tp, m, n, inputs);
    return tg__module_run(tp, m, n, inputs);
}

tg_tensor *tg__module_run(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs)
{
    const char *name = tg_module_type_name(m);
    tg__saved_error before;
    tg__error_push(&before);
    /* the tape's numerics, or the module's pin (tg_module_set_numerics),
     * reach every op its forward records and those ops' backward */
    tg_numerics prev = tg__module_enter(tp, m);
    tg_tensor *y = m->type->forward(tp, m, n, inputs);
    tg__tape_leave(tp, prev);
    if (!y) {
        if (!tg_last_error()[0]) tg_error("%s: forward returned NULL without an error", name);
        return NULL;
    }
    tg__error_restore(&before);
    return y;
}

tg_tensor *tg_module_forward(tg_tape *tp, tg_module *m, tg_tensor *x) { return tg_module_call(tp, m, 1, &x); }

/* ---- tree-wide settings ------------------------------------------------------------------------------- */

typedef enum { SET_TRAINING, SET_FUSED, SET_GENERATOR, SET_NUMERICS, SET_KV_CACHE } setting;

static void set_tree(tg_module *m, setting what, bool flag, tg_generator *g, tg_numerics nm)
{
    switch (what) {
    case SET_TRAINING: m->training = flag; break;
    case SET_FUSED: m->fused = flag; break;
    case SET_KV_CACHE: m->kv_cache = flag; break;
    case SET_GENERATOR: m->gen = g; break;
    case SET_NUMERICS: m->numerics = nm, m->pinned = true; break;
    }
    for (int i = 0; i < m->children.n; i++) set_tree(m->children.items[i].ptr, what, flag, g, nm);
}

int tg_module_train(tg_module *m, bool training)
{
    if (!m) return tg_error_status(TG_EINVAL, "train: NULL module");
    set_tree(m, SET_TRAINING, training, NULL, TG_NUMERICS_EXACT);
    return TG_OK;
}

int tg_module_set_fused(tg_module *m, bool fused)
{
    if (!m) return tg_error_status(TG_EINVAL, "set_fused: NULL module");
    set_tree(m, SET_FUSED, fused, NULL, TG_NUMERICS_EXACT);
    return TG_OK;
}

int tg_module_set_generator(tg_module *m, tg_generator *g)
{
    if (!m) return tg_error_status(TG_EINVAL, "set_generator: NULL module");
    set_tree(m, SET_GENERATOR, false, g, TG_NUMERICS_EXACT);
    return TG_OK;
}

bool tg_module_is_training(const tg_module *m) { return m && m->training; }
bool tg_module_is_fused(const tg_module *m) { return m && m->fused; }

int tg_module_set_numerics(tg_module *m, tg_numerics mode)
{
    if (!m) return tg_error_status(TG_EINVAL, "set_numerics: NULL module");
    if (!strcmp(tg_numerics_name(mode), "?"))
        return tg_error_status(TG_EINVAL, "set_numerics: %d is not a tg_numerics value", (int)mode);
    set_tree(m, SET_NUMERICS, false, NULL, mode);
    return TG_OK;
}

tg_numerics tg_module_numerics(const tg_module *m) { return m ? m->numerics : TG_NUMERICS_EXACT; }

int tg_module_set_kv_cache(tg_module *m, bool on)
{
    if (!m) return tg_error_status(TG_EINVAL, "set_kv_cache: NULL module");
    set_tree(m, SET_KV_CACHE, on, NULL, TG_NUMERICS_EXACT);
    return TG_OK;
}

bool tg_module_kv_cache_enabled(const tg_module *m) { return m && m->kv_cache; }

int tg_module_set_recompute(tg_module *m, bool on)
{
    if (!m) return tg_error_status(TG_EINVAL, "set_recompute: NULL module");
    if (on && !m->type->forward)
        return tg_error_status(TG_EINVAL, "set_recompute: %s has no forward to recompute (a container: mark its "
                                          "children)", tg_module_type_name(m));
    m->recompute = on;
    return TG_OK;
}

bool tg_module_recompute(const tg_module *m) { return m && m->recompute; }

static int reset_tree(tg_module *m)
{
    if (m->type->reset_cache) {
        int st = m->type->reset_cache(m);
        if (st != TG_OK) return st;
    }
    for (int i = 0; i < m->children.n; i++) {
        int st = reset_tree(m->children.items[i].ptr);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

int tg_module_reset_kv_cache(tg_module *m)
{
    if (!m) return tg_error_status(TG_EINVAL, "reset_kv_cache: NULL module");
    return reset_tree(m);
}
tg_generator *tg_module_generator(const tg_module *m) { return m ? m->gen : NULL; }

/* ---- walking the tree ------------------------------------------------------------------------------------ */

/* A set of pointers (open addressing), malloc'd for the length of a walk. */
typedef struct {
    const void **slots;
    size_t cap, n;
} ptr_set;

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* Adds p; 1 if it was new, 0 if already there, -1 out of memory. */
static int ptr_set_add(ptr_set *s, const void *p)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        const void **slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slots[i]) continue;
            size_t j = ptr_hash(s->slots[i], cap);
            while (slots[j]) j = (j + 1) & (cap - 1);
            slots[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    }
    size_t j = ptr_hash(p, s->cap);
    while (s->slots[j]) {
        if (s->slots[j] == p) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->slots[j] = p;
    s->n++;
    return 1;
}

typedef struct {
    tg_tape *tp;           /* where names and the result arrays go */
    bool dedup;            /* named_parameters: each module and tensor once */
    bool params, buffers;  /* what to list */
    bool all_buffers;      /* non-persistent buffers too */
    bool no_names;         /* the tensors only (names NULL) */
    ptr_set modules, tensors;
    tg_tensor **tensors_out;
    const char **names_out;
    int n, cap;            /* in the malloc'd arrays above */
    int status;
} walker;

/* Whether to list p: always without dedup, else only the first time. */
static bool first_visit(walker *w, ptr_set *seen, const void *p)
{
    if (!w->dedup) return true;
    int fresh = ptr_set_add(seen, p);
    if (fresh < 0) w->status = tg_error_status(TG_ENOMEM, "named_parameters: out of memory");
    return fresh > 0;
}

static void emit(walker *w, const char *prefix, const char *name, tg_tensor *t)
{
    if (w->status) return;
    if (!first_visit(w, &w->tensors, t)) return;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 32;
        tg_tensor **t2 = realloc(w->tensors_out, sizeof *t2 * (size_t)cap);
        if (t2) w->tensors_out = t2;
        const char **n2 = t2 ? realloc(w->names_out, sizeof *n2 * (size_t)cap) : NULL;
        if (!n2) {
            w->status = tg_error_status(TG_ENOMEM, "named_parameters: out of memory");
            return;
        }
        w->names_out = n2;
        w->cap = cap;
    }
    char *full = NULL;
    if (!w->no_names) {
        size_t len = strlen(prefix) + strlen(name) + 1;
        if (!(full = tg_tape_alloc(w->tp, len, false))) {
            w->status = TG_ENOMEM;
            return;
        }
        snprintf(full, len, "%s%s", prefix, name);
    }
    w->names_out[w->n] = full;
    w->tensors_out[w->n++] = t;
}

/* PyTorch's order: own parameters, own (persistent) buffers, then each child. */
static void walk(walker *w, const tg_module *m, const char *prefix)
{
    if (w->status) return;
    if (!first_visit(w, &w->modules, m)) return;
    if (w->params)
        for (int i = 0; i < m->params.n; i++) emit(w, prefix, m->params.items[i].name, m->params.items[i].ptr);
    if (w->buffers)
        for (int i = 0; i < m->buffers.n; i++)
            if (w->all_buffers || m->buffers.items[i].persistent)
                emit(w, prefix, m->buffers.items[i].name, m->buffers.items[i].ptr);
    for (int c = 0; c < m->children.n && !w->status; c++) {
        const char *cn = m->children.items[c].name;
        size_t len = strlen(prefix) + strlen(cn) + 2;
        char *sub = malloc(len);
        if (!sub) {
            w->status = tg_error_status(TG_ENOMEM, "named_parameters: out of memory");
            return;
        }
        snprintf(sub, len, "%s%s.", prefix, cn);
        walk(w, m->children.items[c].ptr, sub);
        free(sub);
    }
}

/* Runs the walk and moves the result into out (arrays in tp). */
static int collect(walker *w, const char *op, const tg_module *m, tg_named_list *out)
{
    if (!out) return tg_error_status(TG_EINVAL, "%s: NULL result", op);
    out->n = 0;
    out->names = NULL;
    out->tensors = NULL;
    if (!m) return tg_error_status(TG_EINVAL, "%s: NULL module", op);
    if (!w->tp) return tg_error_status(TG_EINVAL, "%s: NULL tape", op);
    walk(w, m, "");
    if (!w->status) {
        size_t cnt = (size_t)(w->n ? w->n : 1);
        out->names = tg_tape_alloc(w->tp, sizeof *out->names * cnt, false);
        out->tensors = tg_tape_alloc(w->tp, sizeof *out->tensors * cnt, false);
        if (!out->names || !out->tensors) {
            w->status = TG_ENOMEM;
        } else {
            if (w->n) {
                memcpy(out->names, w->names_out, sizeof *out->names * (size_t)w->n);
                memcpy(out->tensors, w->tensors_out, sizeof *out->tensors * (size_t)w->n);
            }
            out->n = w->n;
        }
    }
    free(w->modules.slots);
    free(w->tensors.slots);
    free(w->names_out);
    free(w->tensors_out);
    return w->status;
}

int tg_module_named_parameters(tg_tape *tp, const tg_module *m, tg_named_list *out)
{
    walker w = {.tp = tp, .dedup = true, .params = true};
    return collect(&w, "named_parameters", m, out);
}

int tg__module_parameters(tg_tape *tp, const tg_module *m, tg_named_list *out)
{
    walker w = {.tp = tp, .dedup = true, .params = true, .no_names = true};
    return collect(&w, "parameters", m, out);
}

int tg_module_state_dict(tg_tape *tp, const tg_module *m, tg_named_list *out)
{
    walker w = {.tp = tp, .params = true, .buffers = true};
    return collect(&w, "state_dict", m, out);
}

int tg_module_zero_grad(tg_module *m)
{
    if (!m) return tg_error_status(TG_EINVAL, "zero_grad: NULL module");
    for (int i = 0; i < m->params.n; i++) tg_zero_grad(m->params.items[i].ptr);
    for (int i = 0; i < m->children.n; i++) tg_module_zero_grad(m->children.items[i].ptr);
    return TG_OK;
}

int tg_module_requires_grad_(tg_module *m, bool requires_grad)
{
    if (!m) return tg_error_status(TG_EINVAL, "requires_grad_: NULL module");
    for (int i = 0; i < m->params.n; i++) {
        int st = tg_requires_grad_(m->params.items[i].ptr, requires_grad);
        if (st != TG_OK) return st;
    }
    for (int i = 0; i < m->children.n; i++) {
        int st = tg_module_requires_grad_(m->children.items[i].ptr, requires_grad);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* The element count of every parameter (each tensor once), or of those that
 * require grad only. */
static int64_t count_parameters(const char *op, const tg_module *m, bool trainable_only)
{
    if (!m) {
        tg_error("%s: NULL module", op);
        return -1;
    }
    tg_tape *tp = tg_tape_new();
    tg_named_list ps;
    int64_t n = -1;
    if (tp && tg_module_named_parameters(tp, m, &ps) == TG_OK) {
        n = 0;
        for (int i = 0; i < ps.n; i++)
            if (!trainable_only || ps.tensors[i]->requires_grad) n += tg_numel(ps.tensors[i]);
    }
    tg_tape_free(tp);
    return n;
}

int64_t tg_module_num_parameters(const tg_module *m) { return count_parameters("num_parameters", m, false); }

int64_t tg_module_num_trainable_parameters(const tg_module *m)
{
    return count_parameters("num_trainable_parameters", m, true);
}

/* ---- dtype ----------------------------------------------------------------------------------------------- */

int tg_module_to_dtype(tg_tape *tp, tg_module *m, tg_dtype dt)
{
    if (!m) return tg_error_status(TG_EINVAL, "to_dtype: NULL module");
    if (!tp) return tg_error_status(TG_EINVAL, "to_dtype: NULL tape");
    bool bf16 = tg__is_compact(dt); /* bf16 or q8_0: the frozen matrices only */
    if (!tg__is_float(dt) && !bf16)
        return tg_error_status(TG_EINVAL, "to_dtype: modules hold float32 or float64 (and frozen bfloat16 or q8_0 weights), not %s",
                               tg_dtype_name(dt));
    /* Every distinct float tensor of the tree (parameters and all buffers;
     * to bf16 the weight matrices only: buffers, biases and norm scales are
     * inputs of float arithmetic). */
    tg_tape *scratch = tg_tape_new();
    if (!scratch) return TG_ENOMEM;
    walker w = {.tp = scratch, .dedup = true, .params = true, .buffers = !bf16, .all_buffers = !bf16};
    tg_named_list all;
    int st = collect(&w, "to_dtype", m, &all);
    /* Convert everything first, then switch: a failure leaves the module as it was. */
    tg_tensor **vals = NULL, **grads = NULL;
    if (st == TG_OK) {
        size_t cnt = (size_t)(all.n ? all.n : 1);
        vals = tg_tape_alloc(scratch, sizeof *vals * cnt, true);
        grads = tg_tape_alloc(scratch, sizeof *grads * cnt, true);
        if (!vals || !grads) st = TG_ENOMEM;
    }
    for (int i = 0; st == TG_OK && i < all.n; i++) {
        tg_tensor *t = all.tensors[i];
        if ((!tg__is_float(t->dtype) && !tg__is_compact(t->dtype)) || t->dtype == dt) continue;
        if (bf16 && t->ndim < 2) continue; /* biases and norm scales: float32 arithmetic reads them */
        if (dt == TG_Q8 && t->shape[t->ndim - 1] % TG_Q8_BLOCK) continue; /* rows of whole blocks only, as llama.cpp */
        if (bf16 && t->requires_grad) {
            st = tg_error_status(TG_EINVAL, "to_dtype: parameter '%s' requires grad: trainable parameters keep "
                                 "float32 (freeze it with tg_module_requires_grad_ before converting to %s)",
                                 all.names[i], dt == TG_Q8 ? "q8_0" : "bfloat16");
            break;
        }
        vals[i] = tg_to_dtype(tp, t, dt);
        if (t->grad) grads[i] = tg_to_dtype(tp, t->grad, dt);
        if (!vals[i] || (t->grad && !grads[i])) st = TG_ENOMEM;
    }
    for (int i = 0; st == TG_OK && i < all.n; i++) {
        tg_tensor *t = all.tensors[i], *v = vals[i];
        if (!v) continue;
        t->dtype = dt;
        t->data = v->data;
        t->storage = v->storage;
        tg__bump(t); /* a node that saved t saw other data */
        t->offset = v->offset;
        memcpy(t->stride, v->stride, sizeof t->stride);
        t->tape = tp;
        if (t->grad) t->grad = grads[i];
    }
    tg_tape_free(scratch);
    return st;
}

/* ---- activation recomputation ------------------------------------------------------------------- */

/* Activation recomputation (torch.utils.checkpoint, its reentrant variant):
 * a module call whose activations the step tape does not keep. The forward
 * runs with recording off in the step tape's side tape (src/tensor/tape.c),
 * which is emptied once the output is copied out, and one node,
 * CheckpointFunctionBackward, is recorded as a user function
 * (src/autograd/function.c). Its backward puts the generators back where the
 * forward found them, runs the forward again with recording on from the
 * saved inputs, runs backward through that graph (the parameters' .grad
 * accumulates as without recomputation; the engine runs a backward nested in
 * a node's, src/autograd/engine.c), hands the inputs' gradients back and
 * leaves the generators where the step had taken them: the same dropout
 * masks, and the stream afterwards as if nothing had been replayed. */


/* What the node keeps besides tensors (tg_fn_data): the module, the policy
 * around the call and the generators' states before its forward. The node's
 * inputs are the call's nin inputs, then the tree's parameters (so that
 * backward reaches the call whenever a parameter needs a gradient, and a
 * gradient watch sees the parameters fed by this node). */
typedef struct {
    tg_module *m;
    int nin;
    tg_numerics numerics;
    int ngen;
    tg_generator **gens;
    uint8_t *states; /* ngen * TG_GENERATOR_STATE_BYTES */
} recompute;

/* Every distinct generator the tree's modules draw from (NULL is the
 * default generator) into gens (room for one per module); returns the count. */
static int tree_generators(const tg_module *m, tg_generator **gens, int n)
{
    tg_generator *g = m->gen ? m->gen : tg_default_generator();
    bool seen = false;
    for (int i = 0; i < n && !seen; i++) seen = gens[i] == g;
    if (!seen) gens[n++] = g;
    for (int i = 0; i < m->children.n; i++) n = tree_generators(m->children.items[i].ptr, gens, n);
    return n;
}

static int tree_size(const tg_module *m)
{
    int n = 1;
    for (int i = 0; i < m->children.n; i++) n += tree_size(m->children.items[i].ptr);
    return n;
}

/* The generators' states into states, or (set) out of it. */
static int generators_state(const recompute *c, uint8_t *states, bool set)
{
    for (int i = 0; i < c->ngen; i++) {
        uint8_t *s = states + (size_t)i * TG_GENERATOR_STATE_BYTES;
        int st = set ? tg_generator_set_state(c->gens[i], s, TG_GENERATOR_STATE_BYTES)
                     : tg_generator_get_state(c->gens[i], s, TG_GENERATOR_STATE_BYTES);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* forward: out = m(inputs), computed in the side tape, copied into tp */
static tg_tensor *recompute_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    recompute *c = tg_fn_data(ctx, sizeof *c);
    if (!c || tg_fn_save_for_backward(ctx, n, in) != TG_OK) return NULL;
    tg_tape *side = tg__tape_side(tp);
    tg_tensor *y = side ? tg__module_run(side, c->m, c->nin, in) : NULL;
    tg_tensor *out = y ? tg_empty(tp, y->dtype, y->ndim, y->shape) : NULL;
    if (out) tg_k_copy(out, y);
    tg_tape_reset(side);
    return out;
}

/* The forward again, from the saved inputs as leaves that require grad where
 * the originals did, with the generators as the forward found them; then
 * backward from its output with dy. The inputs' gradients live in the side
 * tape until its next use, after the engine has added them up. */
static int recompute_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *dy, tg_tensor **dx)
{
    recompute *c = tg_fn_data(ctx, sizeof *c);
    tg_tape *side = c ? tg__tape_side(tp) : NULL;
    uint8_t *now = side ? tg_tape_alloc(side, (size_t)c->ngen * TG_GENERATOR_STATE_BYTES + 1, false) : NULL;
    tg_tensor **x = now ? tg_tape_alloc(side, sizeof *x * (size_t)(c->nin + 1), false) : NULL;
    if (!x) return TG_ENOMEM;
    tg_tape_set_numerics(side, c->numerics);
    for (int i = 0; i < c->nin; i++) {
        tg_tensor *saved = tg_fn_saved(ctx, i);
        if (!saved || !(x[i] = tg_detach(side, saved))) return TG_ENOMEM;
        x[i]->requires_grad = saved->requires_grad;
    }
    int st = generators_state(c, now, false);
    if (st == TG_OK) st = generators_state(c, c->states, true);
    if (st != TG_OK) return st;
    bool prev = tg_set_grad_enabled(true);
    tg_tensor *y = tg__module_run(side, c->m, c->nin, x);
    tg_set_grad_enabled(prev);
    st = generators_state(c, now, true);
    if (!y) return TG_EINVAL;
    if (st == TG_OK && y->requires_grad) st = tg_backward(y, dy, false);
    for (int i = 0; i < c->nin; i++) dx[i] = x[i]->requires_grad ? x[i]->grad : NULL;
    return st;
}

static const tg_function recompute_fn = {
    .name = "CheckpointFunctionBackward", .forward = recompute_forward, .backward = recompute_backward};

tg_tensor *tg__recompute_call(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!tp) return tg_error("%s: module_call_recompute: NULL tape", tg_module_type_name(m));
    tg_named_list ps;
    if (tg__module_parameters(tp, m, &ps) != TG_OK) return NULL;
    recompute c = {.m = m, .nin = n, .numerics = tg_tape_numerics(tp)};
    c.gens = tg_tape_alloc(tp, sizeof *c.gens * (size_t)tree_size(m), false);
    c.ngen = c.gens ? tree_generators(m, c.gens, 0) : 0;
    c.states = c.gens ? tg_tape_alloc(tp, (size_t)c.ngen * TG_GENERATOR_STATE_BYTES, false) : NULL;
    tg_tensor **all = c.states ? tg_tape_alloc(tp, sizeof *all * (size_t)(n + ps.n + 1), false) : NULL;
    if (!all || generators_state(&c, c.states, false) != TG_OK) return NULL;
    for (int i = 0; i < n; i++) all[i] = inputs[i];
    for (int i = 0; i < ps.n; i++) all[n + i] = ps.tensors[i];
    return tg__function_apply_with(tp, &recompute_fn, n + ps.n, all, &c, sizeof c);
}

tg_tensor *tg_module_call_recompute(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!tg__module_check_call("module_call_recompute", m, n, inputs)) return NULL;
    if (!tg__module_call_records(m, n, inputs)) return tg__module_run(tp, m, n, inputs);
    return tg__recompute_call(tp, m, n, inputs);
}
