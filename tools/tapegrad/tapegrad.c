/* The tapegrad executable: the whole command line is tg_cli_main (cli.c). */
#include "cli.h"

int main(int argc, char **argv)
{
    return tg_cli_main(argc, argv);
}
