/*
 * Waiting load of relock-bench (design.md §7): how many commands a blocked
 * waiter sends to the server per second while a live holder keeps the
 * lock, in each mode, against a classic legacy client waiting the classic
 * way in the same run.
 *
 *   legacy   a relock waiter in legacy mode (clock unit s) behind a relock
 *            legacy holder: a timestamp without TTL, as a classic holder's
 *   bridge   a bridge waiter behind a bridge holder (timestamp and TTL)
 *   modern   a modern waiter (fenced) behind a modern holder
 *   classic  the baseline: SETNX, then GET, then a sleep of 1-5 ms
 *            (uniformly random), as tests/interop/classic_lock.c and the
 *            seed algorithm do, behind a timestamp of its own
 *   async_bridge, async_modern (built with libevent)
 *            the asynchronous client's waiter, relock_async_acquire() on
 *            a libevent loop, behind a holder of that mode; also compared
 *            with the blocking waiter of its mode in the same rounds,
 *            whose load it must stay of the order of
 *
 * Every holder's lease is WL_HOLD_S seconds, far beyond the group's time,
 * so each waiter waits for the whole group and never nears an expiry.  All
 * waiters are forked at the start, run together for WL_WARM_MS (their
 * first attempts and subscriptions), and are then SIGSTOPped; they take
 * turns, forwards then backwards, --reps rounds: a waiter is continued,
 * left WL_SETTLE_MS to pick up where it stopped (a sleep that ended while
 * it was stopped makes one attempt at once), and for WL_SLICE_MS the
 * server's total_commands_processed (commands inside scripts included)
 * is counted, then it is stopped again.  Only the waiter under measure
 * runs; the INFO that reads the count is subtracted.  Value: the median of
 * the rounds in commands/s; ratio: the median of each round's ratio to
 * the classic waiter's rate in that round (and, for an asynchronous
 * waiter, to the blocking waiter's of its mode).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"
#include "relock.h"
#include "testutil.h"
#ifdef RELOCK_BENCH_ASYNC
#include "relock_async_libevent.h"
#endif

#define WL_HOLD_S 300     /* every holder's lease */
#define WL_WARM_MS 1500   /* all waiters run together before the turns */
#define WL_SETTLE_MS 300  /* after SIGCONT, before counting */
#define WL_SLICE_MS 1000  /* counted per turn */
#define WL_CMDS 8 /* command names kept per figure for the detail */

typedef struct wlfig {
    const char *key; /* result keys wait_<key>..., lock name bench:wait:<key> */
    const char *mode; /* NULL: the classic loop */
    int async;        /* the asynchronous client's waiter */
    int peer;         /* the blocking waiter of the same mode (its index), or -1 */
} wlfig;

static const wlfig figs[] = {
    {"classic", NULL, 0, -1},          {"legacy", "legacy", 0, -1},
    {"bridge", "bridge", 0, -1},       {"modern", "modern", 0, -1},
#ifdef RELOCK_BENCH_ASYNC
    {"async_bridge", "bridge", 1, 2}, {"async_modern", "modern", 1, 3},
#endif
};
#define WL_NFIGS ((int)(sizeof figs / sizeof *figs))

typedef struct wlrun {
    const wlfig *f;
    relock_client *hc; /* the holder's client (relock figures) */
    relock_lock *hl;
    pid_t pid;
    int res; /* from the waiter: "r" once it waits, or "e WHY" */
    double rate[MAX_REPS];
    int n;
    /* per-command calls over the counted slices, from INFO commandstats */
    char cmd[WL_CMDS][32];
    long long calls[WL_CMDS];
    double secs;
    char err[420];
} wlrun;

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

