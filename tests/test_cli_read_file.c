/* The CLI's file reader (tg_cli_read_file, tools/tapegrad/cli.h) on the
 * CLI's code in-process: for files of every size around its buffer's
 * growth (64 KiB, doubled), and for standard input, the buffer holds the
 * file's bytes and a NUL right after them (buf[len] == '\0'), so that a
 * command may hand it to a function that reads a C string (tapegrad
 * tokenize --chat --file). A file holding a NUL byte keeps its length, and
 * tg_cli_check_no_nul refuses it with one line naming the file and the
 * byte's offset.
 *
 * Under glibc every block malloc hands out is first filled with a nonzero
 * byte (M_PERTURB; the sanitizers' allocator fills new blocks with 0xbe
 * already), so a reader that leaves the byte after the content unwritten
 * fails here on every run instead of where the heap happens to hold a NUL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cli.h"

static int failed, checked;

static void check(bool ok, const char *what, size_t size)
{
    checked++;
    if (ok) return;
    failed++;
    printf("FAIL: %s (%zu bytes)\n", what, size);
}

static char byte_at(size_t i) { return (char)('a' + i % 26); }

static bool write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The file of size bytes read back, from path or as standard input. */
static void read_size(const char *path, size_t size, bool from_stdin)
{
    char *data = malloc(size ? size : 1);
    if (!data) {
        check(false, "out of memory", size);
        return;
    }
    for (size_t i = 0; i < size; i++) data[i] = byte_at(i);
    if (!write_file(path, data, size)) {
        check(false, "cannot write the test file", size);
        free(data);
        return;
    }
    size_t len = (size_t)-1;
    char *buf = NULL;
    if (!from_stdin) {
        buf = tg_cli_read_file("test", "--file", path, false, &len);
    } else if (freopen(path, "rb", stdin)) {
        buf = tg_cli_read_file("test", "--file", "-", true, &len);
    }
    const char *how = from_stdin ? "standard input" : "file";
    check(buf != NULL, from_stdin ? "standard input: read" : "file: read", size);
    if (buf) {
        printf("%s of %zu bytes: len %zu, byte after the content 0x%02x\n", how, size, len,
               (unsigned)(unsigned char)buf[len == (size_t)-1 ? 0 : len]);
        check(len == size, "the length is the content's", size);
        check(len == size && memcmp(buf, data, size) == 0, "the content", size);
        bool nul = len == size && buf[len] == '\0';
        check(nul, "a NUL right after the content", size);
        /* only with the NUL there: strlen stays inside the buffer */
        check(nul && strlen(buf) == size, "the buffer is a C string of the content", size);
        check(len == size && tg_cli_check_no_nul("test", "--file", path, buf, len, "why") == TG_CLI_OK,
              "no NUL byte in the content", size);
    }
    free(buf);
    free(data);
}

/* A file holding NUL bytes: read whole, then refused with one line naming
 * the file and the first NUL's offset. */
static void embedded_nul(const char *path, const char *errpath)
{
    static const char data[] = "ab\0cd\0";
    size_t size = sizeof data - 1, len = 0;
    if (!write_file(path, data, size)) {
        check(false, "cannot write the test file", size);
        return;
    }
    char *buf = tg_cli_read_file("test", "--file", path, false, &len);
    check(buf && len == size && memcmp(buf, data, size) == 0 && buf[len] == '\0', "a NUL byte kept in the content",
          size);
    FILE *saved = tg_cli_errfile;
    tg_cli_errfile = fopen(errpath, "w+");
    int rc = buf && tg_cli_errfile ? tg_cli_check_no_nul("test", "--file", path, buf, len, "why") : -1;
    char line[1024] = "", rest[8] = "";
    if (tg_cli_errfile) {
        rewind(tg_cli_errfile);
        if (!fgets(line, sizeof line, tg_cli_errfile)) line[0] = '\0';
        if (!fgets(rest, sizeof rest, tg_cli_errfile)) rest[0] = '\0';
        fclose(tg_cli_errfile);
    }
    tg_cli_errfile = saved;
    printf("a NUL byte at offset 2: %s", line);
    char want[1024];
    snprintf(want, sizeof want, "tapegrad test: --file %s: NUL byte at offset 2 (why)\n", path);
    check(rc == TG_CLI_USAGE, "a NUL byte refused with TG_CLI_USAGE", size);
    check(strcmp(line, want) == 0 && rest[0] == '\0', "one line naming the file and the offset", size);
    free(buf);
}

int main(void)
{
#if defined(__GLIBC__) && defined(M_PERTURB)
    mallopt(M_PERTURB, 0x41); /* new blocks hold 0x41 ^ 0xff = 0xbe */
#endif
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600], errpath[600];
    snprintf(dir, sizeof dir, "%s/tapegrad-read.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        printf("FAIL: cannot make a temporary folder in %s\n", tmp && *tmp ? tmp : "/tmp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/text", dir);
    snprintf(errpath, sizeof errpath, "%s/err", dir);
    const size_t K = (size_t)1 << 16;
    const size_t sizes[] = {0, 1, 56, 57, 4095, 4096, K - 1, K, K + 1, 2 * K - 1, 2 * K, 2 * K + 1, 4 * K + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) read_size(path, sizes[i], false);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) read_size(path, sizes[i], true);
    embedded_nul(path, errpath);
    remove(path);
    remove(errpath);
    remove(dir);
    printf("%d checks, %d failed\n", checked, failed);
    return failed ? 1 : 0;
}
