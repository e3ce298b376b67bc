/*
 * The parts the two interop workers share: options, the shared log, the
 * critical section, and deliberate deaths.  Nothing here knows about
 * relock: classic_lock.c builds from this file and hiredis alone, so the
 * classic client shares no code with the library under test.
 *
 * The log is one file all workers append to (O_APPEND, one write() per
 * line), lines "<event> <CLOCK_MONOTONIC ns> <pid> <kind> [detail]":
 *
 *   enter   inside the lock, before touching the counter
 *   exit    after the increment, before releasing; detail "overrun" when
 *           the worker's own lease had already ended (a stall, not a
 *           mutual-exclusion failure of the algorithm)
 *   die     about to SIGKILL itself while holding (before the increment)
 *   lose    classic: a GETSET takeover that lost the race (it still wrote)
 *   late    classic: release skipped DEL because its own expiry had passed
 *   lost    relock: release said LOST; detail "valid" or "expired" (was
 *           our validity left just before the release?)
 *   ambiguous  relock: release said the outcome cannot be told
 *
 * With --resource-port (the torture runner, tests/torture/) the section
 * uses the fenced resource instead of the counter (wk_section_fenced), and
 * a few more lines appear:
 *
 *   enter   detail: the end of the worker's lease on the same monotonic
 *           clock, in ns (0 when the section cannot know it)
 *   pause   about to stop its process group (SIGSTOP) while holding, as
 *           the runner asked through --fault-file
 *   error   --tolerate: a call failed and the worker goes on; detail
 *           "what:STATUS" (acquire:EIO, release:EAMBIGUOUS, redis:SETNX ...)
 */
#ifndef INTEROP_WORKER_H
#define INTEROP_WORKER_H

#include <stdint.h>

#include <hiredis/hiredis.h>

typedef struct wk_opts {
    int port;
    const char *key;
    int unit_ms;          /* --unit: 1 for "ms", 0 for "s" */
    long timeout;         /* classic: --timeout, in the unit */
    long sections;        /* --sections: how many to complete */
    const char *log;      /* --log FILE */
    const char *counter;  /* --counter KEY */
    double die_prob;      /* --die-prob X, 0..1 */
    uint64_t seed;        /* --seed S */
    uint64_t until_ms;    /* --until-ms: CLOCK_MONOTONIC ms; no new acquisition after it */
    long gap_ms;          /* --gap-ms: after each release, pause uniformly in [0, gap] ms */
    const char *mode;     /* relock: --mode bridge|modern|legacy */
    long ttl_ms;          /* relock: --ttl MS */
    long wait_ms;         /* relock: --wait MS, the bound of one acquire call */
    /* The torture runner's options (tests/torture/). */
    int resource_port;    /* --resource-port P: the fenced resource's server; 0 none */
    long hold_ms;         /* --hold-ms MS: hold the section 0..MS ms (-1: 0..3 ms) */
    int tolerate;         /* --tolerate: log a failing call and go on, don't exit */
    const char *fault_file; /* --fault-file F: "die" or "stop" at the next section, for
                               the whole process group: only for a worker that leads its
                               own group, as the torture runner starts them */
    long skew_margin_ms;  /* relock: --skew-margin MS, legacy.skew_margin_ms (-1: default) */
} wk_opts;

/* Parses argv; with relock != 0 the relock options are accepted too.
 * Prints the usage and exits 2 on a bad command line. */
void wk_parse(int argc, char **argv, wk_opts *o, int relock);

typedef struct wk_worker {
    const char *kind;     /* "classic", "bridge", ... */
    int log_fd;
    uint64_t rng;         /* jitter: pauses, retries, gaps */
    uint64_t dice;        /* deaths only, so they do not depend on timing */
    const wk_opts *o;
    long done;            /* sections completed by this process */
    long id;              /* the pid field of the log lines: getpid(), or the
                             process group of a `relock run` section */
    long ops;             /* fenced-resource operations sent */
} wk_worker;

/* Opens the log and seeds the generator; exits 3 on failure. */
void wk_init(wk_worker *w, const wk_opts *o, const char *kind);
/* Appends "<event> <ns> <pid> <kind>[ <detail>]\n" in one write(). */
void wk_log(wk_worker *w, const char *event, const char *detail);

uint64_t wk_mono_ns(void);
uint64_t wk_mono_ms(void);
/* Wall clock in the legacy unit (seconds or milliseconds since the epoch). */
long long wk_wall(int unit_ms);
void wk_sleep_us(long us);
/* Uniform in [lo, hi]. */
long wk_rand_between(wk_worker *w, long lo, long hi);
/* Uniform in [0, 1). */
double wk_rand01(wk_worker *w);

/*
 * The critical section, identical for every kind: enter line, maybe die,
 * GET counter, sleep 0-3 ms, SET counter+1, exit line.  still_valid(ctx)
 * is asked just before the exit line whether the worker's lease remains.
 * Returns 0, or -1 when Redis failed (message on stderr).  Does not
 * return when the worker decides to die.
 */
int wk_section(wk_worker *w, redisContext *rc, int (*still_valid)(void *), void *ctx);

/*
 * The fenced section (--resource-port, tests/torture/): enter line (with
 * lease_end_ns, 0 unknown), a fenced read of the resource's value, the
 * fault the runner asked for (--fault-file: die or stop while holding),
 * hold 0..--hold-ms, a fenced write of value + 1, exit line.  token 0 is
 * a client without a fencing token (the classic client): its reads and
 * writes are accepted unchecked.  A read refused by the fence skips the
 * write.  Every operation is recorded by the resource itself (see
 * wk_resource_script in worker.c).  Returns 0, or -1 when the resource
 * server failed.
 */
int wk_section_fenced(wk_worker *w, redisContext *res, long long token, uint64_t lease_end_ns,
                      int (*still_valid)(void *), void *ctx);

/* The resource's keys, KEY:max KEY:value KEY:ops KEY:seq KEY:accepted
 * KEY:refused, KEY the --counter name; the script that checks the fence. */
extern const char wk_resource_script[];

/* Connects with the timeouts of wk_connect(); NULL (message on stderr)
 * instead of exiting. */
redisContext *wk_try_connect(int port);

/* --tolerate: "error" line with detail what (at most 40 characters). */
void wk_error(wk_worker *w, const char *what);

/* The pause between a release and the next acquisition (--gap-ms). */
void wk_gap(wk_worker *w);

/* Connects with 2 s connect and 5 s command timeouts; exits 3 on failure. */
redisContext *wk_connect(int port);

#endif
