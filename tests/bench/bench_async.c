/*
 * relock-bench-async: the asynchronous client's figures of
 * docs/performance.md, run by `./dev bench` (and alone by
 * `./dev bench --only async`).
 *
 *   1. N locks acquired and released concurrently on one libevent loop
 *      (every acquire in flight at once, each released as soon as it is
 *      won), against the same N acquired and released one after another
 *      with the blocking API; the ratio of the times.
 *   2. How many locks one loop holds at once (1k, 10k): all acquired in
 *      flight together, the time until the last is won, and the client's
 *      heap per lock while pending and while held (mallinfo2).
 *   3. A quorum of three servers: N locks acquired and released with every
 *      acquire in flight at once on one loop (a connection per server),
 *      against the same N one after another with the blocking quorum; the
 *      ratio.
 *
 * Both placements, with taskset(1): client and server(s) on one core, and
 * on two cores.  The top process runs `taskset -c CLIENT self --phase
 * --server-cpu CPU` for each; a phase starts its own redis-server on a free
 * port, pins it, and stops it by PID.  Medians of --reps runs.
 */
#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relock.h"
#include "relock_async.h"
#include "relock_async_libevent.h"
#include "testsrv.h"
#include "testutil.h"

static int n_locks = 1000;
static int reps = 5;

static struct event_base *base;
static relock_async_loop loop;
static long done;
static long failed;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Monotonic milliseconds with microseconds: an 8 ms run measured in whole
 * milliseconds would move its ratio by a tenth. */
static double now_msf(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void run_until(long want, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (done < want && tu_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
}

static void released(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)a, (void)e, (void)arg;
    if (st != RELOCK_OK)
        failed++;
    relock_lock_free(l);
    done++;
}

static void won_release(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                        void *arg)
{
    (void)a, (void)arg;
    if (st != RELOCK_OK) {
        fprintf(stderr, "acquire: %s\n", e->message);
        failed++;
        done++;
        return;
    }
    if (relock_async_release(l, released, NULL) != RELOCK_OK) {
        failed++;
        done++;
    }
}

static relock_lock **held;
static void won_keep(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)a, (void)e;
    if (st != RELOCK_OK)
        failed++;
    held[(long)arg] = l;
    done++;
}

static relock_config *config(int port)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    relock_config_set_url(cfg, url);
    relock_config_set(cfg, "mode", "modern");
    relock_config_set(cfg, "key_prefix", "bench:");
    return cfg;
}

/* 3. The quorum: three servers pinned to server_cpu. */
static int quorum_phase(int server_cpu, const char *placement)
{
    testsrv qs[3];
    char urls[3 * 40] = "";
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(server_cpu, &set);
    for (int i = 0; i < 3; i++) {
        if (testsrv_start(&qs[i], NULL) != 0)
            return 1;
        sched_setaffinity(qs[i].pid, sizeof set, &set);
        char one[40];
        snprintf(one, sizeof one, "%sredis://127.0.0.1:%d", i ? ", " : "", qs[i].port);
        strcat(urls, one);
    }
    relock_config *cfg = relock_config_new();
    relock_config_set(cfg, "mode", "modern");
    relock_config_set(cfg, "servers", urls);
    relock_config_set(cfg, "key_prefix", "benchq:");
    relock_client *c;
    if (relock_connect(cfg, &c) != RELOCK_OK) {
        fprintf(stderr, "quorum connect: %s\n", relock_client_error(c)->message);
        return 1;
    }
    base = event_base_new();
    relock_async_libevent(&loop, base);
    relock_async *a;
    if (relock_async_new(cfg, &loop, &a) != RELOCK_OK) {
        fprintf(stderr, "quorum async: %s\n", relock_async_error(a)->message);
        return 1;
    }
    char name[32];
    double tb[64], ta[64];
    for (int r = 0; r < reps && r < 64; r++) {
        double t0 = now_msf();
        for (int i = 0; i < n_locks; i++) {
            relock_lock *l;
            snprintf(name, sizeof name, "s%d", i);
            if (relock_try_acquire(c, name, 10000, &l) != RELOCK_OK ||
                relock_release(l) != RELOCK_OK)
                failed++;
            relock_lock_free(l);
        }
        tb[r] = now_msf() - t0;
        done = 0;
        t0 = now_msf();
        for (int i = 0; i < n_locks; i++) {
            snprintf(name, sizeof name, "a%d", i);
            if (relock_async_try_acquire(a, name, 10000, won_release, NULL, NULL) != RELOCK_OK)
                failed++, done++;
        }
        run_until(n_locks, 60000);
        ta[r] = now_msf() - t0;
    }
    int nr = reps < 64 ? reps : 64;
    double mb = median(tb, nr), ma = median(ta, nr);
    printf("%-10s quorum of 3, N=%d  blocking one after another %.1f ms (%.0f/s)  async "
           "concurrent %.1f ms (%.0f/s)  ratio %.2fx\n",
           placement, n_locks, mb, n_locks * 1000.0 / mb, ma, n_locks * 1000.0 / ma, mb / ma);
    fflush(stdout);
    relock_async_free(a);
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
    relock_client_free(c);
    relock_config_free(cfg);
    for (int i = 0; i < 3; i++)
        testsrv_stop(&qs[i]);
    if (failed)
        fprintf(stderr, "%s quorum: %ld operations failed\n", placement, failed);
    return failed ? 1 : 0;
}

