/*
 * relock-bench-cycles: a fixed number of uncontended modern cycles on one
 * server, relock's or the raw hiredis loop's, for callgrind and for the
 * scheduler's view of a cycle (docs/performance.md).
 *
 *   relock-bench-cycles --port P [--raw] [--fenced] [--cycles N]
 *
 * The cycle is relock-bench's (relock_try_acquire + relock_release +
 * relock_lock_free, or SET NX PX + EVALSHA compare-and-delete with
 * relock's own script text), after 50 cycles of warm-up.  Only the
 * function that runs the N cycles, run_cycles(), is worth counting:
 *
 *   valgrind --tool=callgrind --toggle-collect=run_cycles \
 *       relock-bench-cycles --port P --cycles 3000
 *
 * It prints, per cycle: the wall time, this process's CPU time, and its
 * voluntary and involuntary context switches.  The server is the
 * caller's (started, pinned and stopped by it); the loop is bounded by
 * --cycles (at most 10,000,000).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "bench_util.h"
#include "internal.h" /* the compare-and-delete script's text */
#include "relock.h"

#define NAME "bench:cycles"
#define RAW_KEY "bench:cycles:raw"

typedef struct run {
    int raw;
    relock_client *c;
    redisContext *rc;
    char sha_del[41];
    uint64_t rng;
} run;

static int relock_cycle(run *r)
{
    relock_lock *l = NULL;
    if (relock_try_acquire(r->c, NAME, 30000, &l) != RELOCK_OK) {
        fprintf(stderr, "relock-bench-cycles: acquire: %s\n", relock_client_error(r->c)->message);
        return -1;
    }
    relock_status st = relock_release(l);
    relock_lock_free(l);
    if (st != RELOCK_OK) {
        fprintf(stderr, "relock-bench-cycles: release: %s\n", relock_client_error(r->c)->message);
        return -1;
    }
    return 0;
}

static redisReply *cmdv(redisContext *rc, int argc, const char **argv)
{
    size_t len[8];
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    return redisCommandArgv(rc, argc, argv, len);
}

/* relock-bench's raw modern loop: the same commands and shapes. */
static int raw_cycle(run *r)
{
    char tok[33];
    bu_token(&r->rng, tok);
    const char *set[] = {"SET", RAW_KEY, tok, "NX", "PX", "30000"};
    redisReply *rep = cmdv(r->rc, 6, set);
    int ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep)
        freeReplyObject(rep);
    const char *del[] = {"EVALSHA", r->sha_del, "1", RAW_KEY, tok, RAW_KEY " relock:released"};
    rep = ok ? cmdv(r->rc, 6, del) : NULL;
    ok = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    if (rep)
        freeReplyObject(rep);
    if (!ok)
        fprintf(stderr, "relock-bench-cycles: the raw cycle failed\n");
    return ok ? 0 : -1;
}

/* The cycles callgrind counts (--toggle-collect=run_cycles). */
__attribute__((noinline)) int run_cycles(run *r, long n)
{
    for (long i = 0; i < n; i++)
        if ((r->raw ? raw_cycle(r) : relock_cycle(r)) != 0)
            return -1;
    return 0;
}

static double ts_us(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e6 + (double)(b->tv_nsec - a->tv_nsec) / 1e3;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: relock-bench-cycles --port P [--raw] [--fenced] [--cycles N]\n"
               "  --raw       the raw hiredis loop (SET NX PX + EVALSHA compare-and-delete)\n"
               "  --fenced    relock's client with fencing (default: fencing off)\n"
               "  --cycles N  cycles counted, after 50 of warm-up (default 3000)\n");
}

int main(int argc, char **argv)
{
    long port = 0, cycles = 3000;
    int fenced = 0;
    run r;
    memset(&r, 0, sizeof r);
    r.rng = 0x9e3779b97f4a7c15ull;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc &&
            bu_parse_long(argv[i + 1], 1, 65535, &port) == 0) {
            i++;
        } else if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc &&
                   bu_parse_long(argv[i + 1], 1, 10000000, &cycles) == 0) {
            i++;
        } else if (strcmp(argv[i], "--raw") == 0) {
            r.raw = 1;
        } else if (strcmp(argv[i], "--fenced") == 0) {
            fenced = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!port) {
        usage(stderr);
        return 2;
    }
    if (r.raw) {
        r.rc = redisConnect("127.0.0.1", (int)port);
        redisReply *rep = r.rc && !r.rc->err
                              ? redisCommand(r.rc, "SCRIPT LOAD %s",
                                             relock__script_source(RELOCK__SCRIPT_DEL_IF_EQ))
                              : NULL;
        if (!rep || rep->type != REDIS_REPLY_STRING || rep->len != 40) {
            fprintf(stderr, "relock-bench-cycles: cannot reach the server or load the script\n");
            return 1;
        }
        memcpy(r.sha_del, rep->str, 41);
        freeReplyObject(rep);
    } else {
        char url[64], err[300];
        snprintf(url, sizeof url, "redis://127.0.0.1:%ld", port);
        relock_config *cfg = relock_config_new();
        if (!cfg || relock_config_set_url(cfg, url) != RELOCK_OK ||
            relock_config_set(cfg, "mode", "modern") != RELOCK_OK ||
            relock_config_set(cfg, "command_timeout_ms", "10000") != RELOCK_OK ||
            relock_config_set(cfg, "fencing", fenced ? "true" : "false") != RELOCK_OK) {
            fprintf(stderr, "relock-bench-cycles: configuration failed\n");
            relock_config_free(cfg);
            return 1;
        }
        relock_status st = relock_connect(cfg, &r.c);
        relock_config_free(cfg);
        if (st != RELOCK_OK) {
            snprintf(err, sizeof err, "%s", r.c ? relock_client_error(r.c)->message : "");
            fprintf(stderr, "relock-bench-cycles: connect: %s %s\n", relock_strerror(st), err);
            relock_client_free(r.c);
            return 1;
        }
    }
    int rc = run_cycles(&r, 50);
    struct timespec w0, w1, c0, c1;
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    clock_gettime(CLOCK_MONOTONIC, &w0);
    if (rc == 0)
        rc = run_cycles(&r, cycles);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    getrusage(RUSAGE_SELF, &u1);
    if (rc == 0)
        printf("%s: %ld cycles; per cycle: %.2f us wall, %.2f us CPU, %.3f voluntary and %.3f "
               "involuntary context switches\n",
               r.raw ? "raw hiredis loop" : fenced ? "relock, fenced" : "relock, unfenced", cycles,
               ts_us(&w0, &w1) / (double)cycles, ts_us(&c0, &c1) / (double)cycles,
               (double)(u1.ru_nvcsw - u0.ru_nvcsw) / (double)cycles,
               (double)(u1.ru_nivcsw - u0.ru_nivcsw) / (double)cycles);
    relock_client_free(r.c);
    if (r.rc)
        redisFree(r.rc);
    return rc == 0 ? 0 : 1;
}
