/*
 * Latency figures of relock-bench (design.md §7, waiting): how long a blocked
 * waiter takes to get a lock once it is free.
 *
 *   handoff   A holder (this process) holds the lock with a 10 s TTL; a
 *             waiter process is blocked in relock_acquire on it; the holder
 *             releases.  Measured: from just before relock_release() to
 *             just after the waiter's relock_acquire() returned.  With
 *             notifications the waiter's backoff is raised to 10 s, so only
 *             the release notice can wake it within the sample; without
 *             them (wait.notify = false) it wakes on its default backoff.
 *   takeover  The holder acquires with a short lease (50 ms) and dies: the
 *             handle is dropped, the lock never released.  Measured: from
 *             the end the key carries (modern: the server's PEXPIRETIME;
 *             legacy, in ms: the timestamp itself) to just after the
 *             waiter's relock_acquire() returned.
 *
 * Both processes read CLOCK_MONOTONIC; the waiter sends its time over a
 * pipe.  Wall-clock ends (the server's and the legacy timestamp, both
 * CLOCK_REALTIME in ms) are moved to the monotonic clock by the offset
 * between the two clocks, read just before.
 *
 * The handoff figures form one group and the takeover figures another;
 * within a group the figures take turns, one sample each (each figure has
 * its own holder client and waiter process, idle while the others run),
 * and a few PINGs follow every turn: the baseline for the multiples.  In
 * the handoff group each turn also ends with a "cold" PING after 10-20 ms
 * of idle time, as the release is: on a virtual machine the first round
 * trip after idling costs several warm ones.  Each figure takes up to
 * LAT_SAMPLES samples within its group's time limit.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"
#include "relock.h"
#include "testutil.h"

#define WAITER_TTL_MS 30000 /* the waiter's own lease; it releases at once */
#define WAITER_WAIT_MS 5000 /* its wait bound: far beyond any sample */
#define NOTIFY_SUFFIX " relock:released" /* src/internal.h RELOCK__NOTIFY_SUFFIX */

typedef struct latfig {
    const char *key;   /* result keys lat_<key>_... and the lock name */
    const char *what;  /* for progress lines */
    const char *mode;
    int takeover;      /* 0 handoff, 1 takeover after expiry */
    int notify;        /* the waiter listens for release notices */
    const char *const *holder_settings;
    const char *const *waiter_settings;
    long limit_ms;
} latfig;

static const char *const only_notice[] = {"wait.backoff_max_ms", "10000", "wait.backoff_min_ms",
                                          "10000", NULL};
static const char *const no_notify[] = {"wait.notify", "false", NULL};
static const char *const legacy_ms[] = {"legacy.clock_unit", "ms", NULL};

static const latfig figs[] = {
    {"handoff_modern", "handoff, modern", "modern", 0, 1, NULL, only_notice, HANDOFF_LIMIT_MS},
    {"handoff_bridge", "handoff, bridge", "bridge", 0, 1, NULL, only_notice, HANDOFF_LIMIT_MS},
    {"handoff_nonotify", "handoff, modern, notify off", "modern", 0, 0, NULL, no_notify,
     HANDOFF_LIMIT_MS},
    {"takeover_modern", "takeover after expiry, modern", "modern", 1, 1, NULL, NULL,
     TAKEOVER_LIMIT_MS},
    {"takeover_legacy", "takeover after expiry, legacy (ms)", "legacy", 1, 1, legacy_ms,
     legacy_ms, TAKEOVER_LIMIT_MS},
};

static void write_str(int fd, const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        s += n;
        len -= (size_t)n;
    }
}

/* One line from fd (without its newline) before the monotonic deadline
 * (ns); 0 on success.  Byte by byte: the lines are short and nothing is
 * left buffered for the next call. */
static int read_line(int fd, char *buf, size_t len, uint64_t deadline)
{
    size_t used = 0;
    while (used + 1 < len) {
        char ch;
        int n = bu_read_deadline(fd, &ch, 1, deadline);
        if (n <= 0)
            return -1;
        if (ch == '\n') {
            buf[used] = '\0';
            return 0;
        }
        buf[used++] = ch;
    }
    buf[used] = '\0';
    return -1;
}

/* The waiter process: for every 'g' on cmd_fd, acquire (blocking), note
 * the time, release, and report "t NS" (or "e WHY") on res_fd.  Never
 * returns. */
