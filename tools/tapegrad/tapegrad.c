/* The tapegrad executable: the whole command line is tg_cli_main (cli.c).
 * Output that could not be written (a full disk) fails the command, with
 * one line on stderr (cli.c, tg_cli_stdout_error). */
#include "cli.h"

int main(int argc, char **argv)
{
    int rc = tg_cli_main(argc, argv);
    if (!tg_cli_flush_stdout()) {
        int st = tg_cli_stdout_error(0);
        if (rc == TG_CLI_OK) rc = st;
    }
    return rc;
}
