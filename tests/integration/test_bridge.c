/*
 * Bridge mode and auto against a real redis-server (and the old-server
 * proxy): ownership when timestamps repeat, legacy GETSET losers, dead
 * legacy holders, legacy leftovers met by modern clients, the marker, and
 * which mode auto picks on each server version.
 */
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "handle.h" /* relock_client.connects: the connections it opened */
#include "relock.h"
#include "testclient.h"
#include "testutil.h"


static relock_client *client_on(int port, const char *mode, const char *const *settings)
{
    return tu_client(port, mode, settings);
}

static relock_client *bridge(void)
{
    return client_on(tu_srv.port, "bridge", NULL);
}

static long long now_s(void)
{
    return (long long)time(NULL);
}

static char *cmd(const char *fmt, const char *arg)
{
    return testsrv_cmd(&tu_srv, fmt, arg);
}

static long long cmd_int(const char *fmt, const char *arg)
{
    char *v = testsrv_cmd(&tu_srv, fmt, arg);
    assert_non_null(v);
    long long n = atoll(v);
    free(v);
    return n;
}

static void test_bridge_values(void **state)
{
    (void)state;
    relock_client *c = bridge();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "bv", 5000, 0, &l), RELOCK_OK);
    long long v = atoll(relock_lock_value(l));
    /* A legacy timestamp (now + 5 s + offset 1)... */
    assert_true(v >= now_s() + 5 && v <= now_s() + 7);
    /* ...with a TTL that ends inside the legacy expiry window (V, V + 1). */
    long long pttl = cmd_int("PTTL %s", "bv");
    long long ttl_end_ms = (long long)time(NULL) * 1000 + pttl;
    assert_true(pttl > 0);
    assert_true(ttl_end_ms <= (v + 1) * 1000 + 100);
    assert_true(ttl_end_ms >= v * 1000 - 1100);
    assert_true(relock_lock_fence(l) > 0);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(cmd_int("EXISTS %s", "bv"), 0);
    relock_lock_free(l);
    relock_client_free(c);
}

/* Two holders within one second write the same timestamp: the first one's
 * late release must not delete the second's lock (the fence tells them
 * apart). */
static void test_same_second_ownership(void **state)
{
    (void)state;
    relock_client *a = bridge(), *b = bridge();
    int checked = 0;
    for (int tries = 0; tries < 10 && !checked; tries++) {
        relock_lock *la = NULL, *lb = NULL, *late = NULL;
        assert_int_equal(relock_acquire(a, "same", 5000, 0, &la), RELOCK_OK);
        char va[64];
        snprintf(va, sizeof va, "%s", relock_lock_value(la));
        long long fa = relock_lock_fence(la);
        assert_int_equal(relock_release(la), RELOCK_OK);
        assert_int_equal(relock_acquire(b, "same", 5000, 0, &lb), RELOCK_OK);
        if (strcmp(va, relock_lock_value(lb)) == 0) {
            checked = 1;
            assert_true(relock_lock_fence(lb) > fa);
            /* a's late release, as from another process holding its value */
            assert_int_equal(relock_lock_adopt(a, "same", va, fa, 5000, &late), RELOCK_OK);
            assert_int_equal(relock_release(late), RELOCK_LOST);
            assert_int_equal(relock_extend(late, 5000), RELOCK_LOST);
            char *v = cmd("GET %s", "same");
            assert_string_equal(v, relock_lock_value(lb));
            free(v);
            assert_true(cmd_int("PTTL %s", "same") > 0);
            relock_lock_free(late);
        }
        assert_int_equal(relock_release(lb), RELOCK_OK);
        relock_lock_free(la);
        relock_lock_free(lb);
    }
    assert_true(checked); /* ten tries never all straddle a second */
    relock_client_free(a);
    relock_client_free(b);
}

/* A legacy client writing the same timestamp after our release leaves no
 * TTL: our late release must leave its lock alone. */
static void test_same_value_legacy_writer(void **state)
{
    (void)state;
    relock_client *a = bridge();
    relock_lock *la = NULL, *late = NULL;
    assert_int_equal(relock_acquire(a, "samelegacy", 5000, 0, &la), RELOCK_OK);
    char va[64];
    snprintf(va, sizeof va, "%s", relock_lock_value(la));
    long long fa = relock_lock_fence(la);
    assert_int_equal(relock_release(la), RELOCK_OK);
    char *r = testsrv_cmd(&tu_srv, "SETNX samelegacy %s", va); /* the legacy client */
    assert_string_equal(r, "1");
    free(r);
    assert_int_equal(relock_lock_adopt(a, "samelegacy", va, fa, 5000, &late), RELOCK_OK);
    assert_int_equal(relock_release(late), RELOCK_LOST);
    r = cmd("GET %s", "samelegacy");
    assert_string_equal(r, va);
    free(r);
    relock_lock_free(la);
    relock_lock_free(late);
    relock_client_free(a);
}

/* A legacy GETSET loser rewrites the holder's value (and clears its TTL)
 * while the holder is valid: extend and release still succeed. */