static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* The classic waiter: the seed algorithm's loop, never reaching the
 * takeover (the holder's timestamp is far away).  Bounded by the group's
 * time; the phase kills it before. */
static void classic_waiter(int port, const char *key, int res_fd)
{
    struct timeval tv = {10, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!rc || rc->err) {
        write_str(res_fd, "e classic waiter: cannot connect\n");
        _exit(1);
    }
    redisSetTimeout(rc, tv);
    write_str(res_fd, "r\n");
    uint64_t rng = bu_now_ns() | 1;
    uint64_t end = bu_now_ns() + 600ull * 1000000000ull;
    while (bu_now_ns() < end) {
        long long now = bu_wall_ms() / 1000;
        redisReply *r = redisCommand(rc, "SETNX %s %lld", key, now + 30 + 1);
        int got = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        if (r)
            freeReplyObject(r);
        if (got)
            _exit(2); /* the holder's key vanished: not a measurement */
        r = redisCommand(rc, "GET %s", key);
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        if (r)
            freeReplyObject(r);
        if (v < now)
            _exit(2); /* expired: never, with the holder's far timestamp */
        bu_sleep_until_ns(bu_now_ns() + (1000 + next_rand(&rng) % 4001) * 1000u);
    }
    _exit(0);
}

/* A relock waiter with default wait settings: acquire, blocked until the
 * phase kills it. */
static void relock_waiter(int port, const wlfig *f, const char *name, int res_fd)
{
    char err[300], line[400];
    relock_client *c = bench_connect(port, f->mode, NULL, err, sizeof err);
    if (!c) {
        snprintf(line, sizeof line, "e %s waiter: %s\n", f->key, err);
        write_str(res_fd, line);
        _exit(1);
    }
    write_str(res_fd, "r\n");
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, name, 30000, 600000, &l);
    snprintf(line, sizeof line, "e %s waiter's acquire returned %s: %s\n", f->key,
             relock_status_name(st), relock_client_error(c)->message);
    write_str(res_fd, line);
    _exit(2);
}

#ifdef RELOCK_BENCH_ASYNC
static int async_done;
static char async_why[300];

static void async_acquired(relock_async *a, relock_status st, relock_lock *l,
                           const relock_error *e, void *arg)
{
    (void)a, (void)l, (void)arg;
    snprintf(async_why, sizeof async_why, "%s: %s", relock_status_name(st),
             e ? e->message : "");
    async_done = 1;
}

static void async_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

/* The asynchronous client's waiter: relock_async_acquire() with default
 * wait settings on a libevent loop, run until the acquire ends (it never
 * should: the phase kills it).  A tick keeps each turn of the loop short,
 * so that the loop's own bound in time holds. */
static void async_waiter(int port, const wlfig *f, const char *name, int res_fd)
{
    char url[64], line[400];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    relock_config *cfg = relock_config_new();
    relock_async_loop loop;
    relock_async *a = NULL;
    struct event_base *base = event_base_new();
    if (!cfg || !base || relock_config_set_url(cfg, url) != RELOCK_OK ||
        relock_config_set(cfg, "mode", f->mode) != RELOCK_OK ||
        relock_config_set(cfg, "command_timeout_ms", "10000") != RELOCK_OK) {
        snprintf(line, sizeof line, "e %s waiter: config or event base\n", f->key);
        write_str(res_fd, line);
        _exit(1);
    }
    relock_async_libevent(&loop, base);
    if (relock_async_new(cfg, &loop, &a) != RELOCK_OK ||
        relock_async_acquire(a, name, 30000, 600000, async_acquired, NULL, NULL) != RELOCK_OK) {
        snprintf(line, sizeof line, "e %s waiter: %s\n", f->key,
                 a ? relock_async_error(a)->message : "out of memory");
        write_str(res_fd, line);
        _exit(1);
    }
    struct event *tick = event_new(base, -1, EV_PERSIST, async_tick, NULL);
    struct timeval tv = {0, 100000};
    event_add(tick, &tv);
    write_str(res_fd, "r\n");
    uint64_t end = bu_now_ns() + 600ull * 1000000000ull;
    while (!async_done && bu_now_ns() < end)
        event_base_loop(base, EVLOOP_ONCE);
    snprintf(line, sizeof line, "e %s waiter's acquire returned %s\n", f->key,
             async_done ? async_why : "nothing in 600 s");
    write_str(res_fd, line);
    _exit(2);
}
#endif

