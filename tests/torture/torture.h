/*
 * relock-torture: mutual exclusion under faults (docs/safety.md, "Fault
 * testing").  The runner starts a real redis-server (the lock server, in
 * front of it the compat proxy for network faults, and a second server for
 * the fenced resource), worker processes of three kinds on one lock —
 * relock through the library (relock_worker), relock through the command
 * line (`relock run`, run_driver.c + section.c) and the independent classic
 * SETNX/GETSET client (classic_lock) — and strikes them with faults on a
 * seeded schedule.  tests/interop/checker.c then judges the shared log and
 * the resource's record.
 *
 * Files: torture.c (options, the scenario table, the verdict), servers.c
 * (redis-servers that restart on their own port, the proxy), slots.c
 * (worker processes: start, reap, kill, stop), run.c (one scenario: the
 * fault schedule), report.c (the tables).
 */
#ifndef RELOCK_TORTURE_H
#define RELOCK_TORTURE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "checker.h"

/* ------------------------------------------------------------ servers.c */

typedef struct tsrv {
    pid_t pid;       /* 0 when not running */
    int port;
    int aof;         /* appendonly yes + appendfsync always; else no persistence */
    char dir[256];   /* its working directory (the AOF lives there) */
} tsrv;

/* Starts redis-server on a free port in dir; waits
 * until it answers PING (10 s).  0, or -1 with a message on stderr. */
int tsrv_start(tsrv *s, const char *dir, int aof);
/* A crash and a restart: SIGKILL, then start again on the same port and
 * directory (with AOF it reloads what it acknowledged). */
int tsrv_restart(tsrv *s);
/* SIGTERM (SIGKILL after 5 s) and wait. */
void tsrv_stop(tsrv *s);

typedef struct tproxy {
    pid_t pid;
    int port;
} tproxy;

/* Starts the proxy (personality 7) in front of upstream; its stderr goes
 * to errfile. */
int tproxy_start(tproxy *p, const char *bin, int upstream, const char *errfile);
void tproxy_stop(tproxy *p);

/* Writes LRANGE key 0 -1 to path, one element a line; the count or -1. */
long t_dump_list(int port, const char *key, const char *path);

/* Monotonic milliseconds and nanoseconds; sleeping. */
uint64_t t_now_ms(void);
uint64_t t_now_ns(void);
void t_sleep_ms(long ms);

/* -------------------------------------------------------------- run.c */

enum { W_LIB, W_CLI, W_CLASSIC };

enum target {
    T_SAFE,       /* 0 overlaps and 0 stale writes accepted */
    T_NO_OVERLAP, /* 0 overlaps */
    T_OVERLAPS,   /* the negative control: some overlaps */
    T_INFO        /* reported, not judged */
};

#define SLOTS_MAX 8

typedef struct scenario {
    const char *id;          /* "1", "1n", ... */
    const char *title;
    const char *faults;      /* a short description of the faults */
    const char *mode;        /* relock's mode */
    const char *unit;        /* legacy.clock_unit: "s" or "ms" */
    long ttl_ms;             /* relock's lease; the classic timeout is the same span */
    long margin_ms;          /* legacy.skew_margin_ms, -1 default */
    int nslots;
    int type[SLOTS_MAX];     /* W_LIB, W_CLI, W_CLASSIC */
    long skew_ms[SLOTS_MAX]; /* clock offset under libfaketime, 0 none */
    int aof;                 /* the lock server's persistence */
    long restart_ms[2];      /* restarts every [a, b] ms; 0 none */
    long fault_ms[2];        /* a process or proxy fault every [a, b] ms; 0 none */
    /* Weights of the faults drawn: holder killed, holder paused (both at
     * its next section, after its fenced read), any relock process killed,
     * any relock process stopped (at any point), proxy setting. */
    int w_hkill, w_hstop, w_xkill, w_xstop, w_proxy;
    long pause_ms[2];        /* stop length, [a, b] ms */
    long hold_ms;            /* section hold 0..hold ms */
    long duration_ms;        /* before the form's scaling */
    enum target target;
} scenario;

typedef struct tpaths {
    const char *relock_worker, *classic, *relock_cli, *proxy, *run_driver, *section;
    const char *faketime;    /* libfaketime.so.1, or NULL when not found */
} tpaths;

typedef struct outcome {
    int ran;                 /* 0: infrastructure failed before a verdict */
    char infra[256];         /* why */
    ck_torture t;
    double wall_s, duration_s;
    int bad_exits;           /* workers that crashed or failed */
    char bad_desc[256];
    int stragglers;          /* workers that did not stop after the deadline */
    int met;                 /* the target */
    char verdict[512];
    char dir[256];           /* the scenario's files */
    long long resource_accepted, resource_refused; /* the resource's own counters */
} outcome;

/* Runs one scenario for duration_ms; fills out.  base: the run's
 * directory; seed: the schedule's. */
void run_scenario(const scenario *sc, long duration_ms, uint64_t seed, const tpaths *paths,
                  const char *base, outcome *out);

/* Set by SIGINT/SIGTERM: stop early and clean up. */
extern volatile int t_interrupted;

/* ----------------------------------------------------------- report.c */

void report_scenario(FILE *f, const scenario *sc, const outcome *o);
void report_table(FILE *f, const scenario *const *sc, const outcome *o, int n, int markdown);

/* ------------------------------------------------------------ slots.c */

typedef struct slot {
    int type;
    long skew_ms;
    char kind[16];           /* the log's kind name */
    pid_t pid;               /* the leader of its process group; 0 none */
    int starts;
    uint64_t start_at;       /* monotonic ms of the next start; 0 none */
    uint64_t cont_at;        /* stopped until then (monotonic ms); 0 running */
    int die_pending;         /* a "die" fault waits in fault_file */
    int killed;              /* we killed the current process */
    char fault_file[300];
} slot;

typedef struct slotenv {
    const scenario *sc;
    const tpaths *paths;
    const char *log, *conf, *errfile;
    int lock_port, resource_port;
    uint64_t until_ms, seed;
} slotenv;

pid_t slot_start(slot *s, int index, const slotenv *e);
/* Kills the slot's whole process group and reaps every member. */
void slot_kill(slot *s);
/* Reaps what remains of a group whose leader has been reaped. */
void slot_reap_group(pid_t pgid);
/* Appends one line in the workers' format to the log. */
void t_log(const char *log, const char *event, long id, const char *kind, const char *detail);

#endif