static void test_getset_loser_write(void **state)
{
    (void)state;
    relock_client *a = bridge();
    relock_lock *l = NULL;
    free(cmd("DEL %s", " relock:legacy-seen"));
    assert_int_equal(relock_acquire(a, "loser", 10000, 0, &l), RELOCK_OK);
    char loser[32];
    snprintf(loser, sizeof loser, "%lld", atoll(relock_lock_value(l)) + 1);
    char *old = testsrv_cmd(&tu_srv, "GETSET loser %s", loser);
    assert_string_equal(old, relock_lock_value(l));
    free(old);
    assert_int_equal(cmd_int("PTTL %s", "loser"), -1);
    assert_int_equal(relock_extend(l, 10000), RELOCK_OK);
    /* The extension wrote our value and a TTL again. */
    char *v = cmd("GET %s", "loser");
    assert_string_equal(v, relock_lock_value(l));
    free(v);
    assert_true(cmd_int("PTTL %s", "loser") > 0);
    /* Another loser's write, then release. */
    snprintf(loser, sizeof loser, "%lld", atoll(relock_lock_value(l)) + 2);
    free(testsrv_cmd(&tu_srv, "GETSET loser %s", loser));
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(cmd_int("EXISTS %s", "loser"), 0);
    /* Upgraded clients recorded that a legacy writer is about. */
    v = cmd("GET %s", " relock:legacy-seen");
    assert_non_null(v);
    long long seen = atoll(v);
    free(v);
    assert_true(seen / 1000 >= now_s() - 5 && seen / 1000 <= now_s() + 1);
    relock_lock_free(l);
    relock_client_free(a);
}

/* After `relock break`, a classic client's SETNX writes a TTL-less
 * timestamp, just as a GETSET loser would: the broken holder must not
 * follow it.  Its extend and release report the lock lost and leave the
 * classic holder's value and its missing TTL alone. */
static void test_classic_holder_after_break(void **state)
{
    (void)state;
    relock_client *a = bridge();
    relock_client *op = bridge();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "brk-classic", 3000, 0, &l), RELOCK_OK);
    assert_int_equal(relock_break(op, "brk-classic", NULL), RELOCK_OK);
    char classic[32];
    snprintf(classic, sizeof classic, "%lld", now_s() + 4);
    char *won = testsrv_cmd(&tu_srv, "SETNX brk-classic %s", classic);
    assert_string_equal(won, "1");
    free(won);
    assert_int_equal(relock_extend(l, 3000), RELOCK_LOST);
    char *v = cmd("GET %s", "brk-classic");
    assert_string_equal(v, classic);
    free(v);
    assert_int_equal(cmd_int("PTTL %s", "brk-classic"), -1);
    assert_int_equal(relock_release(l), RELOCK_LOST);
    v = cmd("GET %s", "brk-classic");
    assert_string_equal(v, classic);
    free(v);
    free(cmd("DEL %s", "brk-classic"));
    relock_lock_free(l);
    relock_client_free(op);
    relock_client_free(a);
}

/* Dead and live legacy holders as bridge and modern clients meet them. */
static void test_legacy_holders(void **state)
{
    (void)state;
    char ts[32];
    relock_client *b = bridge();
    /* A real server before 2.6.12 (RELOCK_TEST_SERVER): bridge alone. */
    int modern = testsrv_mode_runs("modern");
    relock_client *m = modern ? client_on(tu_srv.port, "modern", NULL) : NULL;
    relock_lock *l = NULL;
    const char *modes[] = {"bridge", "modern"};
    relock_client *clients[] = {b, m};
    for (int i = 0; i < 1 + modern; i++) {
        /* dead: an expired timestamp, no TTL → taken over at once */
        snprintf(ts, sizeof ts, "%lld", now_s() - 30);
        free(testsrv_cmd(&tu_srv, "SET dead %s", ts));
        if (relock_acquire(clients[i], "dead", 5000, 0, &l) != RELOCK_OK)
            fail_msg("%s: %s", modes[i], relock_client_error(clients[i])->message);
        assert_true(cmd_int("PTTL %s", "dead") > 1000); /* our lease, not the dead one's */
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        /* the same in milliseconds: the unit is read from the digits */
        if (i == 1) {
            snprintf(ts, sizeof ts, "%lld", (now_s() - 30) * 1000);
            free(testsrv_cmd(&tu_srv, "SET dead %s", ts));
            assert_int_equal(relock_acquire(m, "dead", 5000, 0, &l), RELOCK_OK);
            assert_int_equal(relock_release(l), RELOCK_OK);
            relock_lock_free(l);
        }
        /* live: a future timestamp, no TTL → respected, and noted (by a
         * client of its own: the dead leftover above was a sighting too,
         * and a client notes at most one a second) */
        free(cmd("DEL %s", " relock:legacy-seen"));
        snprintf(ts, sizeof ts, "%lld", now_s() + 30);
        free(testsrv_cmd(&tu_srv, "SET live %s", ts));
        relock_client *fresh = client_on(tu_srv.port, modes[i], NULL);
        assert_int_equal(relock_acquire(fresh, "live", 5000, 0, &l), RELOCK_BUSY);
        relock_client_free(fresh);
        char *v = cmd("GET %s", "live");
        assert_string_equal(v, ts);
        free(v);
        assert_int_equal(cmd_int("EXISTS %s", " relock:legacy-seen"), 1);
        /* a value neither relock nor a legacy client writes, without TTL */
        free(testsrv_cmd(&tu_srv, "SET odd %s", "hello"));
        assert_int_equal(relock_acquire(clients[i], "odd", 5000, 0, &l), RELOCK_EFOREIGN);
        assert_non_null(strstr(relock_client_error(clients[i])->message, "odd"));
    }
    relock_client_free(b);
    relock_client_free(m);
}