static void start(wlrun *w, const wlfig *f, int port, redisContext *rc)
{
    memset(w, 0, sizeof *w);
    w->f = f;
    w->res = -1;
    char name[64];
    snprintf(name, sizeof name, "bench:wait:%s", f->key);
    redisReply *r = redisCommand(rc, "DEL %s", name);
    if (r)
        freeReplyObject(r);
    if (f->mode) {
        w->hc = bench_connect(port, f->mode, NULL, w->err, sizeof w->err);
        if (!w->hc)
            return;
        relock_status st = relock_try_acquire(w->hc, name, WL_HOLD_S * 1000L, &w->hl);
        if (st != RELOCK_OK) {
            snprintf(w->err, sizeof w->err, "holder's acquire: %s: %s", relock_status_name(st),
                     relock_client_error(w->hc)->message);
            return;
        }
    } else {
        r = redisCommand(rc, "SET %s %lld", name, bu_wall_ms() / 1000 + WL_HOLD_S + 1);
        if (r)
            freeReplyObject(r);
    }
    int res[2];
    if (pipe(res) != 0) {
        snprintf(w->err, sizeof w->err, "pipe: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(w->err, sizeof w->err, "fork: %s", strerror(errno));
        close(res[0]);
        close(res[1]);
        return;
    }
    if (pid == 0) {
        bench_child_signals();
        close(res[0]);
#ifdef RELOCK_BENCH_ASYNC
        if (f->async)
            async_waiter(port, f, name, res[1]);
#endif
        if (f->mode)
            relock_waiter(port, f, name, res[1]);
        classic_waiter(port, name, res[1]);
    }
    bench_track(pid);
    w->pid = pid;
    close(res[1]);
    w->res = res[0];
    char line[400] = "";
    int n = bu_read_deadline(w->res, line, sizeof line - 1, bu_now_ns() + 10000000000u);
    line[n > 0 ? n : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(line, "r") != 0)
        snprintf(w->err, sizeof w->err, "%.400s",
                 line[0] == 'e' ? line + 2 : "the waiter did not start within 10 s");
}

/* A message the waiter sent since it started ("e ..."): it stopped
 * waiting, and the figure is void. */
static void check_alive(wlrun *w)
{
    if (w->err[0] || w->res < 0)
        return;
    char line[400];
    int n = bu_read_deadline(w->res, line, sizeof line - 1, bu_now_ns());
    if (n > 0) {
        line[n] = '\0';
        line[strcspn(line, "\n")] = '\0';
        snprintf(w->err, sizeof w->err, "%.400s", line[0] == 'e' ? line + 2 : line);
    } else if (n == 0) {
        snprintf(w->err, sizeof w->err, "the waiter ended");
    }
}

/* INFO commandstats: per command, its calls; returns how many read. */
static int cmdstats(redisContext *rc, char names[][32], long long *calls, int max)
{
    redisReply *r = redisCommand(rc, "INFO commandstats");
    int n = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        for (const char *p = strstr(r->str, "cmdstat_"); p && n < max;
             p = strstr(p + 1, "\ncmdstat_")) {
            if (*p == '\n')
                p++;
            const char *colon = strchr(p, ':');
            const char *eq = colon ? strstr(colon, "calls=") : NULL;
            if (!colon || !eq)
                break;
            size_t len = (size_t)(colon - p - 8);
            if (len >= 32)
                len = 31;
            memcpy(names[n], p + 8, len);
            names[n][len] = '\0';
            calls[n] = atoll(eq + 6);
            n++;
        }
    }
    if (r)
        freeReplyObject(r);
    return n;
}

static long long total_commands(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "INFO stats");
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "total_commands_processed:");
        if (p)
            n = atoll(p + strlen("total_commands_processed:"));
    }
    if (r)
        freeReplyObject(r);
    return n;
}

#define WL_MAXSTAT 64

/* Adds the per-command differences b - a (the INFO commands excluded) to
 * w's list. */
static void add_calls(wlrun *w, char an[][32], const long long *ac, int na, char bn[][32],
                      const long long *bc, int nb)
{
    for (int j = 0; j < nb; j++) {
        if (strcmp(bn[j], "info") == 0)
            continue;
        long long before = 0;
        for (int i = 0; i < na; i++)
            if (strcmp(an[i], bn[j]) == 0)
                before = ac[i];
        long long d = bc[j] - before;
        if (d <= 0)
            continue;
        int k = 0;
        while (k < WL_CMDS && w->cmd[k][0] && strcmp(w->cmd[k], bn[j]) != 0)
            k++;
        if (k == WL_CMDS)
            continue;
        snprintf(w->cmd[k], sizeof w->cmd[k], "%.31s", bn[j]);
        w->calls[k] += d;
    }
}

/* One counted turn of w; its rate in commands/s, or -1. */
static double turn(wlrun *w, redisContext *rc)
{
    if (w->err[0])
        return -1;
    kill(w->pid, SIGCONT);
    bu_sleep_until_ns(bu_now_ns() + (uint64_t)WL_SETTLE_MS * 1000000u);
    static char an[WL_MAXSTAT][32], bn[WL_MAXSTAT][32];
    long long ac[WL_MAXSTAT], bc[WL_MAXSTAT];
    int na = cmdstats(rc, an, ac, WL_MAXSTAT);
    long long c0 = total_commands(rc);
    uint64_t t0 = bu_now_ns();
    bu_sleep_until_ns(t0 + (uint64_t)WL_SLICE_MS * 1000000u);
    long long c1 = total_commands(rc);
    uint64_t t1 = bu_now_ns();
    int nb = cmdstats(rc, bn, bc, WL_MAXSTAT);
    kill(w->pid, SIGSTOP);
    check_alive(w);
    if (w->err[0] || c0 < 0 || c1 < 0)
        return -1;
    /* A command is counted once it has run: c1 includes the INFO stats
     * that read c0, and nothing else of the phase's. */
    double secs = (double)(t1 - t0) / 1e9;
    w->secs += secs;
    add_calls(w, an, ac, na, bn, bc, nb);
    return (double)(c1 - c0 - 1) / secs;
}