static void waiter(const latfig *f, int port, int cmd_fd, int res_fd)
{
    char err[300] = "", line[400];
    relock_client *c = bench_connect(port, f->mode, f->waiter_settings, err, sizeof err);
    if (!c) {
        snprintf(line, sizeof line, "e waiter: %s\n", err);
        write_str(res_fd, line);
        _exit(1);
    }
    write_str(res_fd, "r\n");
    for (;;) {
        char ch;
        ssize_t n = read(cmd_fd, &ch, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 1 || ch != 'g')
            break;
        relock_lock *l = NULL;
        relock_status st = relock_acquire(c, f->key, WAITER_TTL_MS, WAITER_WAIT_MS, &l);
        uint64_t t = bu_now_ns();
        if (st != RELOCK_OK) {
            snprintf(line, sizeof line, "e waiter's acquire: %s: %s\n", relock_status_name(st),
                     relock_client_error(c)->message);
        } else {
            st = relock_release(l);
            if (st != RELOCK_OK)
                snprintf(line, sizeof line, "e waiter's release: %s: %s\n",
                         relock_status_name(st), relock_client_error(c)->message);
            else
                snprintf(line, sizeof line, "t %llu\n", (unsigned long long)t);
        }
        relock_lock_free(l);
        for (char *p = line; *p && p[1]; p++)
            if (*p == '\n')
                *p = ' ';
        write_str(res_fd, line);
    }
    relock_client_free(c);
    _exit(0);
}

/* CLOCK_REALTIME minus CLOCK_MONOTONIC in ns, from the closest of a few
 * readings. */
static long long real_minus_mono_ns(void)
{
    long long best = LLONG_MAX, off = 0;
    for (int i = 0; i < 5; i++) {
        uint64_t m1 = bu_now_ns();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t m2 = bu_now_ns();
        long long real = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        if ((long long)(m2 - m1) < best) {
            best = (long long)(m2 - m1);
            off = real - (long long)(m1 + (m2 - m1) / 2);
        }
    }
    return off;
}

/* Waits until someone listens on chan (the waiter has subscribed); 0 when
 * it did before the deadline (monotonic ns). */
static int wait_subscribed(redisContext *rc, const char *chan, uint64_t deadline)
{
    while (bu_now_ns() < deadline) {
        redisReply *r = redisCommand(rc, "PUBSUB NUMSUB %s", chan);
        long long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                              r->element[1]->type == REDIS_REPLY_INTEGER
                          ? r->element[1]->integer
                          : -1;
        if (r)
            freeReplyObject(r);
        if (n < 0)
            return -1;
        if (n > 0)
            return 0;
        bu_sleep_until_ns(bu_now_ns() + 200000u);
    }
    return -1;
}

static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* One sample: 0 with *us set, -1 with err set (the figure stops). */
static int sample(const latfig *f, relock_client *hc, redisContext *rc, int cmd_fd, int res_fd,
                  uint64_t *rng, double *us, int *estimated, char *err, size_t errlen)
{
    relock_lock *hl = NULL;
    long ttl = f->takeover ? TAKEOVER_TTL_MS : HANDOFF_HOLDER_TTL_MS;
    relock_status st = relock_try_acquire(hc, f->key, ttl, &hl);
    if (st != RELOCK_OK) {
        snprintf(err, errlen, "holder's acquire: %s: %s", relock_status_name(st),
                 relock_client_error(hc)->message);
        return -1;
    }
    uint64_t t0; /* the reference: the release, or the key's end */
    if (f->takeover) {
        long long end_ms = -1;
        if (strcmp(f->mode, "legacy") == 0) {
            end_ms = atoll(relock_lock_value(hl)); /* ms since the epoch */
        } else {
            redisReply *r = redisCommand(rc, "PEXPIRETIME %s", f->key);
            if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0)
                end_ms = r->integer;
            if (r)
                freeReplyObject(r);
            if (end_ms < 0) { /* before Redis 7.0: from our side of the SET */
                end_ms = bu_wall_ms() + ttl;
                *estimated = 1;
            }
        }
        relock_lock_free(hl); /* the holder dies: never released */
        t0 = (uint64_t)(end_ms * 1000000LL - real_minus_mono_ns());
        write_str(cmd_fd, "g");
    } else {
        uint64_t go = bu_now_ns();
        write_str(cmd_fd, "g");
        if (f->notify) {
            char chan[128];
            snprintf(chan, sizeof chan, "%s" NOTIFY_SUFFIX, f->key);
            if (wait_subscribed(rc, chan, go + 2000000000u) != 0) {
                snprintf(err, errlen, "the waiter did not subscribe within 2 s");
                relock_release(hl);
                relock_lock_free(hl);
                return -1;
            }
        }
        long span = HANDOFF_DELAY_MAX_MS - HANDOFF_DELAY_MIN_MS + 1;
        long delay = HANDOFF_DELAY_MIN_MS + (long)(next_rand(rng) % (uint64_t)span);
        bu_sleep_until_ns(go + (uint64_t)delay * 1000000u);
        t0 = bu_now_ns();
        st = relock_release(hl);
        relock_lock_free(hl);
        if (st != RELOCK_OK) {
            snprintf(err, errlen, "holder's release: %s: %s", relock_status_name(st),
                     relock_client_error(hc)->message);
            return -1;
        }
    }
    char line[400];
    uint64_t deadline = bu_now_ns() + (uint64_t)(WAITER_WAIT_MS + 3000) * 1000000u;
    if (read_line(res_fd, line, sizeof line, deadline) != 0) {
        snprintf(err, errlen, "the waiter did not report within %d s", WAITER_WAIT_MS / 1000 + 3);
        return -1;
    }
    unsigned long long t;
    if (line[0] != 't' || sscanf(line, "t %llu", &t) != 1) {
        snprintf(err, errlen, "%s", line[0] == 'e' ? line + 2 : line);
        return -1;
    }
    double d = ((double)t - (double)t0) / 1000.0;
    if (d < 0) {
        /* The waiter had the lock before it was free: a safety failure,
         * never a figure. */
        snprintf(err, errlen, "the waiter acquired %.0f us BEFORE the %s", -d,
                 f->takeover ? "key's end" : "holder released");
        return -1;
    }
    *us = d;
    return 0;
}