/* A bridge holder SIGKILLed while holding: the TTL frees the lock within
 * the legacy expiry window, and a waiter takes it. */
static void test_killed_bridge_holder(void **state)
{
    (void)state;
    tu_chan ch;
    assert_int_equal(tu_chan_open(&ch), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        relock_client *c = bridge();
        relock_lock *l = NULL;
        if (relock_acquire(c, "bkilled", 1000, 0, &l) != RELOCK_OK)
            _exit(1);
        tu_chan_send(&ch, relock_lock_value(l));
        for (int i = 0; i < 6000; i++)
            tu_sleep_ms(10);
        _exit(0);
    }
    char value[64];
    assert_int_equal(tu_chan_recv(&ch, value, sizeof value, 10000), 0);
    kill(pid, SIGKILL);
    tu_wait_child(pid, 10000);
    tu_chan_close(&ch);
    relock_client *w = bridge();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(w, "bkilled", 1000, 10000, &l), RELOCK_OK);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    long long v = atoll(value);
    /* Not before the TTL ended (no earlier than V s), within 1.5 s of V + 1. */
    assert_true(now_ms >= v * 1000);
    assert_true(now_ms <= (v + 1) * 1000 + 1500);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(w);
}

/* A waiter is woken by the release, long before the holder's TTL ends. */
static void test_release_wakes_waiter(void **state)
{
    (void)state;
    const char *modes[] = {"modern", "bridge", "legacy"};
    for (int m = 0; m < 3; m++) {
        if (!testsrv_mode_runs(modes[m]))
            continue;
        relock_client *a = client_on(tu_srv.port, modes[m], NULL);
        relock_lock *la = NULL;
        assert_int_equal(relock_acquire(a, "wake", 10000, 0, &la), RELOCK_OK);
        tu_chan ch;
        assert_int_equal(tu_chan_open(&ch), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            relock_client *w = client_on(tu_srv.port, modes[m], NULL);
            relock_lock *lw = NULL;
            tu_chan_send(&ch, "waiting");
            relock_status st = relock_acquire(w, "wake", 10000, 20000, &lw);
            char line[64];
            snprintf(line, sizeof line, "%d %llu", (int)st, (unsigned long long)tu_now_ms());
            tu_chan_send(&ch, line);
            if (st == RELOCK_OK)
                relock_release(lw);
            _exit(0);
        }
        char line[64];
        assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 10000), 0);
        /* Let the waiter find the lock held and start waiting. */
        char *sub = NULL;
        for (int i = 0; i < 200; i++) {
            sub = testsrv_cmd(&tu_srv, "PUBSUB NUMSUB %s", "wake relock:released");
            int waiting = sub && strstr(sub, " 1") != NULL;
            free(sub);
            if (waiting)
                break;
            tu_sleep_ms(10);
        }
        tu_sleep_ms(100);
        uint64_t t_release = tu_now_ms();
        assert_int_equal(relock_release(la), RELOCK_OK);
        assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 15000), 0);
        int st = -1;
        unsigned long long t_got = 0;
        assert_int_equal(sscanf(line, "%d %llu", &st, &t_got), 2);
        assert_int_equal(st, RELOCK_OK);
        if (t_got - t_release >= 100)
            fail_msg("%s: the waiter took the lock %llu ms after the release", modes[m],
                     t_got - (unsigned long long)t_release);
        tu_wait_child(pid, 10000);
        tu_chan_close(&ch);
        relock_lock_free(la);
        relock_client_free(a);
    }
}

/* A legacy holder never notifies: the waiter wakes at the timestamp's end.
 * Its backoff may grow to 5 s here, so a waiter that did not know the end
 * would be seconds late; the bound below leaves room for a loaded machine. */
static void test_legacy_expiry_wakes_waiter(void **state)
{
    (void)state;
    const char *const ms[] = {"legacy.clock_unit", "ms", "wait.backoff_max_ms", "5000", NULL};
    relock_client *w = client_on(tu_srv.port, "legacy", ms);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long v = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 + 1500;
    char ts[32];
    snprintf(ts, sizeof ts, "%lld", v);
    free(testsrv_cmd(&tu_srv, "SET legacywake %s", ts));
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(w, "legacywake", 5000, 10000, &l), RELOCK_OK);
    clock_gettime(CLOCK_REALTIME, &now);
    long long got = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    /* Not before the value has passed (V + 1 ms), and within 1 s of it. */
    assert_true(got >= v + 1);
    if (got - (v + 1) >= 1000)
        fail_msg("took over %lld ms after the legacy expiry", got - (v + 1));
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(w);
}

