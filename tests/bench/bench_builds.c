/*
 * relock-bench-builds: the uncontended blocking cycle of two builds of
 * the library, side by side in one run, run by `./dev bench --against REV`.
 *
 *   relock-bench-builds --base OLD/librelock.so --new NEW/librelock.so
 *                       [--reps N] [--sample-ms MS]
 *
 * Both shared libraries are loaded into this one process (dlopen with
 * RTLD_LOCAL | RTLD_DEEPBIND: each resolves its own symbols inside itself)
 * and driven through the public API alone, so any two revisions whose
 * relock.h has relock_connect(), relock_acquire() and relock_release()
 * compare.  For each placement (client and redis-server on one core: CPU
 * cost; on two cores: round-trip bound) and each figure (modern unfenced,
 * modern fenced), the two builds take turns in short slices, forwards
 * then backwards, so that whatever else loads the machine falls on both
 * alike; the figure is the median of the slices' paired ratios new/base.
 *
 * Every loop is bounded in count and time.  Exit status: 0 when every
 * ratio is at least RATIO_MIN, 1 when one is lower or a figure could not
 * be measured, 2 on a usage error.  The server is stopped by its PID.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "relock.h"
#include "testsrv.h"

/* "No slower than before", less what two builds of the same code differ
 * by on this machine (code placement): measured 0.99-1.01. */
#define RATIO_MIN 0.98
#define SLICE_MS 100
#define MAX_SLICES 400
#define TTL_MS 10000

/* The public calls a build is driven through. */
typedef struct build {
    const char *path;
    void *dl;
    relock_config *(*config_new)(void);
    void (*config_free)(relock_config *);
    relock_status (*config_set_url)(relock_config *, const char *);
    relock_status (*config_set)(relock_config *, const char *, const char *);
    relock_status (*connect)(const relock_config *, relock_client **);
    void (*client_free)(relock_client *);
    const relock_error *(*client_error)(const relock_client *);
    relock_status (*acquire)(relock_client *, const char *, long long, long long, relock_lock **);
    relock_status (*release)(relock_lock *);
    void (*lock_free)(relock_lock *);
    relock_client *c[2]; /* per figure */
} build;

static const char *const fig_name[2] = {"modern, unfenced", "modern, fenced"};

static int load(build *b, char *err, size_t len)
{
    b->dl = dlopen(b->path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!b->dl) {
        snprintf(err, len, "%s", dlerror());
        return -1;
    }
#define SYM(field, name)                                                   \
    do {                                                                   \
        *(void **)&b->field = dlsym(b->dl, name);                          \
        if (!b->field) {                                                   \
            snprintf(err, len, "%s: no symbol %s", b->path, name);         \
            return -1;                                                     \
        }                                                                  \
    } while (0)
    SYM(config_new, "relock_config_new");
    SYM(config_free, "relock_config_free");
    SYM(config_set_url, "relock_config_set_url");
    SYM(config_set, "relock_config_set");
    SYM(connect, "relock_connect");
    SYM(client_free, "relock_client_free");
    SYM(client_error, "relock_client_error");
    SYM(acquire, "relock_acquire");
    SYM(release, "relock_release");
    SYM(lock_free, "relock_lock_free");
#undef SYM
    return 0;
}

static relock_client *connect_one(build *b, int port, int fencing, char *err, size_t len)
{
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    relock_config *cfg = b->config_new();
    if (!cfg) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    /* A figure, not a fault test: a busy machine slows the bench down
     * rather than making it report lost connections. */
    relock_status st = b->config_set_url(cfg, url);
    if (st == RELOCK_OK)
        st = b->config_set(cfg, "mode", "modern");
    if (st == RELOCK_OK)
        st = b->config_set(cfg, "fencing", fencing ? "true" : "false");
    if (st == RELOCK_OK)
        st = b->config_set(cfg, "command_timeout_ms", "10000");
    relock_client *c = NULL;
    if (st == RELOCK_OK)
        st = b->connect(cfg, &c);
    b->config_free(cfg);
    if (st != RELOCK_OK) {
        snprintf(err, len, "%s: connect: %s", b->path,
                 c ? b->client_error(c)->message : "configuration refused");
        b->client_free(c);
        return NULL;
    }
    return c;
}

/* One acquire + release on the figure's client; 0 on success. */
static int cycle(build *b, int fig, const char *key)
{
    relock_lock *l = NULL;
    if (b->acquire(b->c[fig], key, TTL_MS, 0, &l) != RELOCK_OK)
        return -1;
    int rc = b->release(l) == RELOCK_OK ? 0 : -1;
    b->lock_free(l);
    return rc;
}

/* Cycles per second for slice_ms; -1 when a cycle fails. */
static double slice(build *b, int fig, const char *key, long slice_ms)
{
    uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)slice_ms * 1000000u;
    long n = 0;
    uint64_t now;
    do {
        for (int i = 0; i < 16; i++, n++)
            if (cycle(b, fig, key) != 0)
                return -1;
        now = bu_now_ns();
    } while (now < end);
    return (double)n / ((double)(now - t0) / 1e9);
}

typedef struct result {
    double base, fresh, ratio;
} result;

