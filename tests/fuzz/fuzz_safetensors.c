/* libFuzzer target: the safetensors reader on arbitrary bytes.
 *
 * tg_safetensors_parse must either fail with a message or return tensors whose
 * names are distinct, whose shapes and dtypes are sane and whose bytes are
 * readable in full; every name must be found again by tg_safetensors_get.
 * Any out-of-bounds read, leak, UB or violated invariant is a finding.
 * The corpus keeps the reproducers of fixed findings (crash-*.safetensors);
 * tests/fuzz/replay.c runs them in the ordinary test suite.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_safetensors"
#include "fuzz.h"

#include <tapegrad.h>

FUZZ_NO_SETUP

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tg_tape *tp;
    if (!tp) tp = tg_tape_new();
    CHECK(tp);
    /* Cap the memory a single input may make the parser allocate: a small
     * header may describe a tensor far larger than the input, which must be
     * rejected by the bounds checks before any allocation. */
    tg_tape_set_limit(tp, (size_t)64 << 20);
    tg_clear_error();

    tg_safetensors st;
    int rc = tg_safetensors_parse(tp, data, size, &st);
    if (rc != TG_OK) {
        const char *e = tg_last_error();
        CHECK(rc < 0);
        CHECK(e && *e); /* every failure names the problem */
        tg_tape_reset(tp);
        return 0;
    }
    CHECK(st.n >= 0);
    CHECK(st.n == 0 || (st.names && st.tensors));
    size_t total = 0;
    for (int i = 0; i < st.n; i++) {
        const tg_tensor *t = st.tensors[i];
        CHECK(st.names[i] && t);
        CHECK(t->dtype >= 0 && t->dtype < TG_DTYPE_COUNT);
        CHECK(t->ndim >= 0 && t->ndim <= TG_MAX_DIMS);
        int64_t n = tg_numel(t);
        CHECK(tg_is_contiguous(t));
        CHECK(n >= 0);
        size_t nbytes = tg_tensor_nbytes(t);
        total += nbytes;
        /* tensors' bytes come from the input (F16 and BF16 read widened to
         * float32: twice theirs) */
        CHECK(total <= 2 * size);
        /* the lookup finds this very tensor (names are unique) */
        CHECK(tg_safetensors_get(&st, st.names[i]) == t);
        char buf[256];
        CHECK(tg_shape_str(t, buf, sizeof buf) == buf);
        /* read every byte: ASan catches any short allocation */
        if (n > 0) {
            const volatile uint8_t *p = tg_data_ptr(t);
            CHECK(p);
            uint8_t acc = 0;
            for (size_t k = 0; k < nbytes; k++) acc ^= p[k];
            (void)acc;
            (void)tg_item_at(t, 0);
            (void)tg_item_at(t, n - 1);
        }
        if (t->dtype == TG_BOOL)
            for (int64_t k = 0; k < n; k++) CHECK(((const uint8_t *)t->data)[t->offset + k] <= 1);
    }
    for (int i = 0; i < st.n; i++)
        for (int j = 0; j < i; j++) CHECK(strcmp(st.names[i], st.names[j]) != 0);
    CHECK(tg_safetensors_get(&st, "\x01 no such tensor") == NULL);
    tg_tape_reset(tp);
    return 0;
}
