/*
 * Legacy mode (design.md §5.1: SETNX + expiry timestamp, takeover by
 * compare-and-set or GETSET) against a real redis-server, through the
 * compat proxy for every old-server personality: 2.0 (GETSET only), 2.2 and
 * 2.4 (WATCH), 2.6.0 and 2.6.11 (EVAL, TIME) and 7.  Dead holders are real
 * processes, SIGKILLed or SIGSTOPped while holding; clock skew is real too
 * (the relock binary under libfaketime).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

/* ------------------------------------------------------------ servers */

enum { NPERS = 6 };
static const char *const pers_name[NPERS] = {"2.0", "2.2", "2.4", "2.6.0", "2.6.11", "7"};
/* Key prefixes: every personality shares the one real server behind. */
static const char *const pers_tag[NPERS] = {"p20", "p22", "p24", "p260", "p2611", "p7"};
enum { P20 = 0, P22, P24, P260, P2611, P7 };

static testsrv srv;
static testsrv proxy[NPERS];

static int has_watch(int pi)
{
    return pi >= P22;
}

static int has_time(int pi)
{
    return pi >= P260;
}

/* With a real server of one version (RELOCK_TEST_SERVER), only the
 * personalities that stand for it run, through a proxy that imitates
 * nothing (testsrv.h). */
static int pers_on(int pi)
{
    return testsrv_personality_runs(pers_name[pi]);
}

/* Skips the rest of a test written for personality pi alone. */
#define ONLY_ON(pi)                                                                   \
    do {                                                                              \
        if (!pers_on(pi)) {                                                           \
            testsrv_note_skip(__func__);                                              \
            return;                                                                   \
        }                                                                             \
    } while (0)

static int group_setup(void **state)
{
    (void)state;
    if (testsrv_start(&srv, NULL) != 0)
        return -1;
    for (int i = 0; i < NPERS; i++)
        if (pers_on(i) && testsrv_start_proxy(&proxy[i], srv.port, pers_name[i], NULL) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NPERS; i++)
        testsrv_stop(&proxy[i]);
    testsrv_stop(&srv);
    return 0;
}

/* ------------------------------------------------------------ children */

/* Every child we fork, so that a failing test still kills and reaps them. */
enum { MAXKIDS = 64 };
static pid_t kids[MAXKIDS];
static int nkids;

static pid_t spawn(void)
{
    assert_true(nkids < MAXKIDS);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        kids[nkids++] = pid;
    return pid;
}

static void forget(pid_t pid)
{
    for (int i = 0; i < nkids; i++)
        if (kids[i] == pid) {
            kids[i] = kids[--nkids];
            return;
        }
}

/* Waits (bounded) for a child to end; SIGKILLs it if it does not.  Returns
 * its wait status, -1 when it had to be killed. */
static int reap(pid_t pid, long timeout_ms)
{
    int status = tu_wait_child(pid, timeout_ms);
    forget(pid);
    return status;
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    forget(pid);
}

/* A configuration file a test wrote, removed even when the test fails. */
static char conf_path[64];

static int per_test_teardown(void **state)
{
    (void)state;
    if (conf_path[0]) {
        unlink(conf_path);
        conf_path[0] = '\0';
    }
    while (nkids > 0)
        kill_and_reap(kids[0]);
    /* A test that failed half-way may have left a fault switched on. */
    for (int i = 0; i < NPERS; i++)
        if (pers_on(i))
            free(testsrv_cmd(&proxy[i], "RELOCK-PROXY FAULT off"));
    return 0;
}

/* Waits up to 5 s until a SIGSTOPped child is reported stopped. */
static int wait_stopped(pid_t pid)
{
    for (int i = 0; i < 2500; i++) {
        int status;
        pid_t r = waitpid(pid, &status, WUNTRACED | WNOHANG);
        if (r == pid && WIFSTOPPED(status))
            return 0;
        if (r == pid)
            return -1; /* it ended */
        tu_sleep_ms(2);
    }
    return -1;
}

/* ------------------------------------------------------------ failing with context */

static char ctx[200];

static void setctx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void setctx(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
}

