#include "cli.h"
int tg_cmd_train(int argc, char **argv) { (void)argc; (void)argv; return 2; }