/* A figure being measured: its holder client, its waiter process, and its
 * samples so far. */
typedef struct latrun {
    const latfig *f;
    relock_client *hc;
    pid_t pid;
    int cmd, res; /* pipes to and from the waiter; -1 when closed */
    double us[LAT_SAMPLES];
    int n, estimated;
    char err[400]; /* set: the figure stopped */
} latrun;

static void run_start(latrun *lr, const latfig *f, int port, redisContext *rc)
{
    memset(lr, 0, sizeof *lr);
    lr->f = f;
    lr->cmd = lr->res = -1;
    lr->hc = bench_connect(port, f->mode, f->holder_settings, lr->err, sizeof lr->err);
    if (!lr->hc)
        return;
    redisReply *r = redisCommand(rc, "DEL %s", f->key);
    if (r)
        freeReplyObject(r);
    int cmd[2], res[2];
    if (pipe(cmd) != 0) {
        snprintf(lr->err, sizeof lr->err, "pipe: %s", strerror(errno));
        return;
    }
    if (pipe(res) != 0) {
        snprintf(lr->err, sizeof lr->err, "pipe: %s", strerror(errno));
        close(cmd[0]);
        close(cmd[1]);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(lr->err, sizeof lr->err, "fork: %s", strerror(errno));
        close(cmd[0]);
        close(cmd[1]);
        close(res[0]);
        close(res[1]);
        return;
    }
    if (pid == 0) {
        bench_child_signals();
        close(cmd[1]);
        close(res[0]);
        waiter(f, port, cmd[0], res[1]);
    }
    bench_track(pid);
    lr->pid = pid;
    close(cmd[0]);
    close(res[1]);
    lr->cmd = cmd[1];
    lr->res = res[0];
    char line[400] = "";
    if (read_line(lr->res, line, sizeof line, bu_now_ns() + 10000000000u) != 0 ||
        strcmp(line, "r") != 0)
        snprintf(lr->err, sizeof lr->err, "%s",
                 line[0] == 'e' ? line + 2 : "the waiter did not start within 10 s");
}

/* Stops the waiter, reports the figure, frees what it used. */
static void run_finish(latrun *lr, redisContext *rc, double secs)
{
    const latfig *f = lr->f;
    if (lr->cmd >= 0) {
        write_str(lr->cmd, "q");
        close(lr->cmd);
    }
    if (lr->res >= 0)
        close(lr->res);
    if (lr->pid > 0) {
        tu_wait_child(lr->pid, 10000);
        bench_untrack(lr->pid);
    }
    relock_client_free(lr->hc);
    redisReply *r = redisCommand(rc, "DEL %s", f->key);
    if (r)
        freeReplyObject(r);
    if (lr->err[0])
        bench_error("%s (after %d samples): %s", f->what, lr->n, lr->err);
    int n = lr->n;
    if (n == 0)
        return;
    char key[64];
    snprintf(key, sizeof key, "lat_%s_n", f->key);
    bench_out(key, "%d", n);
    snprintf(key, sizeof key, "lat_%s_secs", f->key);
    bench_out(key, "%.1f", secs);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += lr->us[i];
    snprintf(key, sizeof key, "lat_%s_mean", f->key);
    bench_out(key, "%.1f", sum / n);
    snprintf(key, sizeof key, "lat_%s_p99", f->key);
    bench_out(key, "%.1f", bu_percentile(lr->us, n, 99)); /* sorts us */
    snprintf(key, sizeof key, "lat_%s_p50", f->key);
    bench_out(key, "%.1f", bu_percentile(lr->us, n, 50));
    snprintf(key, sizeof key, "lat_%s_min", f->key);
    bench_out(key, "%.1f", lr->us[0]);
    snprintf(key, sizeof key, "lat_%s_max", f->key);
    bench_out(key, "%.1f", lr->us[n - 1]);
    if (lr->estimated) {
        snprintf(key, sizeof key, "lat_%s_estimated", f->key);
        bench_out(key, "1");
    }
}