static void failf(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void failf(const char *file, int line, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    print_error("%s:%d: [%s] %s\n", file, line, ctx, buf);
    _fail(file, line); /* jumps back into cmocka's runner */
    abort();           /* never reached; tells the compiler so */
}

#define EXPECT(cond, ...)                                                                      \
    do {                                                                                       \
        if (!(cond))                                                                           \
            failf(__FILE__, __LINE__, __VA_ARGS__);                                            \
    } while (0)

/* A call on client c must return want; otherwise fail with the client's
 * error message. */
#define EXPECT_ST(c, call, want)                                                               \
    do {                                                                                       \
        relock_status got_ = (call);                                                           \
        if (got_ != (want))                                                                    \
            failf(__FILE__, __LINE__, "%s: got %s, expected %s: %s", #call,                    \
                  relock_status_name(got_), relock_status_name(want),                          \
                  relock_client_error(c)->message);                                            \
    } while (0)

/* ------------------------------------------------------------ clocks, values, keys */

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The current time in the legacy unit (ms != 0: milliseconds). */
static long long now_unit(int ms)
{
    long long t = wall_ms();
    return ms ? t : t / 1000;
}

/* The first wall-clock millisecond at which a legacy value V is expired
 * (legacy readers hold V until the clock passes it). */
static long long expiry_ms(long long v, int ms)
{
    return ms ? v + 1 : (v + 1) * 1000;
}

/* A whole decimal timestamp, or -1. */
static long long parse_ts(const char *v)
{
    if (!v || !*v || strlen(v) > 18)
        return -1;
    long long n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

static long ttl_units(long ttl_ms, int ms)
{
    return ms ? ttl_ms : (ttl_ms + 999) / 1000;
}

/* v must be the value a legacy client writes, now + ceil(ttl) + offset in
 * the unit, for a "now" between before and after (our own readings). */
static void expect_fresh_value(const char *what, const char *v, int ms, long ttl_ms, long offset,
                               long long before, long long after)
{
    long long ts = parse_ts(v);
    EXPECT(ts > 0, "%s: value \"%s\" is not a timestamp", what, v ? v : "(null)");
    EXPECT(strlen(v) == (ms ? 13u : 10u), "%s: value \"%s\" has %zu digits, expected %d", what, v,
           strlen(v), ms ? 13 : 10);
    long long lo = before + ttl_units(ttl_ms, ms) + offset;
    long long hi = after + ttl_units(ttl_ms, ms) + offset;
    EXPECT(ts >= lo && ts <= hi,
           "%s: value %lld, expected %lld..%lld (now %lld..%lld + ttl %ld + offset %ld, in %s); "
           "value - now = %lld",
           what, ts, lo, hi, before, after, ttl_units(ttl_ms, ms), offset, ms ? "ms" : "s",
           ts - before);
}

static char *srv_get(const char *key)
{
    char *v = testsrv_cmd(&srv, "GET %s", key);
    assert_non_null(v);
    return v;
}

static void expect_key(const char *key, const char *want)
{
    char *v = srv_get(key);
    int same = strcmp(v, want) == 0;
    if (!same) {
        char got[160];
        snprintf(got, sizeof got, "%s", v);
        free(v);
        failf(__FILE__, __LINE__, "key %s holds \"%s\", expected \"%s\"", key, got, want);
    }
    free(v);
}

static void srv_set(const char *key, const char *value)
{
    char *r = testsrv_cmd(&srv, "SET %s %s", key, value);
    assert_non_null(r);
    assert_string_equal(r, "OK");
    free(r);
}

static void srv_set_ts(const char *key, long long ts)
{
    char v[32];
    snprintf(v, sizeof v, "%lld", ts);
    srv_set(key, v);
}

static long long srv_int(const char *fmt, const char *key)
{
    char *r = testsrv_cmd(&srv, fmt, key);
    assert_non_null(r);
    char *end = NULL;
    long long n = strtoll(r, &end, 10);
    int ok = *r && end && !*end;
    if (!ok) {
        char got[160];
        snprintf(got, sizeof got, "%s", r);
        free(r);
        failf(__FILE__, __LINE__, "\"%s\" on %s: not an integer reply: %s", fmt, key, got);
    }
    free(r);
    return n;
}

static void srv_del(const char *key)
{
    free(testsrv_cmd(&srv, "DEL %s", key));
}

/* A proxy's RELOCK-PROXY REFUSED count. */
static long long proxy_refused(int pi)
{
    char *r = testsrv_cmd(&proxy[pi], "RELOCK-PROXY REFUSED");
    assert_non_null(r);
    long long n = atoll(r);
    free(r);
    return n;
}

static void proxy_reset(int pi)
{
    char *r = testsrv_cmd(&proxy[pi], "RELOCK-PROXY RESET");
    assert_non_null(r);
    assert_string_equal(r, "OK");
    free(r);
}

/* ------------------------------------------------------------ clients */

static void url_of(int pi, char *out, size_t len)
{
    int port = pi < 0 ? srv.port : proxy[pi].port;
    snprintf(out, len, "redis://127.0.0.1:%d", port);
}

/*
 * Connects in legacy mode through personality pi's proxy (pi < 0: the real
 * server), with extra settings kv (name, value pairs, NULL-terminated, or
 * NULL).  *out is set as relock_connect sets it.  Safe in forked children
 * (no cmocka calls).
 */
static relock_status legacy_connect(int pi, const char *const *kv, relock_client **out)
{
    *out = NULL;
    relock_config *cfg = relock_config_new();
    if (!cfg)
        return RELOCK_ENOMEM;
    char url[64];
    url_of(pi, url, sizeof url);
    relock_status st = relock_config_set_url(cfg, url);
    if (st == RELOCK_OK)
        st = relock_config_set(cfg, "mode", "legacy");
    for (int i = 0; st == RELOCK_OK && kv && kv[i] && kv[i + 1]; i += 2) {
        st = relock_config_set(cfg, kv[i], kv[i + 1]);
        if (st != RELOCK_OK)
            fprintf(stderr, "config %s = %s: %s\n", kv[i], kv[i + 1],
                    relock_config_error(cfg)->message);
    }
    if (st == RELOCK_OK)
        st = relock_connect(cfg, out);
    relock_config_free(cfg);
    return st;
}

static relock_client *legacy_client(int pi, const char *const *kv)
{
    relock_client *c = NULL;
    relock_status st = legacy_connect(pi, kv, &c);
    if (st != RELOCK_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", c ? relock_client_error(c)->message : "");
        relock_client_free(c);
        failf(__FILE__, __LINE__, "connect (legacy, personality %s): %s: %s",
              pi < 0 ? "real" : pers_name[pi], relock_status_name(st), msg);
    }
    EXPECT(relock_client_mode(c) == RELOCK_MODE_LEGACY, "mode is %s, expected legacy",
           relock_mode_name(relock_client_mode(c)));
    return c;
}

/* A client in a forked child: NULL on failure (reported on stderr). */
static relock_client *child_client(int pi, const char *const *kv)
{
    relock_client *c = NULL;
    relock_status st = legacy_connect(pi, kv, &c);
    if (st != RELOCK_OK) {
        fprintf(stderr, "child connect: %s: %s\n", relock_status_name(st),
                c ? relock_client_error(c)->message : "");
        relock_client_free(c);
        return NULL;
    }
    return c;
}

/* Waits up to timeout_ms for one command byte on fd; 0 on timeout/EOF. */
static char child_next_cmd(int fd, long timeout_ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = tu_now_ms();
        if (now >= end)
            return 0;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(end - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        char cmd;
        ssize_t n = read(fd, &cmd, 1);
        if (n == 1)
            return cmd;
        if (n < 0 && errno == EINTR)
            continue;
        return 0;
    }
}

static void send_cmd(tu_chan *go, char cmd)
{
    ssize_t n = write(go->wr, &cmd, 1);
    assert_int_equal(n, 1);
}

/*
 * The body of a holder process: acquires key (wait 0, ttl_ms) in legacy
 * mode with the given unit, reports "OK <value>" (or "ERR <status> <why>"),
 * then obeys one-byte commands from go: 'r' release, 'e' extend (original
 * ttl), 'q' quit, each answered with the status name.  Without go it just
 * waits (at most 60 s) to be killed.  Never returns.
 */
static void holder_main(int pi, const char *unit, const char *key, long ttl_ms, tu_chan *rep,
                        tu_chan *go)
{
    const char *kv[] = {"legacy.clock_unit", unit, NULL};
    relock_client *c = child_client(pi, kv);
    char line[600];
    if (!c) {
        tu_chan_send(rep, "ERR connect");
        _exit(2);
    }
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, key, ttl_ms, 0, &l);
    if (st != RELOCK_OK) {
        snprintf(line, sizeof line, "ERR %s %s", relock_status_name(st),
                 relock_client_error(c)->message);
        tu_chan_send(rep, line);
        _exit(3);
    }
    snprintf(line, sizeof line, "OK %s", relock_lock_value(l));
    tu_chan_send(rep, line);
    if (!go) {
        for (int i = 0; i < 6000; i++)
            tu_sleep_ms(10);
        _exit(0);
    }
    for (;;) {
        char cmd = child_next_cmd(go->rd, 60000);
        if (cmd == 'r')
            st = relock_release(l);
        else if (cmd == 'e')
            st = relock_extend(l, 0);
        else
            _exit(cmd == 'q' ? 0 : 4);
        snprintf(line, sizeof line, "%s %s", relock_status_name(st),
                 st == RELOCK_OK ? relock_lock_value(l) : relock_client_error(c)->message);
        tu_chan_send(rep, line);
    }
}

/* Forks a holder and waits for its value; returns the pid. */
static pid_t start_holder(int pi, const char *unit, const char *key, long ttl_ms, tu_chan *rep,
                          tu_chan *go, char *value, size_t vlen)
{
    pid_t pid = spawn();
    if (pid == 0)
        holder_main(pi, unit, key, ttl_ms, rep, go);
    char line[600];
    EXPECT(tu_chan_recv(rep, line, sizeof line, 10000) == 0, "holder did not report");
    EXPECT(strncmp(line, "OK ", 3) == 0, "holder could not acquire %s: %s", key, line);
    snprintf(value, vlen, "%.100s", line + 3);
    return pid;
}

/* ================================================================ 1. basics */

/*
 * Acquire, busy, extend (a new timestamp), release, on every personality,
 * in both clock units, with the default and a non-default expiry_offset
 * visible in the stored value.  Not one command is refused by the proxy:
 * the client never sends what the server lacks.
 */
static void test_basic_cycle(void **state)
{
    (void)state;
    static const struct {
        const char *unit;
        const char *offset;
    } combos[] = {{"s", "1"}, {"s", "3"}, {"ms", "1"}, {"ms", "250"}};
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (size_t k = 0; k < sizeof combos / sizeof combos[0]; k++) {
            const char *unit = combos[k].unit;
            int ms = strcmp(unit, "ms") == 0;
            long off = atol(combos[k].offset);
            setctx("personality %s, unit %s, expiry_offset %ld", pers_name[pi], unit, off);
            char key[64];
            snprintf(key, sizeof key, "%s-basic-%s-o%ld", pers_tag[pi], unit, off);

            proxy_reset(pi);
            const char *kva[] = {"legacy.clock_unit", unit, "legacy.expiry_offset",
                                 combos[k].offset, NULL};
            const char *kvb[] = {"legacy.clock_unit", unit, NULL};
            relock_client *a = legacy_client(pi, kva), *b = legacy_client(pi, kvb);
            relock_lock *l = NULL, *lb = NULL;

            long long before = now_unit(ms);
            EXPECT_ST(a, relock_acquire(a, key, 5000, 0, &l), RELOCK_OK);
            long long after = now_unit(ms);
            char v1[64];
            snprintf(v1, sizeof v1, "%s", relock_lock_value(l));
            expect_fresh_value("acquire", v1, ms, 5000, off, before, after);
            expect_key(key, v1);
            /* Plain legacy writes no TTL (gc_expire is off). */
            EXPECT(srv_int("TTL %s", key) == -1, "key %s has a TTL after a legacy acquire", key);
            EXPECT(relock_lock_validity_ms(l) > 0 && relock_lock_validity_ms(l) <= 5000,
                   "validity %lld ms out of (0, 5000]", relock_lock_validity_ms(l));

            /* Held: another client is refused at once. */
            EXPECT_ST(b, relock_acquire(b, key, 5000, 0, &lb), RELOCK_BUSY);
            EXPECT(lb == NULL, "a refused acquire returned a handle");

            /* Extend writes a new timestamp: now + 9 s + offset. */
            before = now_unit(ms);
            EXPECT_ST(a, relock_extend(l, 9000), RELOCK_OK);
            after = now_unit(ms);
            char v2[64];
            snprintf(v2, sizeof v2, "%s", relock_lock_value(l));
            expect_fresh_value("extend", v2, ms, 9000, off, before, after);
            EXPECT(strcmp(v1, v2) != 0, "extend to 9 s kept the value %s", v1);
            expect_key(key, v2);
            EXPECT_ST(b, relock_acquire(b, key, 5000, 0, &lb), RELOCK_BUSY);

            /* Release deletes; a second release is not a second success. */
            EXPECT_ST(a, relock_release(l), RELOCK_OK);
            expect_key(key, "(nil)");
            EXPECT_ST(a, relock_release(l), RELOCK_LOST);
            relock_lock_free(l);

            /* Free again: the other client gets it and releases it. */
            EXPECT_ST(b, relock_acquire(b, key, 5000, 0, &lb), RELOCK_OK);
            EXPECT_ST(b, relock_release(lb), RELOCK_OK);
            relock_lock_free(lb);
            expect_key(key, "(nil)");

            long long refused = proxy_refused(pi);
            if (refused != 0) {
                char *list = testsrv_cmd(&proxy[pi], "RELOCK-PROXY REFUSED-LIST");
                char copy[256];
                snprintf(copy, sizeof copy, "%s", list ? list : "?");
                free(list);
                failf(__FILE__, __LINE__, "the proxy refused %lld commands: %s", refused, copy);
            }
            relock_client_free(a);
            relock_client_free(b);
        }
    }
}

