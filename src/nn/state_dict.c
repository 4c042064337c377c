/* state_dict <-> safetensors with PyTorch's keys. */
#include "nn_internal.h"

#include <stdio.h>
#include <string.h>

int tg__save_named_list(const char *path, const tg_named_list *l)
{
    tg_tape *tp = tg_tape_new();
    tg_named_tensor *items = tp ? tg_tape_alloc(tp, sizeof *items * (size_t)(l->n ? l->n : 1), false) : NULL;
    int st = TG_ENOMEM;
    if (items) {
        for (int i = 0; i < l->n; i++) items[i] = (tg_named_tensor){l->names[i], l->tensors[i]};
        st = tg_safetensors_save(path, items, l->n);
    }
    tg_tape_free(tp);
    return st;
}

int tg_module_save(const tg_module *m, const char *path)
{
    if (!m || !path) return tg_error_status(TG_EINVAL, "save: NULL module or path");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_named_list sd;
    int st = tg_module_state_dict(tp, m, &sd);
    if (st == TG_OK) st = tg__save_named_list(path, &sd);
    tg_tape_free(tp);
    return st;
}

/* Copies name into tp; NULL when out of memory. */
static const char *keep_name(tg_tape *tp, const char *name)
{
    size_t len = strlen(name) + 1;
    char *c = tg_tape_alloc(tp, len, false);
    if (c) memcpy(c, name, len);
    return c;
}

/* load_state_dict against the module's own state_dict (its tensors in tp);
 * who prefixes the messages ("load FILE", "load_state_dict") and bad is the
 * status of a mismatch (TG_EFORMAT for a file, TG_EINVAL in memory). With
 * strict false, missing and unexpected keys are listed in keys (names in
 * ktp) instead of failing. */
static int load_entries(tg_tape *tp, tg_module *m, const tg_named_list *file, const char *who, int bad, bool strict,
                        tg_tape *ktp, tg_incompatible_keys *keys)
{
    tg_named_list sd;
    int st = tg_module_state_dict(tp, m, &sd);
    if (st != TG_OK) return st;
    /* Validate everything before changing anything. */
    const tg_tensor **src = tg_tape_alloc(tp, sizeof *src * (size_t)(sd.n ? sd.n : 1), true);
    const char **unexpected = tg_tape_alloc(tp, sizeof *unexpected * (size_t)(file->n ? file->n : 1), false);
    if (!src || !unexpected) return TG_ENOMEM;
    int n_unexpected = 0, n_missing = 0;
    for (int j = 0; j < file->n; j++) {
        if (!file->names[j] || !file->tensors[j]) return tg_error_status(TG_EINVAL, "%s: entry %d is NULL", who, j);
        bool known = false;
        for (int i = 0; i < sd.n; i++)
            if (strcmp(file->names[j], sd.names[i]) == 0) {
                if (!src[i]) src[i] = file->tensors[j]; /* the first of repeated keys, as the file lookup */
                known = true;
            }
        if (!known) {
            if (strict) st = st ? st : tg_error_status(bad, "%s: unexpected key '%s'", who, file->names[j]);
            unexpected[n_unexpected++] = file->names[j];
        }
    }
    for (int i = 0; i < sd.n; i++) {
        char a[64], b[64];
        if (!src[i]) {
            if (strict) return tg_error_status(bad, "%s: missing key '%s'", who, sd.names[i]);
            n_missing++;
            continue;
        }
        if (!tg_same_shape(src[i], sd.tensors[i]))
            return tg_error_status(bad, "%s: size mismatch for '%s': %s has %s, module has %s", who, sd.names[i],
                                   bad == TG_EFORMAT ? "file" : "state_dict", tg_shape_str(src[i], a, 64),
                                   tg_shape_str(sd.tensors[i], b, 64));
        if (!tg__is_float(src[i]->dtype) && !tg__is_compact(src[i]->dtype)) /* bf16, q8_0 widen or round as copied */
            return tg_error_status(bad, "%s: '%s' has dtype %s, expected a float type", who, sd.names[i],
                                   tg_dtype_name(src[i]->dtype));
    }
    if (st != TG_OK) return st;
    if (keys) {
        *keys = (tg_incompatible_keys){0};
        keys->missing = tg_tape_alloc(ktp, sizeof *keys->missing * (size_t)(n_missing ? n_missing : 1), false);
        keys->unexpected = tg_tape_alloc(ktp, sizeof *keys->unexpected * (size_t)(n_unexpected ? n_unexpected : 1), false);
        if (!keys->missing || !keys->unexpected) return TG_ENOMEM;
        for (int i = 0; i < sd.n; i++)
            if (!src[i] && !(keys->missing[keys->n_missing++] = keep_name(ktp, sd.names[i]))) return TG_ENOMEM;
        for (int j = 0; j < n_unexpected; j++)
            if (!(keys->unexpected[keys->n_unexpected++] = keep_name(ktp, unexpected[j]))) return TG_ENOMEM;
    }
    for (int i = 0; i < sd.n; i++) {
        if (!src[i]) continue;
        tg_k_copy(sd.tensors[i], src[i]);
        tg__bump(sd.tensors[i]);
    }
    return TG_OK;
}

int tg_module_load_state_dict_ex(tg_module *m, const tg_named_list *sd, bool strict, tg_tape *tp,
                                 tg_incompatible_keys *keys)
{
    if (!m || !sd || (sd->n > 0 && (!sd->names || !sd->tensors)))
        return tg_error_status(TG_EINVAL, "load_state_dict: NULL argument");
    if (keys && !tp) return tg_error_status(TG_EINVAL, "load_state_dict: keys asked for without a tape to hold them");
    tg_tape *scratch = tg_tape_new();
    if (!scratch) return tg_error_status(TG_ENOMEM, "load_state_dict: out of memory");
    int st = load_entries(scratch, m, sd, "load_state_dict", TG_EINVAL, strict, tp, keys);
    tg_tape_free(scratch);
    return st;
}

int tg_module_load_state_dict(tg_module *m, const tg_named_list *sd)
{
    return tg_module_load_state_dict_ex(m, sd, true, NULL, NULL);
}

int tg_module_load_ex(tg_module *m, const char *path, bool strict, tg_tape *tp, tg_incompatible_keys *keys)
{
    if (!m || !path) return tg_error_status(TG_EINVAL, "load: NULL module or path");
    if (keys && !tp) return tg_error_status(TG_EINVAL, "load: keys asked for without a tape to hold them");
    tg_tape *scratch = tg_tape_new();
    if (!scratch) return TG_ENOMEM;
    tg_safetensors file;
    int st = tg_safetensors_load_ex(scratch, path, &(tg_safetensors_options){.keep_bf16 = true}, &file);
    if (st == TG_OK) {
        size_t len = strlen(path) + 8;
        char *who = tg_tape_alloc(scratch, len, false);
        tg_named_list l = {file.n, (const char **)file.names, file.tensors};
        if (!who) st = TG_ENOMEM;
        else {
            snprintf(who, len, "load %s", path);
            st = load_entries(scratch, m, &l, who, TG_EFORMAT, strict, tp, keys);
        }
    }
    tg_tape_free(scratch);
    return st;
}

int tg_module_load(tg_module *m, const char *path) { return tg_module_load_ex(m, path, true, NULL, NULL); }