/* PING round trips taken between the samples, for the multiples: warm
 * ones, back to back as in the throughput section, and (handoff group)
 * cold ones, each the first command after as long an idle time as a
 * handoff's release follows (HANDOFF_DELAY_MIN_MS to _MAX_MS). */
#define LAT_PINGS_PER_ROUND 5
static double g_ping_us[2 * LAT_SAMPLES * LAT_PINGS_PER_ROUND];
static int g_nping;
static double g_cold_us[LAT_SAMPLES];
static int g_ncold;

/* One PING's round trip in us, or -1. */
static double ping_us(redisContext *rc)
{
    uint64_t t = bu_now_ns();
    redisReply *r = redisCommand(rc, "PING");
    uint64_t d = bu_now_ns() - t;
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok ? (double)d / 1000.0 : -1;
}

static void pings(redisContext *rc, int cold, uint64_t *rng)
{
    if (cold && g_ncold < LAT_SAMPLES) {
        long span = HANDOFF_DELAY_MAX_MS - HANDOFF_DELAY_MIN_MS + 1;
        long idle = HANDOFF_DELAY_MIN_MS + (long)(next_rand(rng) % (uint64_t)span);
        bu_sleep_until_ns(bu_now_ns() + (uint64_t)idle * 1000000u);
        double d = ping_us(rc);
        if (d >= 0)
            g_cold_us[g_ncold++] = d;
    }
    for (int i = 0; i < LAT_PINGS_PER_ROUND; i++) {
        if (g_nping >= (int)(sizeof g_ping_us / sizeof g_ping_us[0]))
            return;
        double d = ping_us(rc);
        if (d >= 0)
            g_ping_us[g_nping++] = d;
    }
}

/*
 * The figures of a group take turns, one sample each, as the throughput
 * figures take turns in slices: load from elsewhere on the machine falls
 * on all of them alike.  A few PINGs follow every turn.  Each figure stops
 * at LAT_SAMPLES samples or on an error; the group at limit_ms.
 */
static void run_group(const latfig *const *g, int n, long limit_ms, int cold_pings, int port,
                      redisContext *rc, uint64_t *rng)
{
    latrun *lr = calloc((size_t)n, sizeof *lr);
    if (!lr) {
        bench_error("latency: out of memory");
        return;
    }
    for (int i = 0; i < n; i++) {
        fprintf(stderr, "relock-bench [%s]: %s\n", opt.phase, g[i]->what);
        run_start(&lr[i], g[i], port, rc);
    }
    uint64_t start = bu_now_ns(), end = start + (uint64_t)limit_ms * 1000000u;
    for (int busy = 1; busy && bu_now_ns() < end;) {
        busy = 0;
        for (int i = 0; i < n && bu_now_ns() < end; i++) {
            latrun *r = &lr[i];
            if (r->err[0] || r->n >= LAT_SAMPLES)
                continue;
            busy = 1;
            if (sample(r->f, r->hc, rc, r->cmd, r->res, rng, &r->us[r->n], &r->estimated,
                       r->err, sizeof r->err) == 0)
                r->n++;
        }
        pings(rc, cold_pings, rng);
    }
    double secs = (double)(bu_now_ns() - start) / 1e9;
    for (int i = 0; i < n; i++)
        run_finish(&lr[i], rc, secs);
    free(lr);
}

void bench_latency(int port)
{
    struct timeval tv = {10, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!rc || rc->err) {
        bench_error("latency: cannot connect to the server");
        if (rc)
            redisFree(rc);
        return;
    }
    redisSetTimeout(rc, tv);
    uint64_t rng = bu_now_ns() | 1;
    g_nping = g_ncold = 0;
    const latfig *handoff[] = {&figs[0], &figs[1], &figs[2]};
    const latfig *takeover[] = {&figs[3], &figs[4]};
    run_group(handoff, 3, 3L * HANDOFF_LIMIT_MS, 1, port, rc, &rng);
    run_group(takeover, 2, 2L * TAKEOVER_LIMIT_MS, 0, port, rc, &rng);
    if (g_ncold > 0) {
        bench_out("lat_coldping_n", "%d", g_ncold);
        bench_out("lat_coldping_us", "%.2f", bu_median(g_cold_us, g_ncold));
    }
    if (g_nping > 0) {
        bench_out("lat_ping_n", "%d", g_nping);
        bench_out("lat_ping_per_turn", "%d", LAT_PINGS_PER_ROUND);
        bench_out("lat_ping_us", "%.2f", bu_median(g_ping_us, g_nping));
    }
    redisFree(rc);
}