/* Every acquisition carries a fencing token, larger than the last (design.md §6.3). */
static void test_fence_increases(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        setctx("personality %s", pers_name[pi]);
        char key[64];
        snprintf(key, sizeof key, "%s-fence", pers_tag[pi]);
        relock_client *c = legacy_client(pi, NULL);
        relock_lock *l = NULL;
        EXPECT_ST(c, relock_acquire(c, key, 5000, 0, &l), RELOCK_OK);
        long long f1 = relock_lock_fence(l);
        EXPECT_ST(c, relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        EXPECT_ST(c, relock_acquire(c, key, 5000, 0, &l), RELOCK_OK);
        long long f2 = relock_lock_fence(l);
        EXPECT_ST(c, relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        EXPECT(f1 > 0 && f2 > f1, "fences %lld then %lld: expected 0 < first < second", f1, f2);
        relock_client_free(c);
    }
}

/* ================================================================ 2. dead holders */

/*
 * (a) A SIGKILLed holder: a waiter takes over only once the clock has
 * passed the dead holder's timestamp, and soon after.
 */
static void killed_holder_case(int pi, const char *unit, long ttl_ms)
{
    int ms = strcmp(unit, "ms") == 0;
    setctx("personality %s, unit %s, ttl %ld ms", pers_name[pi], unit, ttl_ms);
    char key[64];
    snprintf(key, sizeof key, "%s-killed-%s", pers_tag[pi], unit);
    tu_chan rep;
    assert_int_equal(tu_chan_open(&rep), 0);
    char value[128];
    pid_t pid = start_holder(pi, unit, key, ttl_ms, &rep, NULL, value, sizeof value);
    kill_and_reap(pid);
    tu_chan_close(&rep);
    long long v = parse_ts(value);
    EXPECT(v > 0, "the holder's value \"%s\" is not a timestamp", value);
    expect_key(key, value);

    const char *kv[] = {"legacy.clock_unit", unit, NULL};
    relock_client *w = legacy_client(pi, kv);
    relock_lock *l = NULL;
    EXPECT_ST(w, relock_acquire(w, key, 5000, 10000, &l), RELOCK_OK);
    long long got = wall_ms();
    long long end = expiry_ms(v, ms);
    EXPECT(got >= end, "took over at %lld, before the dead holder's value %s expired (%lld)", got,
           value, end);
    EXPECT(got <= end + 1500, "took over at %lld, %lld ms after the dead holder's expiry %lld",
           got, got - end, end);
    EXPECT(strcmp(relock_lock_value(l), value) != 0, "the new value equals the dead holder's");
    EXPECT(parse_ts(relock_lock_value(l)) > v, "new value %s not later than the dead one %s",
           relock_lock_value(l), value);
    expect_key(key, relock_lock_value(l));
    EXPECT_ST(w, relock_release(l), RELOCK_OK);
    expect_key(key, "(nil)");
    relock_lock_free(l);
    relock_client_free(w);
}

static void test_killed_holder(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++)
        if (pers_on(pi))
            killed_holder_case(pi, "ms", 1000);
    /* Whole seconds: the GETSET path and the script path. */
    if (pers_on(P20))
        killed_holder_case(P20, "s", 1000);
    if (pers_on(P7))
        killed_holder_case(P7, "s", 1000);
}

/* (b) A stale key (expired timestamp, no TTL) is taken over at once. */
static void test_stale_key_taken_at_once(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (int ms = 0; ms <= 1; ms++) {
            const char *unit = ms ? "ms" : "s";
            setctx("personality %s, unit %s", pers_name[pi], unit);
            char key[64];
            snprintf(key, sizeof key, "%s-stale-%s", pers_tag[pi], unit);
            long long stale = now_unit(ms) - (ms ? 5000 : 5);
            srv_set_ts(key, stale);
            const char *kv[] = {"legacy.clock_unit", unit, NULL};
            relock_client *c = legacy_client(pi, kv);
            relock_lock *l = NULL;
            uint64_t t0 = tu_now_ms();
            long long before = now_unit(ms);
            EXPECT_ST(c, relock_acquire(c, key, 4000, 0, &l), RELOCK_OK);
            long long after = now_unit(ms);
            EXPECT(tu_now_ms() - t0 < 2000, "taking over a stale key took %llu ms",
                   (unsigned long long)(tu_now_ms() - t0));
            expect_fresh_value("takeover", relock_lock_value(l), ms, 4000, 1, before, after);
            expect_key(key, relock_lock_value(l));
            EXPECT(srv_int("TTL %s", key) == -1, "key %s has a TTL after a takeover", key);
            EXPECT_ST(c, relock_release(l), RELOCK_OK);
            expect_key(key, "(nil)");
            relock_lock_free(l);
            relock_client_free(c);
        }
    }
}

/*
 * (c) Eight processes race for the same stale key, once per round, 100
 * rounds per personality: exactly one wins each round, the others are told
 * BUSY.
 */
enum { RACERS = 8, ROUNDS = 100 };

static void racer_main(int pi, const char *key, tu_chan *go, tu_chan *rep)
{
    const char *kv[] = {"legacy.clock_unit", "ms", NULL};
    relock_client *c = child_client(pi, kv);
    if (!c) {
        tu_chan_send(rep, "E connect");
        _exit(2);
    }
    tu_chan_send(rep, "R");
    char line[600];
    for (;;) {
        char cmd = child_next_cmd(go->rd, 60000);
        if (cmd != 'g') {
            relock_client_free(c);
            _exit(cmd == 'q' ? 0 : 3);
        }
        relock_lock *l = NULL;
        relock_status st = relock_try_acquire(c, key, 10000, &l);
        if (st == RELOCK_OK) {
            snprintf(line, sizeof line, "W %s", relock_lock_value(l));
            relock_lock_free(l); /* the parent overwrites the key next round */
        } else if (st == RELOCK_BUSY) {
            snprintf(line, sizeof line, "L");
        } else {
            snprintf(line, sizeof line, "E %s %s", relock_status_name(st),
                     relock_client_error(c)->message);
        }
        tu_chan_send(rep, line);
    }
}

