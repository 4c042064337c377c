/* state_dict <-> safetensors with PyTorch's keys. */
#include "nn_internal.h"

int tg_module_save(const tg_module *m, const char *path)
{
    if (!m || !path) return tg_error_status(TG_EINVAL, "save: NULL module or path");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_named_list sd;
    int st = tg_module_state_dict(tp, m, &sd);
    tg_named_tensor *items = st == TG_OK ? tg_tape_alloc(tp, sizeof *items * (size_t)(sd.n ? sd.n : 1), false) : NULL;
    if (items) {
        for (int i = 0; i < sd.n; i++) items[i] = (tg_named_tensor){sd.names[i], sd.tensors[i]};
        st = tg_safetensors_save(path, items, sd.n);
    } else if (st == TG_OK) {
        st = TG_ENOMEM;
    }
    tg_tape_free(tp);
    return st;
}

int tg_module_load(tg_module *m, const char *path)
{
    if (!m || !path) return tg_error_status(TG_EINVAL, "load: NULL module or path");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_named_list sd;
    tg_safetensors file;
    int st = tg_module_state_dict(tp, m, &sd);
    if (st == TG_OK) st = tg_safetensors_load(tp, path, &file);
    /* Validate everything before changing anything. */
    for (int i = 0; st == TG_OK && i < sd.n; i++) {
        tg_tensor *src = tg_safetensors_get(&file, sd.names[i]);
        char a[64], b[64];
        if (!src)
            st = tg_error_status(TG_EFORMAT, "load %s: missing key '%s'", path, sd.names[i]);
        else if (!tg_same_shape(src, sd.tensors[i]))
            st = tg_error_status(TG_EFORMAT, "load %s: size mismatch for '%s': file has %s, module has %s", path,
                                 sd.names[i], tg_shape_str(src, a, 64), tg_shape_str(sd.tensors[i], b, 64));
        else if (!tg__is_float(src->dtype))
            st = tg_error_status(TG_EFORMAT, "load %s: '%s' has dtype %s, expected a float type", path, sd.names[i],
                                 tg_dtype_name(src->dtype));
    }
    for (int j = 0; st == TG_OK && j < file.n; j++) {
        bool known = false;
        for (int i = 0; i < sd.n && !known; i++) known = strcmp(file.names[j], sd.names[i]) == 0;
        if (!known) st = tg_error_status(TG_EFORMAT, "load %s: unexpected key '%s'", path, file.names[j]);
    }
    if (st == TG_OK)
        for (int i = 0; i < sd.n; i++) tg_k_copy(sd.tensors[i], tg_safetensors_get(&file, sd.names[i]));
    tg_tape_free(tp);
    return st;
}
