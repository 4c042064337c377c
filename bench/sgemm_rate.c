/* The machine's reference rate: OpenBLAS sgemm on square float32 matrices,
 * through the same BLAS library tapegrad links (cblas_sgemm, row-major).
 *
 *   bench/sgemm_rate [N (2048)] [REPEATS (7)] [THREADS]
 *
 * Prints one JSON object: {"n": N, "threads": T, "gflops": median rate}.
 * THREADS sets OpenMP's thread count (the OpenMP build of OpenBLAS follows
 * it); without it the default applies. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long arg(int argc, char **argv, int i, long dflt, long lo, long hi)
{
    if (argc <= i) return dflt;
    char *end = NULL;
    long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "sgemm_rate: argument %d must be an integer in %ld..%ld\n", i, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int n = (int)arg(argc, argv, 1, 2048, 16, 8192);
    int reps = (int)arg(argc, argv, 2, 7, 1, 100);
    if (argc > 3) omp_set_num_threads((int)arg(argc, argv, 3, 1, 1, 256));
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double *rate = malloc((size_t)reps * sizeof *rate);
    if (!a || !b || !c || !rate) {
        fprintf(stderr, "sgemm_rate: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 13) * 0.01f;
        b[i] = (float)(i % 7) * 0.02f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm-up */
    for (int r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        rate[r] = 2.0 * n * (double)n * n / s / 1e9;
    }
    qsort(rate, (size_t)reps, sizeof *rate, cmp);
    printf("{\"n\": %d, \"threads\": %d, \"gflops\": %.1f}\n", n, omp_get_max_threads(), rate[reps / 2]);
    free(a);
    free(b);
    free(c);
    free(rate);
    return 0;
}
