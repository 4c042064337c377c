/* The tapegrad executable: the whole command line is tg_cli_main (cli.c).
 * Output that could not be written (a full disk) fails the command. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rc = tg_cli_main(argc, argv);
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tapegrad: writing standard output: %s\n", errno ? strerror(errno) : "write error");
        if (rc == TG_CLI_OK) rc = TG_CLI_USAGE;
    }
    return rc;
}