static void test_takeover_race(void **state)
{
    (void)state;
    redisContext *rc = redisConnect("127.0.0.1", srv.port);
    assert_non_null(rc);
    assert_int_equal(rc->err, 0);
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        setctx("personality %s", pers_name[pi]);
        char key[64];
        snprintf(key, sizeof key, "%s-race", pers_tag[pi]);
        tu_chan go[RACERS], rep[RACERS];
        pid_t pid[RACERS];
        for (int k = 0; k < RACERS; k++) {
            assert_int_equal(tu_chan_open(&go[k]), 0);
            assert_int_equal(tu_chan_open(&rep[k]), 0);
            pid[k] = spawn();
            if (pid[k] == 0)
                racer_main(pi, key, &go[k], &rep[k]);
        }
        char line[600];
        for (int k = 0; k < RACERS; k++) {
            EXPECT(tu_chan_recv(&rep[k], line, sizeof line, 10000) == 0, "racer %d not ready", k);
            EXPECT(strcmp(line, "R") == 0, "racer %d: %s", k, line);
        }
        uint64_t t0 = tu_now_ms();
        int loser_wrote = 0; /* rounds in which a loser's GETSET landed last */
        for (int round = 0; round < ROUNDS; round++) {
            if (round == ROUNDS / 2) {
                /* The second half with every reply 3 ms late, so that the
                 * racers' commands interleave: all read the stale value,
                 * all try to take it over. */
                char *r0 = testsrv_cmd(&proxy[pi], "RELOCK-PROXY FAULT delay-ms 3");
                assert_non_null(r0);
                assert_string_equal(r0, "OK");
                free(r0);
            }
            long long stale = wall_ms() - 10000;
            redisReply *r = redisCommand(rc, "SET %s %lld", key, stale);
            assert_non_null(r);
            freeReplyObject(r);
            long long before = wall_ms();
            for (int k = 0; k < RACERS; k++)
                send_cmd(&go[k], 'g');
            int winners = 0;
            char won[128] = "";
            for (int k = 0; k < RACERS; k++) {
                EXPECT(tu_chan_recv(&rep[k], line, sizeof line, 10000) == 0,
                       "round %d: racer %d did not answer", round, k);
                if (line[0] == 'W') {
                    winners++;
                    snprintf(won, sizeof won, "%.100s", line + 2);
                } else {
                    EXPECT(strcmp(line, "L") == 0, "round %d: racer %d: %s", round, k, line);
                }
            }
            EXPECT(winners == 1, "round %d: %d winners", round, winners);
            /* The key now holds a fresh timestamp; with compare-and-set
             * (WATCH or EVAL) no loser wrote, so it is the winner's. */
            r = redisCommand(rc, "GET %s", key);
            assert_non_null(r);
            char now_held[128] = "";
            if (r->type == REDIS_REPLY_STRING)
                snprintf(now_held, sizeof now_held, "%s", r->str);
            freeReplyObject(r);
            EXPECT(parse_ts(now_held) >= before + 10000,
                   "round %d: key holds \"%s\", not a fresh timestamp", round, now_held);
            if (has_watch(pi))
                EXPECT(strcmp(now_held, won) == 0,
                       "round %d: key holds %s, the winner wrote %s (a loser overwrote it)",
                       round, now_held, won);
            else if (strcmp(now_held, won) != 0)
                loser_wrote++;
        }
        uint64_t took = tu_now_ms() - t0;
        free(testsrv_cmd(&proxy[pi], "RELOCK-PROXY FAULT off"));
        for (int k = 0; k < RACERS; k++)
            send_cmd(&go[k], 'q');
        for (int k = 0; k < RACERS; k++) {
            int status = reap(pid[k], 10000);
            EXPECT(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                   "racer %d ended badly (status %d)", k, status);
            tu_chan_close(&go[k]);
            tu_chan_close(&rep[k]);
        }
        print_message("takeover race, personality %s: %d rounds in %llu ms%s", pers_name[pi],
                      ROUNDS, (unsigned long long)took, has_watch(pi) ? "\n" : "");
        if (!has_watch(pi)) {
            print_message(", a loser's GETSET landed last in %d\n", loser_wrote);
            /* The racers really overlapped (else this proves little). */
            EXPECT(loser_wrote > 0, "no round saw a loser's GETSET: the racers never overlapped");
        }
    }
    redisFree(rc);
}

/*
 * (d) A holder SIGSTOPped past its expiry is taken over; woken, its release
 * and extend report LOST and leave the new holder's key alone.
 */
static void stopped_holder_case(int pi, char op)
{
    setctx("personality %s, old holder's %s", pers_name[pi], op == 'r' ? "release" : "extend");
    char key[64];
    snprintf(key, sizeof key, "%s-stopped-%c", pers_tag[pi], op);
    tu_chan rep, go;
    assert_int_equal(tu_chan_open(&rep), 0);
    assert_int_equal(tu_chan_open(&go), 0);
    char value[128];
    pid_t pid = start_holder(pi, "ms", key, 600, &rep, &go, value, sizeof value);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    EXPECT(wait_stopped(pid) == 0, "the holder did not stop");

    const char *kv[] = {"legacy.clock_unit", "ms", NULL};
    relock_client *w = legacy_client(pi, kv);
    relock_lock *l = NULL;
    EXPECT_ST(w, relock_acquire(w, key, 10000, 10000, &l), RELOCK_OK);
    EXPECT(wall_ms() >= expiry_ms(parse_ts(value), 1), "taken over before %s expired", value);
    char newv[128];
    snprintf(newv, sizeof newv, "%s", relock_lock_value(l));

    send_cmd(&go, op);
    assert_int_equal(kill(pid, SIGCONT), 0);
    char line[600];
    EXPECT(tu_chan_recv(&rep, line, sizeof line, 10000) == 0, "the woken holder did not answer");
    EXPECT(strncmp(line, "RELOCK_LOST", 11) == 0, "the woken holder's %s returned %s",
           op == 'r' ? "release" : "extend", line);
    expect_key(key, newv);
    send_cmd(&go, 'q');
    int status = reap(pid, 10000);
    EXPECT(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "holder ended badly (status %d)", status);
    tu_chan_close(&rep);
    tu_chan_close(&go);

    EXPECT_ST(w, relock_release(l), RELOCK_OK);
    expect_key(key, "(nil)");
    relock_lock_free(l);
    relock_client_free(w);
}

static void test_stopped_holder(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        stopped_holder_case(pi, 'r');
        stopped_holder_case(pi, 'e');
    }
}

/*
 * On 2.0 (no WATCH, no EVAL) release is GET + DEL, and the DEL is sent only
 * while our own validity remains: past it, a new holder could take the key
 * between the two commands.  So an expired holder, even one whose value is
 * still in the key, gets LOST and deletes nothing.
 */
/*
 * (h) 2.0: between our GET of an expired value and our GETSET, another
 * client writes a live timestamp of the other unit (a seconds value where
 * ms is configured, which reads as 1970).  GETSET returns it; that is no
 * proof of expiry, so the takeover is not won, though our write stands.
 */
