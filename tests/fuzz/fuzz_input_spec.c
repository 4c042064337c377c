/* libFuzzer target: the CLI's --input spec parser, tg_cli_parse_input_spec
 * ("book", "rand:SEED:T", "rand:SEED:B:T").
 *
 * The bytes up to the first NUL (copied into an exactly-sized heap buffer, so
 * ASan sees any read past the terminator) are parsed with a full-size error
 * buffer, a 1-byte one, a 0-length one and a NULL one. Checked: the result
 * does not depend on the error buffer; a success is exactly "book" or a
 * well-formed rand spec whose numbers are in range and round-trip; a failure
 * writes a one-line, NUL-terminated message.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_input_spec"
#include "fuzz.h"

#include "args.h"

FUZZ_NO_SETUP

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = strnlen((const char *)data, size);
    char *s = malloc(len + 1);
    CHECK(s);
    memcpy(s, data, len);
    s[len] = '\0';

    tg_cli_input in, in2, in3, in4;
    char err[512], tiny[1] = {'x'};
    memset(err, 'x', sizeof err);
    int rc = tg_cli_parse_input_spec(s, &in, err, sizeof err);
    int rc2 = tg_cli_parse_input_spec(s, &in2, tiny, sizeof tiny);
    int rc3 = tg_cli_parse_input_spec(s, &in3, err, 0);
    int rc4 = tg_cli_parse_input_spec(s, &in4, NULL, 0);
    CHECK(rc == 0 || rc == -1);
    CHECK(rc2 == rc && rc3 == rc && rc4 == rc);

    if (rc == 0) {
        CHECK(memcmp(&in, &in2, sizeof in) == 0 && memcmp(&in, &in3, sizeof in) == 0 &&
              memcmp(&in, &in4, sizeof in) == 0);
        if (!in.is_rand) {
            CHECK(strcmp(s, "book") == 0);
        } else {
            CHECK(strncmp(s, "rand:", 5) == 0);
            CHECK(in.tokens >= 1 && in.tokens <= TG_CLI_MAX_TOKENS);
            CHECK(in.batch >= 1 && in.batch <= TG_CLI_MAX_BATCH);
            CHECK(in.batched == 0 || in.batched == 1);
            if (!in.batched) CHECK(in.batch == 1);
            /* the spec is SEED:T or SEED:B:T in decimal, possibly with leading zeros */
            char canon[128];
            if (in.batched)
                snprintf(canon, sizeof canon, "%" PRIu64 ":%" PRId64 ":%" PRId64, in.seed, in.batch, in.tokens);
            else
                snprintf(canon, sizeof canon, "%" PRIu64 ":%" PRId64, in.seed, in.tokens);
            /* strip leading zeros of each field of the input and compare */
            char got[128];
            size_t g = 0;
            const char *p = s + 5;
            while (*p) {
                while (*p == '0' && p[1] >= '0' && p[1] <= '9') p++;
                while (*p && *p != ':') {
                    CHECK(*p >= '0' && *p <= '9');
                    CHECK(g + 1 < sizeof got);
                    got[g++] = *p++;
                }
                if (*p == ':') {
                    CHECK(g + 1 < sizeof got);
                    got[g++] = *p++;
                }
            }
            got[g] = '\0';
            CHECK(strcmp(got, canon) == 0);
        }
    } else {
        CHECK(memchr(err, '\0', sizeof err) != NULL);
        CHECK(err[0] != '\0');
        CHECK(strchr(err, '\n') == NULL || memchr(s, '\n', len) != NULL);
        CHECK(tiny[0] == '\0');
    }
    free(s);
    return 0;
}