static volatile int lost_calls;
static volatile relock_status lost_status;
static volatile int lost_sigpipe_blocked;

static void count_lost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    (void)arg;
    lost_status = why;
    /* The renewal thread, on which this runs, blocks SIGPIPE. */
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    lost_sigpipe_blocked = sigismember(&cur, SIGPIPE);
    lost_calls++;
}

/* relock_keep renews in the background past several leases, in every
 * mode, and reports a loss exactly once.  (Leases of a second: on a loaded
 * machine a renewal thread may stall past a shorter one.) */
static void test_keep(void **state)
{
    (void)state;
    const char *modes[] = {"modern", "bridge", "legacy"};
    const char *const ms[] = {"legacy.clock_unit", "ms", NULL};
    for (int m = 0; m < 3; m++) {
        if (!testsrv_mode_runs(modes[m]))
            continue;
        relock_client *a = client_on(tu_srv.port, modes[m], ms);
        relock_client *b = client_on(tu_srv.port, modes[m], ms);
        relock_lock *l = NULL, *lb = NULL;
        assert_int_equal(relock_acquire(a, "kept", 1000, 0, &l), RELOCK_OK);
        lost_calls = 0;
        assert_int_equal(relock_keep(l, count_lost, NULL), RELOCK_OK);
        assert_int_equal(relock_keep(l, count_lost, NULL), RELOCK_EINVAL);
        assert_int_equal(relock_extend(l, 300), RELOCK_EINVAL);
        uint64_t end = tu_now_ms() + 3000;
        while (tu_now_ms() < end) {
            assert_int_equal(relock_try_acquire(b, "kept", 300, &lb), RELOCK_BUSY);
            assert_true(relock_lock_validity_ms(l) > 0);
            tu_sleep_ms(50);
        }
        assert_int_equal(relock_keep_stop(l), RELOCK_OK);
        assert_int_equal(lost_calls, 0);
        /* The value renewals wrote is the handle's again. */
        char *v = cmd("GET %s", "kept");
        assert_string_equal(v, relock_lock_value(l));
        free(v);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);

        /* Deleted behind its back: on_lost once, then release says LOST. */
        assert_int_equal(relock_acquire(a, "kept", 300, 0, &l), RELOCK_OK);
        assert_int_equal(relock_keep(l, count_lost, NULL), RELOCK_OK);
        free(cmd("DEL %s", "kept"));
        for (int i = 0; i < 300 && lost_calls == 0; i++)
            tu_sleep_ms(10);
        assert_int_equal(lost_calls, 1);
        assert_int_equal(lost_status, RELOCK_LOST);
        assert_int_equal(lost_sigpipe_blocked, 1);
        assert_int_equal(relock_lock_validity_ms(l), 0);
        assert_int_equal(relock_release(l), RELOCK_LOST);
        assert_int_equal(lost_calls, 1);
        relock_lock_free(l);
        /* Freeing a kept lock stops its renewal. */
        assert_int_equal(relock_acquire(a, "kept2", 300, 0, &l), RELOCK_OK);
        assert_int_equal(relock_keep(l, NULL, NULL), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(a);
        relock_client_free(b);
    }
}

/* A value somebody passes in is not proof of ownership: an adopted
 * handle never follows a "GETSET loser's write", so a guessed timestamp
 * cannot release or extend another holder's lock. */
static void test_adopted_guess_cannot_release(void **state)
{
    (void)state;
    const char *modes[] = {"bridge", "legacy"};
    for (int m = 0; m < 2; m++) {
        relock_client *a = client_on(tu_srv.port, modes[m], NULL);
        relock_lock *l = NULL, *guess = NULL;
        assert_int_equal(relock_acquire(a, "guessed", 60000, 0, &l), RELOCK_OK);
        char g[32];
        snprintf(g, sizeof g, "%lld", atoll(relock_lock_value(l)) + 100);
        assert_int_equal(relock_lock_adopt(a, "guessed", g, relock_lock_fence(l), 60000, &guess),
                         RELOCK_OK);
        assert_int_equal(relock_release(guess), RELOCK_LOST);
        assert_int_equal(relock_extend(guess, 60000), RELOCK_LOST);
        char *v = cmd("GET %s", "guessed");
        assert_string_equal(v, relock_lock_value(l));
        free(v);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(guess);
        relock_lock_free(l);
        relock_client_free(a);
    }
}

/* A connection the server closed while idle is replaced before use, not
 * reported as an ambiguous outcome. */
