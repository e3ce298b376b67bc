/*
 * Declarations shared by the files of relock-bench:
 *   relock_bench.c  options, the top process (placements, time limits)
 *   bench_phase.c   one placement's servers, throughput (quorum included), contention,
 *                   its workers, the memory process
 *   bench_latency.c handoff and takeover latencies: a holder and a waiter process
 *   bench_native.c  native compare-and-set against Lua, through one proxy
 *   bench_cluster.c Redis Cluster with the slot map against a redirect per switch
 *   bench_waitload.c commands per second of a blocked waiter, per mode
 *   bench_report.c  the table and the JSON, targets applied
 *   bench_util.c    clocks, CPU pinning, /proc figures, small helpers
 */
#ifndef RELOCK_BENCH_H
#define RELOCK_BENCH_H

#include "bench_util.h"

#define MAX_REPS 9
#define MAX_PROCS 4
#define QUORUM_SERVERS 5 /* the quorum figure's servers (the phase's own is the first) */
#define MEM_LOCKS 10000
#define SLICE_MS 50 /* uncontended figures take turns in slices this long */

/* Targets (docs/performance.md). */
#define TARGET_MODERN 0.90     /* relock modern / its raw loop */
#define TARGET_LEGACY 0.85     /* relock legacy / its raw loop */
#define TARGET_CONTENDED2 0.50 /* 2 contending processes / 1 process */
#define TARGET_MEM_BYTES 256.0 /* per held lock, beyond its key and value */
#define TARGET_QUORUM5 1.50    /* acquire latency with 5 servers / with 1 server (at most),
                                  each server NET_TARGET_RTT_US away */

/* Latency figures (bench_latency.c): samples per figure, bounded in time. */
#define LAT_SAMPLES 200
#define HANDOFF_LIMIT_MS 5000   /* per handoff figure */
#define TAKEOVER_LIMIT_MS 8000  /* per takeover figure (each sample waits out a TTL) */
#define HANDOFF_HOLDER_TTL_MS 10000
#define TAKEOVER_TTL_MS 50
/* The release comes this long (uniformly random in [MIN, MAX]) after the
 * waiter was told to acquire. */
#define HANDOFF_DELAY_MIN_MS 10
#define HANDOFF_DELAY_MAX_MS 20
/* A worker starves when it gets less than this part of its fair share
 * (1/N of the sections) in a round. */
#define STARVE_FRACTION 0.10

/* Quorum at a network's distance (bench_network.c): the round trips each
 * server is given by a delaying proxy, the one the target is judged at
 * (decision 45), cycles per client per RTT (after NET_WARMUP),
 * cycles per turn, and the time bound per RTT. */
#define NET_NRTTS 2
#define NET_RTTS_US {250, 1000}
#define NET_TARGET_RTT_US 1000
#define NET_SAMPLES 400
#define NET_WARMUP 20
#define NET_TURN 10
#define NET_LIMIT_MS 15000
extern const long bench_net_rtts_us[NET_NRTTS];

typedef struct bench_opts {
    int json;
    long sample_ms;
    int reps;
    const char *phase; /* internal: run one placement */
    int server_cpu;    /* internal: with --phase */
    int mem_port;      /* internal: the memory figure, in a fresh process */
    const char *only;  /* --only wait: the waiting-load figures alone; --only
                        * throughput: the uncontended cycles alone */
} bench_opts;

extern bench_opts opt;

/* bench_phase.c: runs one placement, printing "key value" lines on stdout
 * for the top process; 0 when every figure was measured. */
int bench_run_phase(void);
/* bench_phase.c: the memory figure, in a process of its own. */
int bench_run_memory(int port);

/* bench_phase.c, for bench_latency.c: a result line "key value" for the
 * top process; an error line (error<N>) that fails the run; processes to
 * kill (by PID) if the phase is stopped; a relock client on 127.0.0.1:port
 * in mode with further settings (NULL-terminated name, value pairs, or
 * NULL), NULL with err filled on failure. */
void bench_out(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bench_track(pid_t pid);
void bench_untrack(pid_t pid);
void bench_child_signals(void);
struct relock_client;
struct relock_client *bench_connect(int port, const char *mode, const char *const *settings,
                                    char *err, size_t errlen);
/* A modern, fenced client for a quorum over the first n of ports. */
struct relock_client *bench_connect_quorum(const int *ports, int n, char *err, size_t errlen);
/* Starts, from the placement's server core, a redis-server (upstream 0)
 * or a pass-through relock-compat-proxy in front of 127.0.0.1:upstream,
 * then returns to client_cpus; 0 on success. */
struct testsrv;
int bench_start_pinned(struct testsrv *srv, const char *client_cpus, int upstream);

/* bench_latency.c: the handoff and takeover figures against the server on
 * port (a waiter process forked per figure). */
void bench_latency(int port);

/* bench_network.c: the quorum figure at a network's distance, over the
 * servers on ports (QUORUM_SERVERS of them), each behind a proxy. */
void bench_network(const int *ports, int nports, const char *client_cpus);

/* bench_native.c: the modern cycle with native commands against the same
 * cycle by Lua, both through one proxy (personality valkey-9.0) in front of
 * the server on port upstream. */
void bench_native(int upstream, const char *client_cpus);

/* bench_cluster.c: acquire and release cycles over names spread on a
 * cluster of three masters it starts, with the slot map and without. */
void bench_cluster(const char *client_cpus);

/* bench_waitload.c: the commands per second a blocked waiter sends in
 * each mode, against a classic legacy client's (a waiter process forked
 * per figure). */
void bench_waitload(int port);
/* The time the waiting-load figures take at most, for the phase's limit. */
#define WAITLOAD_LIMIT_MS 30000

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
    char result[8];    /* PASS, FAIL or info */
    double v, base, r; /* NaN when none */
    double p99, p99_ratio; /* latency figures: v is the p50; NaN elsewhere */
    const char *unit;
    char detail[640];
} bench_row;

#define MAX_ROWS 64
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