static void test_20_getset_other_unit(void **state)
{
    (void)state;
    ONLY_ON(P20);
    setctx("personality 2.0, GETSET returns a value of the other unit");
    const char *key = "p20-getset-unit";
    srv_set_ts(key, wall_ms() - 5000);
    const char *kv[] = {"legacy.clock_unit", "ms", NULL};
    relock_client *c = legacy_client(P20, kv);
    /* try_acquire: MULTI, SETNX, INCR, GET breaks, EXEC, then GET key (6th
     * reply, held here), then the GETSET takeover. */
    char *r = testsrv_cmd(&proxy[P20], "RELOCK-PROXY FAULT at-reply 6 at-kind hold at-hold-ms 500");
    EXPECT(r && strcmp(r, "OK") == 0, "arming the fault: %s", r ? r : "no reply");
    free(r);
    char live_s[32];
    snprintf(live_s, sizeof live_s, "%lld", wall_ms() / 1000 + 100);
    pid_t pid = spawn();
    if (pid == 0) {
        for (int i = 0; i < 2500; i++) {
            char *n = testsrv_cmd(&proxy[P20], "RELOCK-PROXY REPLIES");
            long long got = n ? atoll(n) : -1;
            free(n);
            if (got >= 6) {
                char *w = testsrv_cmd(&srv, "SET %s %s", key, live_s);
                _exit(w && strcmp(w, "OK") == 0 ? 0 : 1);
            }
            tu_sleep_ms(2);
        }
        _exit(2);
    }
    relock_lock *l = NULL;
    relock_status st = relock_try_acquire(c, key, 5000, &l);
    int status = reap(pid, 10000);
    free(testsrv_cmd(&proxy[P20], "RELOCK-PROXY FAULT off"));
    EXPECT(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the writer did not write in the window (status %d)", status);
    EXPECT(st == RELOCK_BUSY, "try_acquire over a live value of the other unit: %s",
           relock_status_name(st));
    /* The GETSET ran (our value stands): the case was the one meant. */
    char *v = srv_get(key);
    EXPECT(v && strcmp(v, live_s) != 0 && strlen(v) == 13, "the key holds %s", v ? v : "nil");
    free(v);
    relock_lock_free(l);
    relock_client_free(c);
    srv_del(key);
}

static void test_20_release_needs_validity(void **state)
{
    (void)state;
    ONLY_ON(P20);
    setctx("personality 2.0, release after our validity");
    const char *kv[] = {"legacy.clock_unit", "ms", NULL};
    relock_client *c = legacy_client(P20, kv);
    relock_lock *l = NULL;
    EXPECT_ST(c, relock_acquire(c, "p20-late-release", 300, 0, &l), RELOCK_OK);
    char value[64];
    snprintf(value, sizeof value, "%s", relock_lock_value(l));
    /* Sleep to the end of the validity, then poll for it (bounded). */
    tu_sleep_ms(relock_lock_validity_ms(l));
    for (int i = 0; i < 500 && relock_lock_validity_ms(l) > 0; i++)
        tu_sleep_ms(2);
    EXPECT(relock_lock_validity_ms(l) == 0, "validity still %lld ms", relock_lock_validity_ms(l));
    EXPECT_ST(c, relock_release(l), RELOCK_LOST);
    expect_key("p20-late-release", value);
    relock_lock_free(l);
    relock_client_free(c);
    srv_del("p20-late-release");
}

/* A refused acquire: EFOREIGN, a message naming the key, the key intact. */
static void expect_foreign(relock_client *c, const char *key, long wait_ms, const char *value)
{
    relock_lock *l = NULL;
    EXPECT_ST(c, relock_acquire(c, key, 5000, wait_ms, &l), RELOCK_EFOREIGN);
    EXPECT(l == NULL, "a refused acquire returned a handle");
    const char *msg = relock_client_error(c)->message;
    EXPECT(strstr(msg, key) != NULL, "the message does not name the key %s: \"%s\"", key, msg);
    expect_key(key, value);
}

/* (e) A value that is not a timestamp is never taken over. */
static void test_foreign_value_refused(void **state)
{
    (void)state;
    static const char *const values[] = {"hello", "0123456789abcdef0123456789abcdef"};
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (int ms = 0; ms <= 1; ms++) {
            const char *unit = ms ? "ms" : "s";
            const char *kv[] = {"legacy.clock_unit", unit, NULL};
            relock_client *c = legacy_client(pi, kv);
            for (int k = 0; k < 2; k++) {
                setctx("personality %s, unit %s, value %s", pers_name[pi], unit, values[k]);
                char key[64];
                snprintf(key, sizeof key, "%s-foreign-%s-%d", pers_tag[pi], unit, k);
                srv_set(key, values[k]);
                expect_foreign(c, key, 0, values[k]);
                /* Waiting does not change the verdict. */
                expect_foreign(c, key, 300, values[k]);
                EXPECT(srv_int("TTL %s", key) == -1, "a TTL was put on foreign key %s", key);
            }
            relock_client_free(c);
        }
    }
}

/*
 * (f) A GETSET loser's write while we hold the lock: a legacy client that
 * lost the takeover race still wrote its own (slightly different) fresh
 * timestamp.  Where the fence proves nobody acquired since (WATCH or EVAL),
 * our extend and release act on it and succeed.  On 2.0 nothing can tell
 * it from a new holder's value: both report the lock lost and leave the
 * key alone (it ends with the loser's timestamp).
 */
static void test_getset_loser_write(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (int ms = 0; ms <= 1; ms++) {
            const char *unit = ms ? "ms" : "s";
            setctx("personality %s, unit %s", pers_name[pi], unit);
            char key[64];
            snprintf(key, sizeof key, "%s-loser-%s", pers_tag[pi], unit);
            srv_set_ts(key, now_unit(ms) - (ms ? 3000 : 3));
            const char *kv[] = {"legacy.clock_unit", unit, NULL};
            relock_client *c = legacy_client(pi, kv);
            relock_lock *l = NULL;
            EXPECT_ST(c, relock_acquire(c, key, 5000, 0, &l), RELOCK_OK);
            long long v = parse_ts(relock_lock_value(l));
            EXPECT(v > 0, "value %s", relock_lock_value(l));

            /* The loser's GETSET: it read our value back. */
            long long loser = v + (ms ? 7 : 1);
            char *old = testsrv_cmd(&srv, "GETSET %s %lld", key, loser);
            assert_non_null(old);
            EXPECT(strcmp(old, relock_lock_value(l)) == 0, "GETSET returned %s, we hold %s", old,
                   relock_lock_value(l));
            free(old);

            if (!has_watch(pi)) {
                char want[32];
                snprintf(want, sizeof want, "%lld", loser);
                EXPECT_ST(c, relock_extend(l, 0), RELOCK_LOST);
                expect_key(key, want);
                EXPECT_ST(c, relock_release(l), RELOCK_LOST);
                expect_key(key, want);
                srv_del(key);
                relock_lock_free(l);
                relock_client_free(c);
                continue;
            }
            long long before = now_unit(ms);
            EXPECT_ST(c, relock_extend(l, 0), RELOCK_OK);
            long long after = now_unit(ms);
            expect_fresh_value("extend after a loser's write", relock_lock_value(l), ms, 5000, 1,
                               before, after);
            expect_key(key, relock_lock_value(l));

            /* Another loser's write, then release. */
            loser = parse_ts(relock_lock_value(l)) + (ms ? 5 : 1);
            old = testsrv_cmd(&srv, "GETSET %s %lld", key, loser);
            assert_non_null(old);
            EXPECT(strcmp(old, relock_lock_value(l)) == 0, "GETSET returned %s, we hold %s", old,
                   relock_lock_value(l));
            free(old);
            EXPECT_ST(c, relock_release(l), RELOCK_OK);
            expect_key(key, "(nil)");
            relock_lock_free(l);
            relock_client_free(c);
        }
    }
}

/*
 * (f, continued) The holder dies after a loser's write: the loser's
 * timestamp is honoured, and a waiter gets the lock no later than one
 * timeout (plus slack) after that write.
 */
static void test_getset_loser_then_holder_dies(void **state)
{
    (void)state;
    enum { TTL = 1000 };
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        setctx("personality %s", pers_name[pi]);
        char key[64];
        snprintf(key, sizeof key, "%s-loser-dies", pers_tag[pi]);
        srv_set_ts(key, wall_ms() - 3000);
        tu_chan rep;
        assert_int_equal(tu_chan_open(&rep), 0);
        char value[128];
        pid_t pid = start_holder(pi, "ms", key, TTL, &rep, NULL, value, sizeof value);
        long long t_write = wall_ms();
        long long loser = t_write + TTL + 1; /* the loser's own now + timeout + 1 */
        char *old = testsrv_cmd(&srv, "GETSET %s %lld", key, loser);
        assert_non_null(old);
        EXPECT(strcmp(old, value) == 0, "GETSET returned %s, the holder wrote %s", old, value);
        free(old);
        kill_and_reap(pid);
        tu_chan_close(&rep);

        const char *kv[] = {"legacy.clock_unit", "ms", NULL};
        relock_client *w = legacy_client(pi, kv);
        relock_lock *l = NULL;
        EXPECT_ST(w, relock_acquire(w, key, 5000, 10000, &l), RELOCK_OK);
        long long got = wall_ms();
        EXPECT(got >= loser + 1, "took over at %lld, before the loser's value %lld expired", got,
               loser);
        EXPECT(got <= t_write + TTL + 1500, "took over at %lld, %lld ms after the loser's write",
               got, got - t_write);
        expect_key(key, relock_lock_value(l));
        EXPECT_ST(w, relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(w);
    }
}

/*
 * (f, against) A TTL-less timestamp found after the key was deleted is not
 * a loser's write.  The holder's lock is broken (`relock break`), then the
 * free key is taken by a classic client's SETNX, or by another relock
 * client: the holder's extend and release report the lock lost and leave
 * the new holder's value alone, on every server version, also through a
 * handle adopted from the holder's value and fence in another client (on
 * 2.0 it knows no counter of breaks: the fence's epoch tells it).
 */