/* Both builds' figure fig in one placement: paired slices. */
static int measure(build bs[2], int fig, int reps, long sample_ms, result *r, char *err,
                   size_t len)
{
    static double rate[2][MAX_SLICES], ratio[MAX_SLICES];
    long per = sample_ms / SLICE_MS > 0 ? sample_ms / SLICE_MS : 1;
    long n = per * reps;
    if (n > MAX_SLICES)
        n = MAX_SLICES;
    const char *key = fig ? "bench:builds:fenced" : "bench:builds:modern";
    for (int w = 0; w < 200; w++) /* warm-up: connections, caches, scripts */
        for (int i = 0; i < 2; i++)
            if (cycle(&bs[i], fig, key) != 0) {
                snprintf(err, len, "%s: %s: a warm-up cycle failed: %s", bs[i].path,
                         fig_name[fig], bs[i].client_error(bs[i].c[fig])->message);
                return -1;
            }
    for (long k = 0; k < n; k++) {
        for (int j = 0; j < 2; j++) {
            int i = k % 2 ? 1 - j : j; /* neither always first */
            rate[i][k] = slice(&bs[i], fig, key, SLICE_MS);
            if (rate[i][k] < 0) {
                snprintf(err, len, "%s: %s: a cycle failed: %s", bs[i].path, fig_name[fig],
                         bs[i].client_error(bs[i].c[fig])->message);
                return -1;
            }
        }
        ratio[k] = rate[1][k] / rate[0][k];
    }
    r->ratio = bu_median(ratio, (int)n);
    r->base = bu_median(rate[0], (int)n);
    r->fresh = bu_median(rate[1], (int)n);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: relock-bench-builds --base OLD/librelock.so --new NEW/librelock.so "
               "[--reps N] [--sample-ms MS]\n"
               "  the uncontended blocking acquire+release cycle of two builds, side by side\n"
               "  --reps N        samples per figure (default 5, at most 20)\n"
               "  --sample-ms MS  length of one sample (default 1000), cut into %d ms slices\n",
            SLICE_MS);
}

static int pin_pid(pid_t pid, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(pid, sizeof set, &set);
}

int main(int argc, char **argv)
{
    build bs[2] = {{.path = NULL}, {.path = NULL}};
    long reps = 5, sample_ms = 1000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--base") == 0 && i + 1 < argc)
            bs[0].path = argv[++i];
        else if (strcmp(argv[i], "--new") == 0 && i + 1 < argc)
            bs[1].path = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc &&
                 bu_parse_long(argv[i + 1], 1, 20, &reps) == 0)
            i++;
        else if (strcmp(argv[i], "--sample-ms") == 0 && i + 1 < argc &&
                 bu_parse_long(argv[i + 1], SLICE_MS, 10000, &sample_ms) == 0)
            i++;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "relock-bench-builds: bad argument: %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!bs[0].path || !bs[1].path) {
        usage(stderr);
        return 2;
    }
    char err[600];
    for (int i = 0; i < 2; i++)
        if (load(&bs[i], err, sizeof err) != 0) {
            fprintf(stderr, "relock-bench-builds: %s\n", err);
            return 1;
        }
    int cpu[2];
    int ncpu = bu_first_cpus(cpu);
    if (ncpu < 1) {
        fprintf(stderr, "relock-bench-builds: cannot read my CPU affinity\n");
        return 1;
    }
    testsrv srv;
    if (testsrv_start(&srv, NULL) != 0) {
        fprintf(stderr, "relock-bench-builds: cannot start redis-server\n");
        return 1;
    }
    int failed = 0, missed = 0;
    printf("relock-bench-builds: uncontended acquire+release, median of paired %d ms slices "
           "over %ld x %ld ms; base %s, new %s\n\n",
           SLICE_MS, reps, sample_ms, bs[0].path, bs[1].path);
    printf("| placement | figure | base cycles/s | new cycles/s | new/base | target |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int p = 0; p < (ncpu >= 2 ? 2 : 1) && !failed; p++) {
        int scpu = p ? cpu[1] : cpu[0];
        if (pin_pid(0, cpu[0]) != 0 || pin_pid(srv.pid, scpu) != 0) {
            fprintf(stderr, "relock-bench-builds: cannot pin: %s\n", strerror(errno));
            failed = 1;
            break;
        }
        for (int fig = 0; fig < 2 && !failed; fig++) {
            result r;
            for (int i = 0; i < 2 && !failed; i++)
                if (!(bs[i].c[fig] = connect_one(&bs[i], srv.port, fig, err, sizeof err)))
                    failed = 1;
            if (!failed && measure(bs, fig, (int)reps, sample_ms, &r, err, sizeof err) != 0)
                failed = 1;
            for (int i = 0; i < 2; i++) {
                if (bs[i].c[fig])
                    bs[i].client_free(bs[i].c[fig]);
                bs[i].c[fig] = NULL;
            }
            if (failed) {
                fprintf(stderr, "relock-bench-builds: %s\n", err);
                break;
            }
            /* A missed target does not end the run: every figure is
             * measured, and the exit status tells. */
            int ok = r.ratio >= RATIO_MIN;
            missed |= !ok;
            printf("| %s | %s | %.0f | %.0f | %.3f | >= %.2f %s |\n",
                   p ? "cross-core" : "same-core", fig_name[fig], r.base, r.fresh, r.ratio,
                   RATIO_MIN, ok ? "met" : "MISSED");
            fflush(stdout);
        }
    }
    testsrv_stop(&srv);
    failed |= missed;
    printf("\n%s\n", failed ? "RESULT: FAIL" : "RESULT: PASS");
    return failed ? 1 : 0;
}
