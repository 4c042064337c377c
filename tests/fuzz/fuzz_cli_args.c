/* libFuzzer target: the tapegrad command line's argument parsing and
 * validation, all three subcommands, at full speed.
 *
 * The input is split on NUL bytes into argument strings (an empty trailing
 * piece is dropped) and run as `tapegrad <args...>` through tg_cli_main in
 * check-only mode (tg_cli_check_only): every option is parsed and every
 * argument checked exactly as in a real run, then the command returns before
 * it builds a module, opens a file or computes anything, so no input needs a
 * guard. fuzz_cli runs whole commands (small sizes) instead.
 *
 * Invariants on every input:
 *   - tg_cli_main returns 0 or 2 (1 needs a real run);
 *   - 2 comes with exactly one line "tapegrad...: <message>\n" from
 *     tg_cli_error, and 0 with none.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_cli_args"
#include "fuzz.h"

#include "cli.h"

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tg_cli_check_only = true;
    if (!freopen("/dev/null", "w", stdout)) { /* --help texts */
        perror("fuzz_cli_args: /dev/null");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "tapegrad";
    for (size_t pos = 0; pos < size && argc <= MAX_ARGS; pos += strlen(buf + pos) + 1) argv[argc++] = buf + pos;
    argv[argc] = NULL;

    static char msg[4096];
    memset(msg, 0, sizeof msg);
    FILE *err = fmemopen(msg, sizeof msg - 1, "w");
    if (!err) {
        free(buf);
        return 0;
    }
    tg_cli_errfile = err;
    int rc = tg_cli_main(argc, argv);
    tg_cli_errfile = NULL;
    fclose(err);

    size_t len = strlen(msg), lines = 0;
    for (size_t i = 0; i < len; i++) lines += msg[i] == '\n';
    CHECK_MSG(rc == 0 || rc == 2, msg);
    if (rc == 2) {
        CHECK_MSG(lines == 1 && len > 0 && msg[len - 1] == '\n', msg);
        CHECK_MSG(strncmp(msg, "tapegrad", 8) == 0 && strstr(msg, ": ") != NULL, msg);
    } else {
        CHECK_MSG(len == 0, msg);
    }
    free(buf);
    return 0;
}