static void test_new_holder_after_break(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (int classic = 0; classic <= 1; classic++) {
            setctx("personality %s, new holder %s", pers_name[pi], classic ? "classic" : "relock");
            char key[64];
            snprintf(key, sizeof key, "%s-newholder-%d", pers_tag[pi], classic);
            const char *kv[] = {"legacy.clock_unit", "s", NULL};
            relock_client *a = legacy_client(pi, kv);
            relock_client *b = legacy_client(pi, kv);
            relock_lock *la = NULL, *lb = NULL;
            EXPECT_ST(a, relock_acquire(a, key, 5000, 0, &la), RELOCK_OK);
            EXPECT_ST(b, relock_break(b, key, NULL), RELOCK_OK);
            char want[128];
            if (classic) {
                /* A classic client: SETNX of its own expiry, no fence. */
                snprintf(want, sizeof want, "%lld", now_unit(0) + 4);
                char *r = testsrv_cmd(&srv, "SETNX %s %s", key, want);
                EXPECT(r && strcmp(r, "1") == 0, "the classic SETNX answered %s", r ? r : "nothing");
                free(r);
            } else {
                EXPECT_ST(b, relock_acquire(b, key, 5000, 0, &lb), RELOCK_OK);
                snprintf(want, sizeof want, "%s", relock_lock_value(lb));
            }
            /* The broken holder's value and fence in another process (the
             * command line's release and extend): the same. */
            relock_client *d = legacy_client(pi, kv);
            relock_lock *ld = NULL;
            EXPECT_ST(d,
                      relock_lock_adopt(d, key, relock_lock_value(la), relock_lock_fence(la),
                                        5000, &ld),
                      RELOCK_OK);
            EXPECT_ST(d, relock_release(ld), RELOCK_LOST);
            expect_key(key, want);
            EXPECT_ST(d, relock_extend(ld, 5000), RELOCK_LOST);
            expect_key(key, want);
            relock_lock_free(ld);
            relock_client_free(d);
            EXPECT_ST(a, relock_extend(la, 5000), RELOCK_LOST);
            expect_key(key, want);
            EXPECT_ST(a, relock_release(la), RELOCK_LOST);
            expect_key(key, want);
            if (lb) {
                EXPECT_ST(b, relock_release(lb), RELOCK_OK);
                expect_key(key, "(nil)");
            }
            srv_del(key);
            relock_lock_free(la);
            relock_lock_free(lb);
            relock_client_free(a);
            relock_client_free(b);
        }
    }
}

/*
 * (g) A timestamp in the other unit is refused, never taken over: a
 * 13-digit value where "s" is configured (a seconds reader would wait until
 * the year 50000), a 10-digit one where "ms" is (a milliseconds reader sees
 * 1970 and would take over a live lock).
 */
static void test_other_unit_refused(void **state)
{
    (void)state;
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (int ms = 0; ms <= 1; ms++) {
            const char *unit = ms ? "ms" : "s";
            setctx("personality %s, configured unit %s", pers_name[pi], unit);
            char key[64], value[32];
            snprintf(key, sizeof key, "%s-otherunit-%s", pers_tag[pi], unit);
            if (ms)
                snprintf(value, sizeof value, "%lld", now_unit(0) + 30); /* live, in s */
            else
                snprintf(value, sizeof value, "%lld", now_unit(1) - 60000); /* stale, in ms */
            srv_set(key, value);
            const char *kv[] = {"legacy.clock_unit", unit, NULL};
            relock_client *c = legacy_client(pi, kv);
            expect_foreign(c, key, 0, value);
            const char *msg = relock_client_error(c)->message;
            EXPECT(strstr(msg, "unit") || strstr(msg, "digit"),
                   "the message does not say what is wrong with the value: \"%s\"", msg);
            expect_foreign(c, key, 300, value);
            relock_client_free(c);
        }
    }
}

/* ================================================================ 3. clock skew */

static const char *faketime_lib(void)
{
    static const char *const paths[] = {
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], R_OK) == 0)
            return paths[i];
    fail_msg("libfaketime not found (apt-get install libfaketime)");
    return NULL;
}

/*
 * Runs argv (argv[0] the program) with stdout and stderr into out; fake:
 * under libfaketime 60 s ahead (monotonic clock untouched).  Returns the
 * exit code, -1 when it did not exit normally within 30 s.
 */