static void test_idle_connection_closed_by_server(void **state)
{
    (void)state;
    relock_client *a =
        client_on(tu_srv.port, testsrv_mode_runs("modern") ? "modern" : "bridge", NULL);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "idle", 5000, 0, &l), RELOCK_OK);
    free(testsrv_cmd(&tu_srv, "CONFIG SET timeout %s", "1"));
    /* The server closes idle clients on its next cron pass after 1 s. */
    char *list = NULL;
    for (int i = 0; i < 400; i++) {
        list = testsrv_cmd(&tu_srv, "CLIENT LIST");
        int n = 0;
        for (const char *p = list; p && (p = strstr(p, "id=")); p++)
            n++;
        free(list);
        if (n <= 1)
            break;
        tu_sleep_ms(25);
    }
    free(testsrv_cmd(&tu_srv, "CONFIG SET timeout %s", "0"));
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    assert_int_equal(relock_acquire(a, "idle", 5000, 0, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(a);
}

/* bridge.value_suffix: unique values "TS:token" that legacy readers still
 * read as the timestamp. */
/* Waits (at most about a second) until the wall clock is late in its
 * second, between .8 and .95. */
static void wait_late_in_second(void)
{
    for (int i = 0; i < 400; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ms = ts.tv_nsec / 1000000;
        if (ms >= 800 && ms < 950)
            return;
        tu_sleep_ms(ms < 800 ? (800 - ms > 20 ? 20 : 800 - ms) : 10);
    }
}

/* The key's PTTL, then the validity the holder reports: the key must
 * outlive the validity (the PTTL is read first, so its own ageing only
 * helps the validity). */
static void assert_key_outlives_validity(relock_lock *l, const char *key)
{
    long long pttl = cmd_int("PTTL %s", key);
    long long v = relock_lock_validity_ms(l);
    assert_true(v > 0);
    if (pttl < v)
        fail_msg("%s: the key lives %lld ms, the holder is told %ld ms", key, pttl, v);
}

/* Bridge with expiry_offset 0 in seconds: a lease acquired (or extended)
 * late in a second gets a PEXPIRE up to half a second shorter than the
 * ttl; the reported validity must end before the key does, so that no
 * second client acquires while the first is still told it holds. */
static void test_offset0_late_in_second(void **state)
{
    (void)state;
    const char *const zero[] = {"legacy.expiry_offset", "0", NULL};
    relock_client *a = client_on(tu_srv.port, "bridge", zero);
    relock_client *b = client_on(tu_srv.port, "bridge", zero);
    relock_lock *l = NULL, *other = NULL;
    wait_late_in_second();
    assert_int_equal(relock_acquire(a, "late", 2000, 0, &l), RELOCK_OK);
    assert_key_outlives_validity(l, "late");
    wait_late_in_second();
    assert_int_equal(relock_extend(l, 2000), RELOCK_OK);
    assert_key_outlives_validity(l, "late");
    /* The second client gets it once the key is gone: by then the first
     * must know its validity is over. */
    uint64_t end = tu_now_ms() + 5000;
    relock_status st;
    while ((st = relock_acquire(b, "late", 2000, 0, &other)) == RELOCK_BUSY && tu_now_ms() < end)
        tu_sleep_ms(5);
    assert_int_equal(st, RELOCK_OK);
    assert_int_equal(relock_lock_validity_ms(l), 0);
    assert_int_equal(relock_release(other), RELOCK_OK);
    relock_lock_free(other);
    relock_lock_free(l);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_value_suffix(void **state)
{
    (void)state;
    const char *const suffix[] = {"bridge.value_suffix", "true", NULL};
    relock_client *b = client_on(tu_srv.port, "bridge", suffix);
    relock_client *legacy = client_on(tu_srv.port, "legacy", NULL);
    relock_lock *l = NULL, *other = NULL;
    assert_int_equal(relock_acquire(b, "suffixed", 5000, 0, &l), RELOCK_OK);
    const char *v = relock_lock_value(l);
    const char *colon = strchr(v, ':');
    assert_non_null(colon);
    assert_int_equal(colon - v, 10);
    assert_int_equal(strlen(colon + 1), 32);
    assert_true(atoll(v) >= now_s() + 5);
    /* A legacy-mode client sees a live timestamp. */
    assert_int_equal(relock_acquire(legacy, "suffixed", 5000, 0, &other), RELOCK_BUSY);
    assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
    assert_non_null(strchr(relock_lock_value(l), ':'));
    char *stored = cmd("GET %s", "suffixed");
    assert_string_equal(stored, relock_lock_value(l));
    free(stored);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(b);
    relock_client_free(legacy);
}

/* relock_config_set_owner() and relock_lock_set_owner(): the record names
 * the pid and text given, at= stays the acquisition time through renewals,
 * and a text set on a kept lock is written at once and by the renewals. */
static void test_owner_set(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        const char *mode = i ? "bridge" : "modern";
        if (!testsrv_mode_runs(mode))
            continue;
        relock_config *cfg = relock_config_new();
        assert_non_null(cfg);
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_srv.port);
        assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "owner_info", "true"), RELOCK_OK);
        assert_int_equal(relock_config_set_owner(cfg, 4242, "cmd=deploy.sh --all"), RELOCK_OK);
        relock_client *c = NULL;
        assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
        relock_config_free(cfg);

        relock_lock *l = NULL;
        assert_int_equal(relock_acquire(c, "owned2", 900, 0, &l), RELOCK_OK);
        relock_inspect_info *in = NULL;
        assert_int_equal(relock_inspect(c, "owned2", &in), RELOCK_OK);
        const char *owner = relock_inspect_info_owner(in);
        assert_non_null(strstr(owner, " pid=4242 at="));
        const char *tail = " cmd=deploy.sh --all";
        assert_string_equal(owner + strlen(owner) - strlen(tail), tail);
        char at[40];
        const char *a = strstr(owner, " at=");
        assert_non_null(a);
        snprintf(at, sizeof at, "%.24s", a); /* " at=YYYY-MM-DDTHH:MM:SSZ" */
        relock_inspect_info_free(in);

        assert_int_equal(relock_keep(l, NULL, NULL), RELOCK_OK);
        assert_int_equal(relock_lock_set_owner(l, 0, NULL), RELOCK_EINVAL);
        assert_int_equal(relock_lock_set_owner(l, 0, "cmd_pid=7 cmd=sleep 9"), RELOCK_OK);
        char want[64];
        snprintf(want, sizeof want, " pid=%ld at=", (long)getpid());
        /* Written at once, and again by the renewals (every 300 ms): after
         * more than a second the record is the new one, at= unchanged. */
        for (int pass = 0; pass < 2; pass++) {
            assert_int_equal(relock_inspect(c, "owned2", &in), RELOCK_OK);
            owner = relock_inspect_info_owner(in);
            assert_non_null(strstr(owner, want));
            assert_non_null(strstr(owner, at));
            assert_non_null(strstr(owner, " cmd_pid=7 cmd=sleep 9"));
            assert_null(strstr(owner, "deploy"));
            relock_inspect_info_free(in);
            if (pass == 0)
                tu_sleep_ms(1200);
        }
        assert_int_equal(relock_release(l), RELOCK_OK);
        assert_int_equal(relock_lock_set_owner(l, 0, "late"), RELOCK_LOST);
        assert_int_equal(cmd_int("EXISTS %s", "{owned2} relock:owner"), 0);
        relock_lock_free(l);
        relock_client_free(c);
    }
}

