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

/* load_state_dict against the module's own state_dict (its tensors in tp);
 * who prefixes the messages ("load FILE", "load_state_dict"). */
static int load_entries(tg_tape *tp, tg_module *m, const tg_named_list *file, const char *who)
{
    tg_named_list sd;
    int st = tg_module_state_dict(tp, m, &sd);
    if (st != TG_OK) return st;
    /* Validate everything before changing anything. */
    const tg_tensor **src = tg_tape_alloc(tp, sizeof *src * (size_t)(sd.n ? sd.n : 1), true);
    if (!src) return TG_ENOMEM;
    for (int j = 0; j < file->n; j++) {
        if (!file->names[j] || !file->tensors[j]) return tg_error_status(TG_EINVAL, "%s: entry %d is NULL", who, j);
        bool known = false;
        for (int i = 0; i < sd.n; i++)
            if (strcmp(file->names[j], sd.names[i]) == 0) {
                if (!src[i]) src[i] = file->tensors[j]; /* the first of repeated keys, as the file lookup */
                known = true;
            }
        if (!known) st = st ? st : tg_error_status(TG_EFORMAT, "%s: unexpected key '%s'", who, file->names[j]);
    }
    for (int i = 0; i < sd.n; i++) {
        char a[64], b[64];
        if (!src[i])
            return tg_error_status(TG_EFORMAT, "%s: missing key '%s'", who, sd.names[i]);
        if (!tg_same_shape(src[i], sd.tensors[i]))
            return tg_error_status(TG_EFORMAT, "%s: size mismatch for '%s': file has %s, module has %s", who,
                                   sd.names[i], tg_shape_str(src[i], a, 64), tg_shape_str(sd.tensors[i], b, 64));
        if (!tg__is_float(src[i]->dtype))
            return tg_error_status(TG_EFORMAT, "%s: '%s' has dtype %s, expected a float type", who, sd.names[i],
                                   tg_dtype_name(src[i]->dtype));
    }
    if (st != TG_OK) return st;
    for (int i = 0; i < sd.n; i++) {
        tg_k_copy(sd.tensors[i], src[i]);
        tg__bf16_written(sd.tensors[i]);
    }
    return TG_OK;
}

int tg_module_load_state_dict(tg_module *m, const tg_named_list *sd)
{
    if (!m || !sd || (sd->n > 0 && (!sd->names || !sd->tensors)))
        return tg_error_status(TG_EINVAL, "load_state_dict: NULL argument");
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error_status(TG_ENOMEM, "load_state_dict: out of memory");
    int st = load_entries(tp, m, sd, "load_state_dict");
    tg_tape_free(tp);
    return st;
}

int tg_module_load(tg_module *m, const char *path)
{
    if (!m || !path) return tg_error_status(TG_EINVAL, "load: NULL module or path");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_safetensors file;
    int st = tg_safetensors_load(tp, path, &file);
    if (st == TG_OK) {
        size_t len = strlen(path) + 8;
        char *who = tg_tape_alloc(tp, len, false);
        tg_named_list l = {file.n, (const char **)file.names, file.tensors};
        if (!who) st = TG_ENOMEM;
        else {
            snprintf(who, len, "load %s", path);
            st = load_entries(tp, m, &l, who);
        }
    }
    tg_tape_free(tp);
    return st;
}
