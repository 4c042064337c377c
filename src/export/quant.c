/* The number formats the exported files store (include/tapegrad/export.h):
 * their names. The conversions (IEEE half, Q8_0 blocks) are the tensor
 * layer's (src/tensor/q8.c), so a file written here holds the blocks a
 * TG_Q8 tensor holds. */
#include "export_internal.h"

#include <string.h>
#include <strings.h>

static const char *const type_names[] = {"f32", "f16", "bf16", "q8_0"};

const char *tg_export_type_name(tg_export_type t)
{
    return (unsigned)t < sizeof type_names / sizeof *type_names ? type_names[t] : NULL;
}

int tg_export_type_parse(const char *name, tg_export_type *out)
{
    for (int i = 0; name && i < (int)(sizeof type_names / sizeof *type_names); i++)
        if (strcasecmp(name, type_names[i]) == 0) {
            if (out) *out = (tg_export_type)i;
            return TG_OK;
        }
    tg_error_status(TG_EINVAL, "export: unknown type '%.40s' (f32, f16, bf16 or q8_0)", name ? name : "(null)");
    return -1;
}