static int run_prog(const char *const *argv, int fake, char *out, size_t outlen)
{
    const char *lib = fake ? faketime_lib() : NULL;
    char path[] = "/tmp/relock-legacy-out-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    pid_t pid = spawn();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        if (fake) {
            setenv("LD_PRELOAD", lib, 1);
            setenv("FAKETIME", "+60s", 1);
            setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
            /* Under AddressSanitizer, a preloaded library comes before the
             * runtime; that is harmless here. */
            const char *asan = getenv("ASAN_OPTIONS");
            char opts[512];
            snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", asan ? asan : "",
                     asan && *asan ? ":" : "");
            setenv("ASAN_OPTIONS", opts, 1);
        }
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = reap(pid, 30000);
    ssize_t n = pread(fd, out, outlen - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    if (status == -1 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static const char *relock_bin(void)
{
    const char *bin = getenv("RELOCK_BIN");
    if (!bin || !*bin)
        fail_msg("RELOCK_BIN is not set (run through ctest)");
    return bin;
}

/* Writes a configuration file with legacy.clock = clock; returns its path
 * in path (caller unlinks). */
static void write_clock_conf(char *path, size_t len, const char *clock)
{
    snprintf(path, len, "/tmp/relock-legacy-conf-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char text[256];
    int n = snprintf(text, sizeof text,
                     "relock = {\n  mode = \"legacy\";\n  legacy = { clock = \"%s\"; };\n};\n",
                     clock);
    assert_int_equal(write(fd, text, (size_t)n), n);
    close(fd);
}

/*
 * Process A (true clock) holds the lock for 10 s; process B, whose clock is
 * 60 s ahead, tries once.  With clock = "local", B reads A's timestamp as
 * long expired and takes the lock: the classic algorithm's weakness.  With
 * clock = "server", both use the server's TIME and B is refused.
 */
static void skew_case_as(int pi, const char *clock, const char *b_mode)
{
    const char *bin = relock_bin();
    setctx("%s, legacy.clock = %s, B in %s mode", pi < 0 ? "real server" : pers_name[pi], clock,
           b_mode);
    char conf[64], url[64], name[64], out[2048];
    write_clock_conf(conf, sizeof conf, clock);
    snprintf(conf_path, sizeof conf_path, "%s", conf);
    url_of(pi, url, sizeof url);
    snprintf(name, sizeof name, "%s-skew-%s-%s", pi < 0 ? "real" : pers_tag[pi], clock, b_mode);

    const char *a_argv[] = {bin, "-c", conf, "-u", url, "-m", "legacy", "acquire",
                            "-t", "10s", "-n", name, NULL};
    int code = run_prog(a_argv, 0, out, sizeof out);
    EXPECT(code == 0, "A: acquire exited %d: %s", code, out);
    char a_value[128] = "";
    EXPECT(sscanf(out, "%127s", a_value) == 1, "A printed \"%s\"", out);
    expect_key(name, a_value);

    const char *b_argv[] = {bin, "-c", conf, "-u", url, "-m", b_mode, "acquire", "-n", name,
                            NULL};
    code = run_prog(b_argv, 1, out, sizeof out);
    if (strcmp(clock, "local") == 0) {
        EXPECT(code == 0, "B (clock +60 s, local clock) was not let in: exit %d: %s", code, out);
        char b_value[128] = "";
        EXPECT(sscanf(out, "%127s", b_value) == 1, "B printed \"%s\"", out);
        EXPECT(strcmp(b_value, a_value) != 0, "B wrote A's value");
        /* B's timestamp is 60 s in the future by the true clock. */
        EXPECT(strcmp(b_mode, "legacy") != 0 || parse_ts(b_value) >= parse_ts(a_value) + 50,
               "B wrote %s, A %s", b_value,
               a_value);
        expect_key(name, b_value);
    } else {
        EXPECT(code == 1, "B (clock +60 s, server clock) exit %d, expected 1 (busy): %s", code,
               out);
        expect_key(name, a_value);
    }
    srv_del(name);
    unlink(conf);
    conf_path[0] = '\0';
}

static void skew_case(int pi, const char *clock)
{
    skew_case_as(pi, clock, "legacy");
}

static void test_clock_skew(void **state)
{
    (void)state;
    /* First make sure the fake clock really is 60 s ahead. */
    setctx("faketime");
    char out[256];
    const char *date_argv[] = {"/bin/date", "+%s", NULL};
    long long real = now_unit(0);
    assert_int_equal(run_prog(date_argv, 1, out, sizeof out), 0);
    long long faked = atoll(out);
    EXPECT(faked >= real + 55 && faked <= real + 70, "date under faketime says %lld, real %lld",
           faked, real);

    skew_case(-1, "local");
    if (testsrv_target_at_least(2, 6, 0))
        skew_case(-1, "server");
    /* Modern mode judges a legacy leftover by the same clock (it once used
     * the local one whatever legacy.clock said, and took the live lock). */
    if (testsrv_mode_runs("modern")) {
        skew_case_as(-1, "local", "modern");
        skew_case_as(-1, "server", "modern");
    }
    if (pers_on(P2611)) {
        skew_case(P2611, "local");
        skew_case(P2611, "server");
    }

    /* Without TIME (before 2.6.0) clock = "server" is refused at connect. */
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        if (has_time(pi))
            continue;
        setctx("personality %s, legacy.clock = server", pers_name[pi]);
        const char *kv[] = {"legacy.clock", "server", NULL};
        relock_client *c = NULL;
        relock_status st = legacy_connect(pi, kv, &c);
        EXPECT(st == RELOCK_EUNSUPPORTED || st == RELOCK_ECONFIG,
               "connect returned %s, expected EUNSUPPORTED or ECONFIG", relock_status_name(st));
        assert_non_null(c);
        const char *msg = relock_client_error(c)->message;
        EXPECT(strstr(msg, "TIME") != NULL, "the message does not mention TIME: \"%s\"", msg);
        relock_client_free(c);
    }
    /* ...and accepted from 2.6.0. */
    for (int pi = 0; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        if (!has_time(pi))
            continue;
        setctx("personality %s, legacy.clock = server", pers_name[pi]);
        const char *kv[] = {"legacy.clock", "server", "legacy.clock_unit", "ms", NULL};
        relock_client *c = legacy_client(pi, kv);
        char key[64];
        snprintf(key, sizeof key, "%s-servertime", pers_tag[pi]);
        relock_lock *l = NULL;
        long long before = now_unit(1);
        EXPECT_ST(c, relock_acquire(c, key, 5000, 0, &l), RELOCK_OK);
        long long after = now_unit(1);
        /* Same machine: the server's clock is ours (allow 50 ms either way
         * for the offset estimate). */
        expect_fresh_value("server clock", relock_lock_value(l), 1, 5000, 1, before - 50,
                           after + 50);
        EXPECT_ST(c, relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(c);
    }
}

/* ================================================================ 4. gc_expire */

/*
 * On 2.0 a key with an expiry counts as absent for SETNX, so a TTL on a
 * held legacy key lets any legacy client in: gc_expire is refused there.
 * The proxy's 2.0 personality shows why.
 */
static void test_gc_expire_refused_on_20(void **state)
{
    (void)state;
    if (!pers_on(P20) && !pers_on(P22)) {
        testsrv_note_skip(__func__);
        return;
    }
    char held[64] = "";
    char intruder[32];
    snprintf(intruder, sizeof intruder, "%lld", now_unit(0) + 45);
    relock_client *h = NULL;
    relock_lock *l = NULL;
    if (pers_on(P20)) {
        setctx("personality 2.0, gc_expire");
        const char *kv[] = {"legacy.gc_expire", "true", NULL};
        relock_client *c = NULL;
        relock_status st = legacy_connect(P20, kv, &c);
        EXPECT(st != RELOCK_OK && st != RELOCK_EIO, "connect with gc_expire on 2.0 returned %s",
               relock_status_name(st));
        assert_non_null(c);
        const char *msg = relock_client_error(c)->message;
        EXPECT(strstr(msg, "gc_expire") != NULL, "the message does not name gc_expire: \"%s\"",
               msg);
        EXPECT(strstr(msg, "2.0") != NULL, "the message does not name the version: \"%s\"", msg);
        relock_client_free(c);

        /* Why: a held key that carries a TTL is overwritten by a plain SETNX. */
        setctx("personality 2.0, SETNX on a held key with a TTL");
        h = legacy_client(P20, NULL);
        EXPECT_ST(h, relock_acquire(h, "p20-gc-why", 30000, 0, &l), RELOCK_OK);
        snprintf(held, sizeof held, "%s", relock_lock_value(l));
        EXPECT(srv_int("EXPIRE %s 60", "p20-gc-why") == 1, "EXPIRE failed");
        char *r = testsrv_cmd(&proxy[P20], "SETNX %s %s", "p20-gc-why", intruder);
        assert_non_null(r);
        EXPECT(strcmp(r, "1") == 0, "SETNX on 2.0 over a held key with a TTL returned %s", r);
        free(r);
        expect_key("p20-gc-why", intruder);
        EXPECT(strcmp(intruder, held) != 0, "intruder value equals the holder's");
    }
    /* From 2.2 the same SETNX is refused. */
    if (pers_on(P22)) {
        if (!held[0])
            snprintf(held, sizeof held, "%lld", now_unit(0) + 30);
        srv_set("p22-gc-why", held);
        EXPECT(srv_int("EXPIRE %s 60", "p22-gc-why") == 1, "EXPIRE failed");
        char *r = testsrv_cmd(&proxy[P22], "SETNX %s %s", "p22-gc-why", intruder);
        assert_non_null(r);
        EXPECT(strcmp(r, "0") == 0, "SETNX on 2.2 over a key with a TTL returned %s", r);
        free(r);
        expect_key("p22-gc-why", held);
    }
    relock_lock_free(l); /* the lock is not ours any more: do not release */
    relock_client_free(h);
    srv_del("p20-gc-why");
    srv_del("p22-gc-why");
}

/* The key's remaining TTL in ms on the real server, -1 without one.  A
 * server before 2.6 has no PTTL and keeps expiries in whole seconds: the
 * expiry is then the current second plus TTL. */
static long long srv_pttl(const char *key)
{
    if (testsrv_target_at_least(2, 6, 0))
        return srv_int("PTTL %s", key);
    long long t = wall_ms();
    long long ttl = srv_int("TTL %s", key);
    return ttl < 0 ? ttl : (t / 1000 + ttl) * 1000 - t;
}

/* The key's expiry (wall ms) from its PTTL on the real server. */
static long long key_expiry_ms(const char *key)
{
    long long t = wall_ms();
    long long pttl = srv_pttl(key);
    EXPECT(pttl > 0, "key %s has no TTL (PTTL %lld)", key, pttl);
    return t + pttl;
}

/* From 2.2 a won key gets a TTL a little after its timestamp; extend keeps
 * the TTL after the new timestamp. */
static void test_gc_expire_ttl(void **state)
{
    (void)state;
    for (int pi = P22; pi < NPERS; pi++) {
        if (!pers_on(pi))
            continue;
        for (int ms = 0; ms <= 1; ms++) {
            const char *unit = ms ? "ms" : "s";
            setctx("personality %s, unit %s, gc_expire", pers_name[pi], unit);
            char key[64];
            snprintf(key, sizeof key, "%s-gc-%s", pers_tag[pi], unit);
            const char *kv[] = {"legacy.gc_expire", "true", "legacy.clock_unit", unit, NULL};
            relock_client *c = legacy_client(pi, kv);
            relock_lock *l = NULL;
            EXPECT_ST(c, relock_acquire(c, key, 5000, 0, &l), RELOCK_OK);
            long long v = parse_ts(relock_lock_value(l));
            long long exp = key_expiry_ms(key);
            /* Not before legacy readers consider the value expired (a
             * little slack for rounding), and not long after. */
            long long lo = expiry_ms(v, ms) - (ms ? 0 : 1000) - 50;
            long long hi = expiry_ms(v, ms) + 5000;
            EXPECT(exp >= lo && exp <= hi,
                   "key expires at %lld, value %lld expires at %lld (accepted %lld..%lld)", exp,
                   v, expiry_ms(v, ms), lo, hi);

            /* Extend to 20 s: the TTL must follow, or the key vanishes while
             * held and any legacy SETNX gets in. */
            EXPECT_ST(c, relock_extend(l, 20000), RELOCK_OK);
            long long v2 = parse_ts(relock_lock_value(l));
            expect_key(key, relock_lock_value(l));
            long long p = srv_pttl(key);
            if (p > 0) {
                long long exp2 = wall_ms() + p;
                EXPECT(exp2 >= expiry_ms(v2, ms) - (ms ? 0 : 1000) - 50,
                       "after extend the key expires at %lld, before its new value %lld expires "
                       "(%lld): it would vanish while held",
                       exp2, v2, expiry_ms(v2, ms));
            }
            EXPECT_ST(c, relock_release(l), RELOCK_OK);
            expect_key(key, "(nil)");
            relock_lock_free(l);
            relock_client_free(c);
        }
    }
}

/*
 * A waiter behind a holder whose timestamp ends 8 s away does not poll it
 * every few ms for all that time (design.md §7.3, decision 150): in the first
 * 4 s it sends a small part of what a legacy rate (an attempt every 4 ms)
 * would, and on 2.0, where every attempt also increments the fence, moves
 * the fence as little; then it still takes the lock soon after the
 * timestamp's end.  One waiter on the real server (EVAL), one through the
 * 2.0 personality (MULTI, SETNX, INCR, EXEC, then GET), at the same time;
 * the server's command count covers both.  Bounds are generous: a legacy
 * rate sends about 1000 attempts in 4 s per waiter.
 */
enum { QUIET_AHEAD_MS = 8000, QUIET_SPAN_MS = 4000 };
/* At most this many attempts per waiter in the span, and commands of both
 * waiters together (at most 5 commands per attempt). */
enum { QUIET_ATTEMPTS_MAX = 200, QUIET_COMMANDS_MAX = 2 * 5 * QUIET_ATTEMPTS_MAX };
/* "Soon" after the end: far beyond a wake-up at the end or a poll near it. */
enum { QUIET_PROMPT_MS = 3000 };

static void quiet_waiter_main(int pi, const char *key, tu_chan *rep)
{
    const char *kv[] = {"legacy.clock_unit", "ms", NULL};
    relock_client *c = child_client(pi, kv);
    if (!c) {
        tu_chan_send(rep, "ERR connect");
        _exit(2);
    }
    tu_chan_send(rep, "R");
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, key, 5000, QUIET_AHEAD_MS + 20000, &l);
    long long t = wall_ms();
    char line[600];
    if (st != RELOCK_OK) {
        snprintf(line, sizeof line, "ERR %s %s", relock_status_name(st),
                 relock_client_error(c)->message);
        tu_chan_send(rep, line);
        _exit(3);
    }
    snprintf(line, sizeof line, "OK %lld", t);
    tu_chan_send(rep, line);
    relock_release(l);
    relock_lock_free(l);
    relock_client_free(c);
    _exit(0);
}

/* The server's command count.  INFO without a section: before 2.6 it
 * takes no argument. */
static long long srv_total_commands(void)
{
    char *r = testsrv_cmd(&srv, "INFO");
    assert_non_null(r);
    const char *p = strstr(r, "total_commands_processed:");
    long long n = p ? atoll(p + strlen("total_commands_processed:")) : -1;
    free(r);
    assert_true(n >= 0);
    return n;
}

/* The fence counter's value (0 when absent). */
static long long srv_fence(const char *key)
{
    char fk[128];
    snprintf(fk, sizeof fk, "{%s} relock:fence", key);
    char *r = srv_get(fk);
    long long n = parse_ts(r); /* digits, or -1 for "(nil)" */
    free(r);
    return n < 0 ? 0 : n;
}

static void test_quiet_wait_far_from_expiry(void **state)
{
    (void)state;
    const int pis[2] = {-1, P20};
    const char *keys[2] = {"real-quiet", "p20-quiet"};
    int on[2] = {1, pers_on(P20)};
    tu_chan rep[2];
    pid_t pid[2] = {0, 0};
    long long end_ts = wall_ms() + QUIET_AHEAD_MS; /* held while the clock is <= end_ts */
    for (int i = 0; i < 2; i++) {
        if (!on[i])
            continue;
        setctx("waiter %s", pis[i] < 0 ? "on the real server" : "through 2.0");
        srv_del(keys[i]);
        srv_set_ts(keys[i], end_ts);
        assert_int_equal(tu_chan_open(&rep[i]), 0);
        pid[i] = spawn();
        if (pid[i] == 0)
            quiet_waiter_main(pis[i], keys[i], &rep[i]);
    }
    char line[600];
    for (int i = 0; i < 2; i++) {
        if (!on[i])
            continue;
        EXPECT(tu_chan_recv(&rep[i], line, sizeof line, 10000) == 0, "waiter %d not ready", i);
        EXPECT(strcmp(line, "R") == 0, "waiter %d: %s", i, line);
    }
    long long fence0 = on[1] ? srv_fence(keys[1]) : 0;
    long long cmds0 = srv_total_commands();
    uint64_t t0 = tu_now_ms();
    tu_sleep_ms(QUIET_SPAN_MS);
    long long cmds1 = srv_total_commands();
    long long fence1 = on[1] ? srv_fence(keys[1]) : 0;
    uint64_t t1 = tu_now_ms();
    setctx("waiting");
    EXPECT(wall_ms() < end_ts, "the span ended after the holder's end: the machine is too slow "
                               "for this test to say anything");
    /* cmds1 counts the INFO that read cmds0, and the GETs of the fence. */
    long long cmds = cmds1 - cmds0 - 1 - (on[1] ? 1 : 0);
    print_message("quiet wait: %lld server commands in %llu ms\n", cmds,
                  (unsigned long long)(t1 - t0));
    if (on[1])
        print_message("quiet wait: the 2.0 waiter's fence moved by %lld\n", fence1 - fence0);
    EXPECT(cmds > 0, "no command at all while waiting: the count says nothing");
    EXPECT(cmds < QUIET_COMMANDS_MAX,
           "%lld commands in %llu ms far from the holder's end (at most %d expected)", cmds,
           (unsigned long long)(t1 - t0), QUIET_COMMANDS_MAX);
    if (on[1]) {
        EXPECT(fence1 - fence0 < QUIET_ATTEMPTS_MAX,
               "2.0: the fence moved by %lld in %llu ms of waiting (at most %d expected)",
               fence1 - fence0, (unsigned long long)(t1 - t0), QUIET_ATTEMPTS_MAX);
    }
    for (int i = 0; i < 2; i++) {
        if (!on[i])
            continue;
        setctx("waiter %s", pis[i] < 0 ? "on the real server" : "through 2.0");
        EXPECT(tu_chan_recv(&rep[i], line, sizeof line, QUIET_AHEAD_MS + 20000) == 0,
               "no report from the waiter");
        long long t = 0;
        EXPECT(sscanf(line, "OK %lld", &t) == 1, "the waiter's acquire: %s", line);
        long long end = expiry_ms(end_ts, 1);
        print_message("quiet wait, %s: acquired %lld ms after the holder's end\n",
                      pis[i] < 0 ? "real server" : "2.0", t - end);
        EXPECT(t >= end, "acquired at %lld, %lld ms BEFORE the holder's end", t, end - t);
        EXPECT(t <= end + QUIET_PROMPT_MS, "acquired %lld ms after the holder's end", t - end);
        int status = reap(pid[i], 10000);
        EXPECT(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the waiter ended with status %d", status);
        tu_chan_close(&rep[i]);
        srv_del(keys[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_basic_cycle, per_test_teardown),
        cmocka_unit_test_teardown(test_fence_increases, per_test_teardown),
        cmocka_unit_test_teardown(test_killed_holder, per_test_teardown),
        cmocka_unit_test_teardown(test_stale_key_taken_at_once, per_test_teardown),
        cmocka_unit_test_teardown(test_takeover_race, per_test_teardown),
        cmocka_unit_test_teardown(test_stopped_holder, per_test_teardown),
        cmocka_unit_test_teardown(test_20_getset_other_unit, per_test_teardown),
        cmocka_unit_test_teardown(test_20_release_needs_validity, per_test_teardown),
        cmocka_unit_test_teardown(test_foreign_value_refused, per_test_teardown),
        cmocka_unit_test_teardown(test_getset_loser_write, per_test_teardown),
        cmocka_unit_test_teardown(test_getset_loser_then_holder_dies, per_test_teardown),
        cmocka_unit_test_teardown(test_new_holder_after_break, per_test_teardown),
        cmocka_unit_test_teardown(test_other_unit_refused, per_test_teardown),
        cmocka_unit_test_teardown(test_clock_skew, per_test_teardown),
        cmocka_unit_test_teardown(test_gc_expire_refused_on_20, per_test_teardown),
        cmocka_unit_test_teardown(test_gc_expire_ttl, per_test_teardown),
        cmocka_unit_test_teardown(test_quiet_wait_far_from_expiry, per_test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