static int phase(int server_cpu, const char *placement)
{
    testsrv srv;
    if (testsrv_start(&srv, NULL) != 0)
        return 1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(server_cpu, &set);
    sched_setaffinity(srv.pid, sizeof set, &set);
    relock_config *cfg = config(srv.port);
    relock_client *c;
    if (relock_connect(cfg, &c) != RELOCK_OK) {
        fprintf(stderr, "connect: %s\n", relock_client_error(c)->message);
        return 1;
    }
    base = event_base_new();
    relock_async_libevent(&loop, base);
    relock_async *a;
    if (relock_async_new(cfg, &loop, &a) != RELOCK_OK)
        return 1;
    char name[32];
    double tb[64], ta[64];
    for (int r = 0; r < reps && r < 64; r++) {
        double t0 = now_msf();
        for (int i = 0; i < n_locks; i++) {
            relock_lock *l;
            snprintf(name, sizeof name, "s%d", i);
            if (relock_try_acquire(c, name, 10000, &l) != RELOCK_OK ||
                relock_release(l) != RELOCK_OK)
                failed++;
            relock_lock_free(l);
        }
        tb[r] = now_msf() - t0;
        done = 0;
        t0 = now_msf();
        for (int i = 0; i < n_locks; i++) {
            snprintf(name, sizeof name, "a%d", i);
            if (relock_async_try_acquire(a, name, 10000, won_release, NULL, NULL) != RELOCK_OK)
                failed++, done++;
        }
        run_until(n_locks, 60000);
        ta[r] = now_msf() - t0;
    }
    int nr = reps < 64 ? reps : 64;
    double mb = median(tb, nr), ma = median(ta, nr);
    printf("%-10s N=%d  blocking one after another %.1f ms (%.0f/s)  async concurrent %.1f ms "
           "(%.0f/s)  ratio %.2fx\n",
           placement, n_locks, mb, n_locks * 1000.0 / mb, ma, n_locks * 1000.0 / ma, mb / ma);
    fflush(stdout);
    /* locks held at once on one loop */
    static const int ks[] = {1000, 10000};
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        int k = ks[ki];
        held = calloc((size_t)k, sizeof *held);
        struct mallinfo2 m0 = mallinfo2();
        done = 0;
        uint64_t t0 = tu_now_ms();
        for (long i = 0; i < k; i++) {
            snprintf(name, sizeof name, "h%ld", i);
            if (relock_async_try_acquire(a, name, 60000, won_keep, (void *)i, NULL) != RELOCK_OK)
                failed++, done++;
        }
        struct mallinfo2 m1 = mallinfo2();
        run_until(k, 120000);
        uint64_t took = tu_now_ms() - t0;
        struct mallinfo2 m2 = mallinfo2();
        long ok = 0;
        for (int i = 0; i < k; i++)
            ok += held[i] != NULL;
        printf("%-10s in flight %5d: %ld held after %llu ms; heap per pending acquire %.0f B, "
               "per held lock %.0f B\n",
               placement, k, ok, (unsigned long long)took,
               (double)(m1.uordblks - m0.uordblks) / k, (double)(m2.uordblks - m0.uordblks) / k);
        fflush(stdout);
        done = 0;
        long want = 0;
        for (int i = 0; i < k; i++)
            if (held[i] && relock_async_release(held[i], released, NULL) == RELOCK_OK)
                want++;
        run_until(want, 120000);
        free(held);
    }
    relock_async_free(a);
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
    relock_client_free(c);
    relock_config_free(cfg);
    testsrv_stop(&srv);
    if (failed) {
        fprintf(stderr, "%s: %ld operations failed\n", placement, failed);
        return 1;
    }
    return quorum_phase(server_cpu, placement);
}

int main(int argc, char **argv)
{
    int server_cpu = -1;
    const char *placement = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n_locks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--phase") == 0 && i + 2 < argc) {
            placement = argv[++i];
            server_cpu = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: relock-bench-async [--n N] [--reps R]\n");
            return 2;
        }
    }
    if (n_locks < 1 || reps < 1)
        return 2;
    if (placement)
        return phase(server_cpu, placement);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const char *names[2] = {"same-core", "cross-core"};
    int status = 0;
    for (int p = 0; p < 2; p++) {
        if (p == 1 && ncpu < 2) {
            fprintf(stderr, "relock-bench-async: one CPU: no cross-core placement\n");
            break;
        }
        char nb[16], rb[16], scpu[8];
        snprintf(nb, sizeof nb, "%d", n_locks);
        snprintf(rb, sizeof rb, "%d", reps);
        snprintf(scpu, sizeof scpu, "%d", p);
        pid_t pid = fork();
        if (pid == 0) {
            execlp("taskset", "taskset", "-c", "0", argv[0], "--n", nb, "--reps", rb, "--phase",
                   names[p], scpu, (char *)NULL);
            fprintf(stderr, "taskset: %s\n", strerror(errno));
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            status = 1;
    }
    return status;
}