/* owner_info: the holder's host, pid and start beside the lock, with its
 * TTL, shown by inspect, gone after release; also on 2.0 (no PSETEX). */
static void test_owner_info(void **state)
{
    (void)state;
    const char *const owner[] = {"owner_info", "true", NULL};
    testsrv px = {0};
    /* With a real server (RELOCK_TEST_SERVER), legacy on that server. */
    int p20 = testsrv_personality_runs("2.0");
    if (p20)
        assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, "2.0", NULL), 0);
    const struct {
        int port;
        const char *mode;
    } cases[] = {{tu_srv.port, "modern"}, {tu_srv.port, "bridge"},
                 {p20 ? px.port : tu_srv.port, "legacy"}};
    char want[32];
    snprintf(want, sizeof want, "pid=%ld ", (long)getpid());
    for (int i = 0; i < 3; i++) {
        if (!testsrv_mode_runs(cases[i].mode))
            continue;
        relock_client *c = client_on(cases[i].port, cases[i].mode, owner);
        relock_lock *l = NULL;
        assert_int_equal(relock_acquire(c, "owned", 5000, 0, &l), RELOCK_OK);
        char *meta = cmd("GET %s", "{owned} relock:owner");
        assert_non_null(strstr(meta, want));
        assert_non_null(strstr(meta, "host="));
        free(meta);
        long long ttl = cmd_int("PTTL %s", "{owned} relock:owner");
        assert_true(ttl > 0 && ttl <= 5000);
        relock_inspect_info *in = NULL;
        assert_int_equal(relock_inspect(c, "owned", &in), RELOCK_OK);
        assert_non_null(strstr(relock_inspect_info_owner(in), want));
        relock_inspect_info_free(in);
        assert_int_equal(relock_extend(l, 8000), RELOCK_OK);
        assert_true(cmd_int("PTTL %s", "{owned} relock:owner") > 5000);
        assert_int_equal(relock_release(l), RELOCK_OK);
        assert_int_equal(cmd_int("EXISTS %s", "{owned} relock:owner"), 0);
        relock_lock_free(l);
        relock_client_free(c);
    }
    if (p20) {
        char *refused = testsrv_cmd(&px, "RELOCK-PROXY REFUSED");
        assert_string_equal(refused, "0");
        free(refused);
        testsrv_stop(&px);
    }
}

/* The server closes every client connection but the test's own (CLIENT
 * KILL by address, which servers from 2.4 on know), and the test waits
 * until a client's connection, idle since, is one it looks at before use
 * (the poll loop's idle check, 200 ms).  Returns the connections closed. */