static void finish(wlrun *w, double *ratios, int nratios, double *bratios, int nbratios)
{
    if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        kill(w->pid, SIGCONT);
        tu_wait_child(w->pid, 10000);
        bench_untrack(w->pid);
    }
    if (w->res >= 0)
        close(w->res);
    if (w->hl) {
        relock_release(w->hl);
        relock_lock_free(w->hl);
    }
    relock_client_free(w->hc);
    if (w->err[0]) {
        bench_error("waiting load, %s: %s", w->f->key, w->err);
        return;
    }
    if (w->n == 0)
        return;
    char key[64], text[400];
    size_t used = 0;
    for (int i = 0; i < w->n; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%.0f", i ? "," : "",
                                 w->rate[i]);
    snprintf(key, sizeof key, "wait_%s_samples", w->f->key);
    bench_out(key, "%s", text);
    double v[MAX_REPS];
    memcpy(v, w->rate, sizeof v);
    snprintf(key, sizeof key, "wait_%s", w->f->key);
    bench_out(key, "%.1f", bu_median(v, w->n));
    if (nratios > 0) {
        snprintf(key, sizeof key, "wait_%s_pratio", w->f->key);
        bench_out(key, "%.4f", bu_median(ratios, nratios));
    }
    if (nbratios > 0) {
        snprintf(key, sizeof key, "wait_%s_bratio", w->f->key);
        bench_out(key, "%.4f", bu_median(bratios, nbratios));
    }
    used = 0;
    text[0] = '\0';
    for (int k = 0; k < WL_CMDS && w->cmd[k][0] && w->secs > 0; k++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s %.1f/s", k ? ", " : "",
                                 w->cmd[k], (double)w->calls[k] / w->secs);
    if (text[0]) {
        snprintf(key, sizeof key, "wait_%s_cmds", w->f->key);
        bench_out(key, "%s", text);
    }
}

void bench_waitload(int port)
{
    struct timeval tv = {10, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!rc || rc->err) {
        bench_error("waiting load: cannot connect to the server");
        if (rc)
            redisFree(rc);
        return;
    }
    redisSetTimeout(rc, tv);
    fprintf(stderr, "relock-bench [%s]: waiting load\n", opt.phase);
    static wlrun w[WL_NFIGS];
    for (int i = 0; i < WL_NFIGS; i++)
        start(&w[i], &figs[i], port, rc);
    bu_sleep_until_ns(bu_now_ns() + (uint64_t)WL_WARM_MS * 1000000u);
    for (int i = 0; i < WL_NFIGS; i++)
        if (w[i].pid > 0)
            kill(w[i].pid, SIGSTOP);
    double ratios[WL_NFIGS][MAX_REPS], bratios[WL_NFIGS][MAX_REPS];
    int nratios[WL_NFIGS] = {0}, nbratios[WL_NFIGS] = {0};
    for (int rep = 0; rep < opt.reps; rep++) {
        double rate[WL_NFIGS];
        for (int j = 0; j < WL_NFIGS; j++) {
            int i = rep % 2 ? WL_NFIGS - 1 - j : j;
            rate[i] = turn(&w[i], rc);
            if (rate[i] >= 0)
                w[i].rate[w[i].n++] = rate[i];
        }
        for (int i = 1; i < WL_NFIGS; i++)
            if (rate[i] >= 0 && rate[0] > 0)
                ratios[i][nratios[i]++] = rate[i] / rate[0];
        /* An asynchronous waiter against the blocking one of its mode. */
        for (int i = 1; i < WL_NFIGS; i++) {
            int p = figs[i].peer;
            if (p >= 0 && rate[i] >= 0 && rate[p] > 0)
                bratios[i][nbratios[i]++] = rate[i] / rate[p];
        }
    }
    for (int i = 0; i < WL_NFIGS; i++)
        finish(&w[i], ratios[i], nratios[i], bratios[i], nbratios[i]);
    redisFree(rc);
}
