/* Every command's --help names every option the command takes: each
 * command of the CLI's table (and the forms bench --model gpt|classify,
 * finetune classify|instruct) is run through tg_cli_main in help-check mode
 * (tg_cli_help_check), where its parse compares its option table with its
 * help text instead of parsing. A command that names all its options
 * returns 0; otherwise one line per missing option and status 2. The test
 * also proves the check can fail: a command whose help lacks an option. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int run(int argc, char **argv)
{
    char *full[8] = {"tapegrad"};
    for (int i = 0; i < argc; i++) full[i + 1] = argv[i];
    return tg_cli_main(argc + 1, full);
}

int main(void)
{
    tg_cli_help_check = true;
    int failed = 0, checked = 0;
    for (int i = 0; i < tg_cli_num_commands(); i++) {
        const char *name = tg_cli_command_name(i);
        char *forms[3][3] = {{(char *)name}, {NULL}, {NULL}};
        int nargs[3] = {1, 0, 0};
        if (strcmp(name, "finetune") == 0) {
            forms[0][1] = "classify", forms[1][0] = "finetune", forms[1][1] = "instruct";
            nargs[0] = nargs[1] = 2;
        } else if (strcmp(name, "bench") == 0) {
            forms[1][0] = "bench", forms[1][1] = "--model", forms[1][2] = "gpt", nargs[1] = 3;
        }
        for (int f = 0; f < 3 && nargs[f]; f++) {
            int rc = run(nargs[f], forms[f]);
            printf("%s %s %s: %s\n", forms[f][0], nargs[f] > 1 ? forms[f][1] : "", nargs[f] > 2 ? forms[f][2] : "",
                   rc == 0 ? "every option in --help" : "FAIL");
            failed += rc != 0;
            checked++;
        }
    }
    /* the check itself: an option its help does not name */
    bool go = true;
    tg_opt opts[1] = {{.name = "--not-in-help", .type = TG_OPT_FLAG, .dest = &go}};
    tg_cli_command c = {.name = "probe", .help = "usage: probe [--in-help]\n", .opts = opts, .nopts = 1};
    int status = 0;
    FILE *err = tg_cli_errfile;
    tg_cli_errfile = fopen("/dev/null", "w");
    tg_cli_parse(&c, 1, (char *[]){"probe", NULL}, &status);
    fclose(tg_cli_errfile);
    tg_cli_errfile = err;
    if (status != TG_CLI_USAGE) {
        printf("FAIL: the check passes a help text that lacks an option\n");
        failed++;
    }
    printf("%d forms checked, %d failed\n", checked, failed);
    return failed ? 1 : 0;
}
