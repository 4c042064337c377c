/* The commands that run data parallel under mpirun (pretrain, bench --model
 * gpt): MPI around the command, one error report per job, this rank's
 * threads, and agreement between ranks on a step that may fail on some. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* A rank other than 0 keeps its error lines (tg_cli_errfile) until it is
 * known to be the one that failed; then they go to stderr, named. */
static FILE *rank_file;
static char *rank_errors;
static size_t rank_errors_len;

void tg_cli_dist_show_errors(void)
{
    if (!rank_file) return;
    fflush(rank_file);
    if (rank_errors_len)
        fprintf(stderr, "rank %d of %d: %.*s", tg_dist_rank(), tg_dist_size(), (int)rank_errors_len, rank_errors);
    fflush(stderr);
}

int tg_cli_dist_main(int (*command)(int, char **), int argc, char **argv)
{
    bool launched = tg_dist_launched() > 0 && !tg_cli_check_only;
    if (launched && tg_dist_init(NULL, NULL) != TG_OK) return tg_cli_lib_error(argv[0], NULL);
    FILE *errfile = tg_cli_errfile;
    if (launched && tg_dist_rank() != 0 && !errfile && (rank_file = open_memstream(&rank_errors, &rank_errors_len)))
        tg_cli_errfile = rank_file;
    int rc = command(argc, argv);
    if (rank_file) {
        fclose(rank_file);
        tg_cli_errfile = errfile;
        free(rank_errors);
        rank_file = NULL, rank_errors = NULL, rank_errors_len = 0;
    }
    if (launched) tg_dist_finalize();
    return rc;
}

int tg_cli_dist_begin(const char *cmd, bool dist, int64_t batch, bool threads_set)
{
    if (!dist && !tg_dist_launched()) return TG_CLI_OK;
    if (dist && !tg_dist_available())
        return tg_cli_error(cmd, "--dist: this tapegrad was built without MPI (install libopenmpi-dev and "
                                 "openmpi-bin, then rebuild)");
    if (dist && !tg_dist_launched())
        return tg_cli_error(cmd, "--dist: not started by mpirun; run mpirun -np N tapegrad %s --dist ... "
                                 "(N dividing --batch)", cmd);
    int size = tg_dist_size();
    if (batch % size != 0)
        return tg_cli_error(cmd, "--batch %lld is not divisible by the %d ranks mpirun started", (long long)batch, size);
#ifdef _OPENMP
    if (!threads_set && size > 1) {
        int t = omp_get_num_procs() / tg_dist_local_size();
        omp_set_num_threads(t > 1 ? t : 1);
    }
#else
    (void)threads_set;
#endif
    return TG_CLI_OK;
}

/* TG_CLI_OK when every rank's rc was; otherwise the failing rank shows its
 * lines and every rank returns an error. */
int tg_cli_dist_agree(int rc)
{
    int failed = -1;
    if (tg_dist_agree(rc == TG_CLI_OK ? TG_OK : TG_EINVAL, &failed) == TG_OK) return TG_CLI_OK;
    if (failed == tg_dist_rank()) tg_cli_dist_show_errors();
    return rc != TG_CLI_OK ? rc : TG_CLI_USAGE;
}