static int kill_clients(void)
{
    char *list = testsrv_cmd(&tu_srv, "CLIENT LIST");
    assert_non_null(list);
    int killed = 0;
    for (char *line = list; line && *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        char *addr = strstr(line, "addr=");
        /* (the listing's own connection, closed by now, says cmd=client) */
        if (addr && !strstr(line, "cmd=client")) {
            addr += 5;
            addr[strcspn(addr, " ")] = '\0';
            char *r = testsrv_cmd(&tu_srv, "CLIENT KILL %s", addr);
            killed += r && strcmp(r, "OK") == 0;
            free(r);
        }
        line = end ? end + 1 : NULL;
    }
    free(list);
    tu_sleep_ms(300);
    return killed;
}

/* After its connection was closed (a server restart, say), a client must
 * probe again before choosing its path: not fall back to the 2.0 one.
 * The server closes the client's connection; the client's count of the
 * connections it opened shows each call after it on a new one. */
static void test_path_after_reconnect(void **state)
{
    (void)state;
    relock_client *c = client_on(tu_srv.port, "bridge", NULL);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "reconnect", 5000, 0, &l), RELOCK_OK);
    long long f = relock_lock_fence(l);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    unsigned long connects = c->connects;
    assert_true(kill_clients() >= 1);
    assert_int_equal(relock_acquire(c, "reconnect", 5000, 0, &l), RELOCK_OK);
    assert_int_equal(c->connects, connects + 1);
    assert_int_equal(relock_lock_fence(l), f + 1);
    assert_true(cmd_int("PTTL %s", "reconnect") > 0); /* a bridge value, with its TTL */
    assert_true(kill_clients() >= 1);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(c->connects, connects + 2);
    assert_int_equal(cmd_int("EXISTS %s", "reconnect"), 0);
    relock_lock_free(l);
    relock_client_free(c);
}

/* auto, for every proxy personality and both legacy_clients settings. */
static void test_auto_per_personality(void **state)
{
    (void)state;
    static const struct {
        const char *personality;
        relock_mode with_legacy, without_legacy;
    } cases[] = {
        {"2.0", RELOCK_MODE_LEGACY, RELOCK_MODE_LEGACY},
        {"2.2", RELOCK_MODE_LEGACY, RELOCK_MODE_LEGACY},
        {"2.4", RELOCK_MODE_LEGACY, RELOCK_MODE_LEGACY},
        {"2.6.0", RELOCK_MODE_BRIDGE, RELOCK_MODE_BRIDGE},
        {"2.6.11", RELOCK_MODE_BRIDGE, RELOCK_MODE_BRIDGE},
        {"7", RELOCK_MODE_BRIDGE, RELOCK_MODE_MODERN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        testsrv px;
        if (!testsrv_personality_runs(cases[i].personality))
            continue;
        assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, cases[i].personality, NULL), 0);
        const char *const no_legacy[] = {"migration.legacy_clients", "false", NULL};
        relock_client *c1 = client_on(px.port, "auto", NULL);
        relock_client *c2 = client_on(px.port, "auto", no_legacy);
        if (relock_client_mode(c1) != cases[i].with_legacy ||
            relock_client_mode(c2) != cases[i].without_legacy)
            fail_msg("personality %s: auto chose %s / %s", cases[i].personality,
                     relock_mode_name(relock_client_mode(c1)),
                     relock_mode_name(relock_client_mode(c2)));
        /* Each works there without a refused command. */
        relock_client *both[] = {c1, c2};
        free(testsrv_cmd(&px, "RELOCK-PROXY RESET"));
        for (int k = 0; k < 2; k++) {
            relock_lock *l = NULL;
            assert_int_equal(relock_acquire(both[k], "auto", 5000, 0, &l), RELOCK_OK);
            assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
            assert_int_equal(relock_release(l), RELOCK_OK);
            relock_lock_free(l);
        }
        char *refused = testsrv_cmd(&px, "RELOCK-PROXY REFUSED");
        assert_string_equal(refused, "0");
        free(refused);
        relock_client_free(c1);
        relock_client_free(c2);
        /* Bridge on a server without EVAL is refused, naming the way out. */
        if (cases[i].with_legacy == RELOCK_MODE_LEGACY) {
            relock_config *cfg = relock_config_new();
            char url[64];
            snprintf(url, sizeof url, "redis://127.0.0.1:%d", px.port);
            relock_config_set_url(cfg, url);
            relock_config_set(cfg, "mode", "bridge");
            relock_client *c = NULL;
            assert_int_equal(relock_connect(cfg, &c), RELOCK_EUNSUPPORTED);
            assert_non_null(strstr(relock_client_error(c)->message, "use mode \"legacy\""));
            relock_client_free(c);
            relock_config_free(cfg);
        }
        testsrv_stop(&px);
    }
}

/*
 * Coexistence with other lock patterns on shared keys (docs/migration.md):
 * a value another program wrote with a TTL (SET NX PX with its own token,
 * SETEX of a UUID, SETNX "1" + EXPIRE) is waited out in bridge mode as in
 * modern mode; without a TTL it is never taken over (EFOREIGN); a key of
 * another type is EFOREIGN too, for acquire, release and extend, never a
 * raw server error.  (Bridge once failed at once on the first three.)
 */
