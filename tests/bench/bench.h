/*
 * Declarations shared by the files of relock-bench:
 *   relock_bench.c  options, the top process (placements, time limits)
 *   bench_phase.c   one placement's measurements, its workers, the memory process
 *   bench_report.c  the table and the JSON, targets applied
 *   bench_util.c    clocks, CPU pinning, /proc figures, small helpers
 */
#ifndef RELOCK_BENCH_H
#define RELOCK_BENCH_H

#include "bench_util.h"

#define MAX_REPS 9
#define MAX_PROCS 4
#define MEM_LOCKS 10000
#define SLICE_MS 50 /* uncontended figures take turns in slices this long */

/* Targets (docs/performance.md). */
#define TARGET_MODERN 0.90     /* relock modern / its raw loop */
#define TARGET_LEGACY 0.85     /* relock legacy / its raw loop */
#define TARGET_CONTENDED2 0.50 /* 2 contending processes / 1 process */
#define TARGET_MEM_BYTES 256.0 /* per held lock, beyond its key and value */
/* A worker starves when it gets less than this part of its fair share
 * (1/N of the sections) in a round. */
#define STARVE_FRACTION 0.10

typedef struct bench_opts {
    int json;
    long sample_ms;
    int reps;
    const char *phase; /* internal: run one placement */
    int server_cpu;    /* internal: with --phase */
    int mem_port;      /* internal: the memory figure, in a fresh process */
} bench_opts;

extern bench_opts opt;

/* bench_phase.c: runs one placement, printing "key value" lines on stdout
 * for the top process; 0 when every figure was measured. */
int bench_run_phase(void);
/* bench_phase.c: the memory figure, in a process of its own. */
int bench_run_memory(int port);

/* One placement as the top process sees it. */
typedef struct bench_phase {
    const char *name;
    const char *what;
    int client_cpu, server_cpu;
    bu_kv kv;   /* the lines it printed */
    int status; /* 0 ran to the end */
    double secs;
} bench_phase;

/* One line of the table. */
typedef struct bench_row {
    char figure[72];
    char value[64];
    char baseline[64];
    char ratio[16];
    char target[48];
    char result[8];    /* PASS, FAIL, SKIP or info */
    double v, base, r; /* NaN when none */
    const char *unit;
    char detail[400];
} bench_row;

#define MAX_ROWS 40
typedef struct bench_table {
    int n;
    bench_row rows[MAX_ROWS];
} bench_table;

void bench_build_table(const bench_phase *ph, bench_table *t);
/* 1 when a row failed. */
int bench_table_failed(const bench_table *t);
void bench_print_table(const bench_phase *ph, const bench_table *t);
void bench_print_json(const bench_phase *phs, const bench_table *ts, int nph,
                      const char *machine, int failed, double secs);

#endif