static void coexist(const char *mode)
{
    static const char *const patterns[][2] = {
        {"SET %s 7f3c2a9e-other-library-token NX PX 400", "SET NX PX, another token"},
        {"SETEX %s 1 550e8400-e29b-41d4-a716-446655440000", "EXISTS + SETEX, a UUID"},
        {"SET %s 1 PX 400", "SETNX 1 + EXPIRE"},
    };
    /* The same values on a real server before 2.6.12, which has no SET
     * options (the key is absent when they are written). */
    static const char *const patterns_26[][2] = {
        {"PSETEX %s 400 7f3c2a9e-other-library-token", "SET NX PX, another token"},
        {"SETEX %s 1 550e8400-e29b-41d4-a716-446655440000", "EXISTS + SETEX, a UUID"},
        {"PSETEX %s 400 1", "SETNX 1 + EXPIRE"},
    };
    const char *const(*pat)[2] = testsrv_target_at_least(2, 6, 12) ? patterns : patterns_26;
    relock_client *c = client_on(tu_srv.port, mode, NULL);
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "coexist-%s-%zu", mode, i);
        free(testsrv_cmd(&tu_srv, pat[i][0], key));
        relock_lock *l = NULL;
        relock_status st = relock_acquire(c, key, 5000, 0, &l);
        if (st != RELOCK_BUSY)
            fail_msg("%s, %s: status %d at once (%s)", mode, pat[i][1], (int)st,
                     relock_client_error(c)->message);
        st = relock_acquire(c, key, 5000, 10000, &l);
        if (st != RELOCK_OK)
            fail_msg("%s, %s: status %d after waiting (%s)", mode, pat[i][1], (int)st,
                     relock_client_error(c)->message);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        /* The same value without a TTL: never taken over. */
        free(testsrv_cmd(&tu_srv, pat[i][0], key));
        free(testsrv_cmd(&tu_srv, "PERSIST %s", key));
        assert_int_equal(relock_acquire(c, key, 5000, 0, &l), RELOCK_EFOREIGN);
        free(testsrv_cmd(&tu_srv, "DEL %s", key));
    }
    /* A key of another type. */
    char key[64];
    snprintf(key, sizeof key, "coexist-%s-hash", mode);
    free(testsrv_cmd(&tu_srv, "HSET %s owner someone", key));
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, key, 5000, 0, &l);
    if (st != RELOCK_EFOREIGN)
        fail_msg("%s, a hash: status %d (%s)", mode, (int)st, relock_client_error(c)->message);
    assert_non_null(strstr(relock_client_error(c)->message, "holds a hash, not a lock"));
    assert_int_equal(relock_lock_adopt(c, key, "1700000000", 1, 5000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_EFOREIGN);
    assert_non_null(strstr(relock_client_error(c)->message, "holds a hash, not a lock"));
    assert_int_equal(relock_extend(l, 5000), RELOCK_EFOREIGN);
    assert_non_null(strstr(relock_client_error(c)->message, "holds a hash, not a lock"));
    relock_lock_free(l);
    char *type = testsrv_cmd(&tu_srv, "TYPE %s", key);
    assert_string_equal(type, "hash"); /* untouched */
    free(type);
    free(testsrv_cmd(&tu_srv, "DEL %s", key));
    relock_client_free(c);
}

static void test_coexistence(void **state)
{
    (void)state;
    coexist("bridge");
    if (testsrv_mode_runs("modern"))
        coexist("modern");
}

int main(void)
{
    if (!testsrv_mode_runs("bridge")) {
        /* A real server before 2.6.0 (RELOCK_TEST_SERVER): the legacy half
         * of waiting, release notices and renewal. */
        testsrv_note_skip("bridge mode, which needs EVAL (2.6.0)");
        const struct CMUnitTest legacy_only[] = {
            cmocka_unit_test(test_release_wakes_waiter),
            cmocka_unit_test(test_legacy_expiry_wakes_waiter),
            cmocka_unit_test(test_keep),
        };
        return cmocka_run_group_tests(legacy_only, tu_setup_server, tu_teardown_server);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bridge_values),
        cmocka_unit_test(test_same_second_ownership),
        cmocka_unit_test(test_same_value_legacy_writer),
        cmocka_unit_test(test_getset_loser_write),
        cmocka_unit_test(test_classic_holder_after_break),
        cmocka_unit_test(test_legacy_holders),
        cmocka_unit_test(test_killed_bridge_holder),
        cmocka_unit_test(test_auto_per_personality),
        cmocka_unit_test(test_release_wakes_waiter),
        cmocka_unit_test(test_legacy_expiry_wakes_waiter),
        cmocka_unit_test(test_keep),
        cmocka_unit_test(test_adopted_guess_cannot_release),
        cmocka_unit_test(test_idle_connection_closed_by_server),
        cmocka_unit_test(test_value_suffix),
        cmocka_unit_test(test_offset0_late_in_second),
        cmocka_unit_test(test_owner_info),
        cmocka_unit_test(test_owner_set),
        cmocka_unit_test(test_path_after_reconnect),
        cmocka_unit_test(test_coexistence),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
