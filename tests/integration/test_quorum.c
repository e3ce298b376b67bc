/*
 * Quorum locks over five independent redis-servers (design.md §9.1): a
 * majority suffices, a minority fails clearly and leaves nothing behind,
 * and fencing tokens keep increasing whichever majorities are won.
 *
 * The scenarios the blocking and the asynchronous clients share are
 * written once, on both.h: it_quorum runs them through the blocking API,
 * it_quorum_async through the asynchronous API on libevent (the program's
 * argument).  The scenarios of the blocking client alone run in it_quorum
 * only; those of the asynchronous client alone (many in flight, renewal,
 * cancellation, freeing, a paused majority) are in test_async_quorum.c.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "both.h"
#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

#define N 5
static testsrv srv[N];
/* The entry point the shared scenarios run through. */
static both_entry entry;

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (testsrv_start(&srv[i], NULL) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        if (srv[i].pid)
            kill(srv[i].pid, SIGCONT);
        testsrv_stop(&srv[i]);
    }
    return 0;
}

/* A configuration file of all N servers as users write it, with the
 * given command timeout, further settings for each server and further
 * settings of the client (each may be ""), written to path. */
static void quorum_file(char path[64], long timeout_ms, const char *per_server,
                        const char *global)
{
    snprintf(path, 64, "/tmp/relock-quorum-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "relock = {\n  mode = \"modern\";\n  command_timeout_ms = %ld;\n  %s\n  servers = (",
            timeout_ms, global);
    for (int i = 0; i < N; i++)
        fprintf(f, "%s{ host = \"127.0.0.1\"; port = %d; %s }", i ? ", " : "", srv[i].port,
                per_server);
    fprintf(f, ");\n};\n");
    fclose(f);
}

/* A blocking client of all N servers, from such a file. */
static relock_client *quorum_client_set(long timeout_ms, const char *per_server,
                                        const char *global)
{
    char path[64];
    quorum_file(path, timeout_ms, per_server, global);
    relock_client *c = NULL;
    relock_status st = relock_connect_file(path, &c);
    unlink(path);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

/* The same through the entry point under test. */
static both_client *both_client_set(long timeout_ms, const char *per_server, const char *global)
{
    char path[64];
    quorum_file(path, timeout_ms, per_server, global);
    both_client *c = NULL;
    relock_status st = both_connect_file(entry, path, &c);
    unlink(path);
    if (st != RELOCK_OK)
        fail_msg("connect (%s): %s", both_entry_name(entry), both_error(c));
    return c;
}

static both_client *both_quorum(void)
{
    return both_client_set(500, "", "");
}

static relock_client *quorum_client_with(long timeout_ms, const char *per_server)
{
    return quorum_client_set(timeout_ms, per_server, "");
}

static relock_client *quorum_client_timeout(long timeout_ms)
{
    return quorum_client_with(timeout_ms, "");
}

static relock_client *quorum_client(void)
{
    return quorum_client_timeout(500);
}

static int holders(const char *key, const char *value)
{
    int n = 0;
    for (int i = 0; i < N; i++) {
        if (!srv[i].pid)
            continue;
        char *v = testsrv_cmd(&srv[i], "GET %s", key);
        n += v && strcmp(v, value) == 0;
        free(v);
    }
    return n;
}

/* Waits (bounded) until exactly n servers hold key with value: a request
 * returns once a majority has answered, the others follow shortly (on
 * c's loop, for the asynchronous entry; c may be NULL for a blocking
 * client). */
static int holders_become_on(both_client *c, const char *key, const char *value, int n)
{
    for (int tries = 0; tries < 250; tries++) {
        if (holders(key, value) == n)
            return 1;
        if (c)
            both_idle(c, 20);
        else
            tu_sleep_ms(20);
    }
    return 0;
}

static int holders_become(const char *key, const char *value, int n)
{
    return holders_become_on(NULL, key, value, n);
}

/* Both entry points: acquire, a busy try, extend and release on all five
 * servers, and a waiter that gets the lock once the holder's lease ends. */
static void test_all_up(void **state)
{
    (void)state;
    both_client *a = both_quorum(), *b = both_quorum();
    assert_int_equal(both_mode(a), RELOCK_MODE_MODERN);
    assert_non_null(strstr(both_mode_reason(a), "quorum over 5 servers"));
    relock_lock *l = NULL, *lb = NULL;
    assert_int_equal(both_acquire(a, "q", 5000, 0, &l), RELOCK_OK);
    char value[64];
    snprintf(value, sizeof value, "%s", relock_lock_value(l));
    assert_true(holders("q", value) >= N / 2 + 1);
    assert_true(holders_become_on(a, "q", value, N));
    assert_true(relock_lock_fence(l) > 0);
    assert_true(relock_lock_validity_ms(l) > 4000);
    assert_int_equal(both_try_acquire(b, "q", 5000, &lb), RELOCK_BUSY);
    assert_null(lb);
    assert_true(holders_become_on(a, "q", value, N)); /* the loser left ours alone */
    assert_int_equal(both_extend(a, l, 20000), RELOCK_OK);
    char *pttl = testsrv_cmd(&srv[0], "PTTL q");
    assert_non_null(pttl);
    assert_true(atoll(pttl) > 10000);
    free(pttl);
    assert_int_equal(both_release(a, l), RELOCK_OK);
    assert_true(holders("q", value) <= N / 2);
    assert_true(holders_become_on(a, "q", value, 0));
    assert_int_equal(both_release(a, l), RELOCK_LOST);
    relock_lock_free(l);
    /* A waiter gets it once the holder's lease ends. */
    assert_int_equal(both_acquire(a, "q", 5000, 0, &l), RELOCK_OK);
    relock_lock_free(l);
    assert_int_equal(both_acquire(b, "q", 5000, 10000, &lb), RELOCK_OK); /* after expiry */
    assert_int_equal(both_release(b, lb), RELOCK_OK);
    relock_lock_free(lb);
    both_free(a);
    both_free(b);
}

/* Waits until no server holds a late-applied copy of name (a paused
 * server runs our queued request when it resumes; its TTL clears it). */
static void wait_clear_on(both_client *c, const char *name)
{
    for (int tries = 0; tries < 300; tries++) {
        int any = 0;
        for (int i = 0; i < N; i++) {
            char *v = testsrv_cmd(&srv[i], "EXISTS %s", name);
            any |= v && strcmp(v, "1") == 0;
            free(v);
        }
        if (!any)
            return;
        if (c)
            both_idle(c, 20);
        else
            tu_sleep_ms(20);
    }
    fail_msg("%s still held somewhere", name);
}

static void wait_clear(const char *name)
{
    wait_clear_on(NULL, name);
}

/* Both entry points: two of five servers stopped, a majority of three
 * remains; three stopped (refused connections), each acquire fails with a
 * clear status, soon, and leaves no partial hold on the two that remain. */
static void test_minority_down(void **state)
{
    (void)state;
    both_client *a = both_quorum();
    /* Two of five killed: a majority of three remains. */
    testsrv_stop(&srv[3]);
    testsrv_stop(&srv[4]);
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(a, "qm", 5000, 0, &l), RELOCK_OK);
    assert_true(holders_become_on(a, "qm", relock_lock_value(l), 3));
    assert_int_equal(both_extend(a, l, 5000), RELOCK_OK);
    assert_int_equal(both_release(a, l), RELOCK_OK);
    relock_lock_free(l);
    /* Three killed: it fails with a clear status, and leaves no partial
     * hold on the two that remain; again on the next attempts. */
    testsrv_stop(&srv[2]);
    for (int round = 0; round < 3; round++) {
        uint64_t t0 = tu_now_ms();
        assert_int_equal(both_acquire(a, "qm", 5000, 0, &l), RELOCK_EIO);
        uint64_t took = tu_now_ms() - t0;
        assert_null(l);
        if (!strstr(both_error(a), "only 2 of 5 servers") || !strstr(both_error(a), "majority"))
            fail_msg("round %d: message: %s", round, both_error(a));
        if (round == 0)
            print_message("%s\n", both_error(a));
        assert_true(took < 5000);
        wait_clear_on(a, "qm"); /* the clean-up follows each server's acquire */
    }
    both_free(a);
    for (int i = 2; i < N; i++)
        assert_int_equal(testsrv_start(&srv[i], NULL), 0);
}

/* An extend that finds the lock on a minority only reports it lost and
 * removes our value from that minority, which would otherwise keep it for
 * a whole ttl that no one can release. */
static void test_lost_extend_leaves_nothing(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "qx", 30000, 0, &l), RELOCK_OK);
    assert_true(holders_become("qx", relock_lock_value(l), N));
    /* Our value vanishes from three of five (a failover, an operator). */
    for (int i = 0; i < 3; i++)
        free(testsrv_cmd(&srv[i], "DEL %s", "qx"));
    assert_int_equal(relock_extend(l, 30000), RELOCK_LOST);
    if (!strstr(relock_client_error(a)->message, "lock lost: held on only"))
        fail_msg("message: %s", relock_client_error(a)->message);
    wait_clear("qx");
    relock_lock_free(l);
    relock_client_free(a);
}

static void test_fence_across_majorities(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    /* One server's counter far ahead of the others. */
    char *r = testsrv_cmd(&srv[0], "SET %s 1000", "{qf} relock:fence");
    free(r);
    long long last = 0;
    for (int round = 0; round < 6; round++) {
        /* Two servers paused: the round's majority is the other three. */
        int p1 = round % N, p2 = (round + 1) % N;
        kill(srv[p1].pid, SIGSTOP);
        kill(srv[p2].pid, SIGSTOP);
        relock_lock *l = NULL;
        relock_status st = relock_acquire(a, "qf", 1000, 0, &l);
        kill(srv[p1].pid, SIGCONT);
        kill(srv[p2].pid, SIGCONT);
        if (st != RELOCK_OK)
            fail_msg("round %d: %s", round, relock_client_error(a)->message);
        if (relock_lock_fence(l) <= last)
            fail_msg("round %d (servers %d and %d paused): fence %lld after %lld", round, p1, p2,
                     relock_lock_fence(l), last);
        last = relock_lock_fence(l);
        relock_release(l);
        relock_lock_free(l);
        wait_clear("qf");
    }
    assert_true(last > 1000); /* the far-ahead counter was reached */
    relock_client_free(a);
}

/* One server paused (SIGSTOP): acquire, extend and release return once a
 * majority of the others has answered instead of waiting out the paused
 * server's timeout; resumed, it runs the requests it was sent in order and
 * ends up holding nothing, and the client goes on using it. */
static void test_paused_server_not_waited_for(void **state)
{
    (void)state;
    /* Per-server timeout: min(command timeout, TTL / 10) = 6 s. */
    relock_client *a = quorum_client_timeout(10000);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "qp", 60000, 0, &l), RELOCK_OK); /* connects all */
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    kill(srv[4].pid, SIGSTOP);
    static const char *const what[] = {"acquire", "extend", "release"};
    uint64_t took[3];
    relock_status st[3];
    uint64_t t0 = tu_now_ms();
    st[0] = relock_acquire(a, "qp", 60000, 0, &l);
    took[0] = tu_now_ms() - t0;
    t0 = tu_now_ms();
    st[1] = st[0] == RELOCK_OK ? relock_extend(l, 60000) : st[0];
    took[1] = tu_now_ms() - t0;
    t0 = tu_now_ms();
    st[2] = st[0] == RELOCK_OK ? relock_release(l) : st[0];
    took[2] = tu_now_ms() - t0;
    kill(srv[4].pid, SIGCONT);
    for (int i = 0; i < 3; i++) {
        if (st[i] != RELOCK_OK)
            fail_msg("%s with one server paused: %s", what[i], relock_client_error(a)->message);
        /* Waiting for the paused server would take its whole 6 s. */
        if (took[i] >= 3000)
            fail_msg("%s waited %llu ms for the paused server", what[i],
                     (unsigned long long)took[i]);
    }
    /* Resumed, it ran acquire, extend and release in turn. */
    char *v = NULL;
    for (int tries = 0; tries < 250; tries++) {
        free(v);
        v = testsrv_cmd(&srv[4], "EXISTS qp");
        if (v && strcmp(v, "0") == 0)
            break;
        tu_sleep_ms(20);
    }
    assert_non_null(v);
    assert_string_equal(v, "0");
    free(v);
    relock_lock_free(l);
    /* The client reads the replies it was owed and goes on. */
    assert_int_equal(relock_acquire(a, "qp", 60000, 0, &l), RELOCK_OK);
    assert_true(holders_become("qp", relock_lock_value(l), N));
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(a);
}

/* Scripts flushed from every server's cache behind the client's back:
 * each server answers NOSCRIPT and is sent the script's text at once. */
static void test_script_cache_flushed(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "qs", 5000, 0, &l), RELOCK_OK); /* connects all */
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    for (int i = 0; i < N; i++) {
        char *r = testsrv_cmd(&srv[i], "SCRIPT FLUSH");
        assert_non_null(r);
        assert_string_equal(r, "OK");
        free(r);
    }
    assert_int_equal(relock_acquire(a, "qs", 5000, 0, &l), RELOCK_OK);
    assert_true(holders("qs", relock_lock_value(l)) >= N / 2 + 1);
    assert_true(relock_lock_fence(l) > 0);
    assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_true(holders_become("qs", relock_lock_value(l), 0));
    relock_lock_free(l);
    relock_client_free(a);
}

/* Error replies say nothing about the lock: three servers turned into
 * read-only replicas make extend fail with RELOCK_EIO and their error, not
 * RELOCK_LOST, with the validity at most the shorter lease asked for; once
 * they take writes again the lock is still ours. */
static void test_error_replies_are_not_answers(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "qe", 30000, 0, &l), RELOCK_OK);
    int nowhere = testsrv_free_port();
    for (int i = 0; i < 3; i++)
        free(testsrv_cmd(&srv[i], "REPLICAOF 127.0.0.1 %d", nowhere));
    /* To a shorter lease: a failed extend leaves no more validity than
     * the lease it asked for (docs/api.md, Validity). */
    relock_status st = relock_extend(l, 10000);
    const char *msg = relock_client_error(a)->message;
    int readonly = strstr(msg, "READONLY") != NULL;
    long long left = relock_lock_validity_ms(l);
    for (int i = 0; i < 3; i++)
        free(testsrv_cmd(&srv[i], "REPLICAOF NO ONE"));
    if (st != RELOCK_EIO || !readonly)
        fail_msg("extend against read-only servers: %s: %s", relock_status_name(st), msg);
    if (left > 10000)
        fail_msg("a failed extend to 10000 ms left a validity of %lld ms", left);
    assert_int_equal(relock_extend(l, 30000), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(a);
}

/* Connections the servers closed while idle (their `timeout`) are noticed
 * before use and reopened: the release after the idle time succeeds. */
static void test_idle_connections_reopened(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    relock_lock *l = NULL;
    for (int i = 0; i < N; i++)
        free(testsrv_cmd(&srv[i], "CONFIG SET timeout 1"));
    relock_status st = relock_acquire(a, "qi", 30000, 0, &l);
    if (st == RELOCK_OK) {
        /* The servers close idle clients after 1-2 s: wait until each has
         * no client but the query's own (bounded), rather than a fixed
         * time that may be too short on a loaded machine. */
        uint64_t end = tu_now_ms() + 8000;
        for (int i = 0; i < N && tu_now_ms() < end;) {
            char *info = testsrv_cmd(&srv[i], "INFO clients");
            int alone = info && strstr(info, "connected_clients:1\r\n");
            free(info);
            if (alone)
                i++;
            else
                tu_sleep_ms(50);
        }
        st = relock_release(l);
    }
    for (int i = 0; i < N; i++)
        free(testsrv_cmd(&srv[i], "CONFIG SET timeout 0"));
    if (st != RELOCK_OK)
        fail_msg("after idling: %s: %s", relock_status_name(st),
                 relock_client_error(a)->message);
    relock_lock_free(l);
    relock_client_free(a);
}

static long long connections_received(const testsrv *s)
{
    char *info = testsrv_cmd(s, "INFO stats");
    const char *p = info ? strstr(info, "total_connections_received:") : NULL;
    long long n = p ? atoll(p + strlen("total_connections_received:")) : -1;
    free(info);
    return n;
}

/* relock_keep() over a quorum: the renewals run on the keeper's thread
 * with its own client (and so its own poll loop over the operation core),
 * and keep the lock past two and a half of its leases: our value is still
 * on a majority, and stopping finds it never lost. */
static void test_kept_over_quorum(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "qk", 2000, 0, &l), RELOCK_OK);
    assert_int_equal(relock_keep(l, NULL, NULL), RELOCK_OK);
    tu_sleep_ms(5000);
    int held = holders("qk", relock_lock_value(l));
    relock_status st = relock_keep_stop(l);
    if (st != RELOCK_OK || held < N / 2 + 1)
        fail_msg("kept 5 s with a 2 s lease: %s, held on %d of %d servers: %s",
                 relock_status_name(st), held, N, relock_client_error(a)->message);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(a);
}

/* A server paused for many requests is left alone after a while rather
 * than sent a new connection per request, and a busy lock is reported
 * busy without waiting for it. */
static void test_paused_server_left_alone(void **state)
{
    (void)state;
    relock_client *a = quorum_client_timeout(10000), *b = quorum_client_timeout(10000);
    relock_lock *l = NULL, *held = NULL;
    assert_int_equal(relock_acquire(b, "qb", 60000, 0, &held), RELOCK_OK);
    long long before = connections_received(&srv[4]);
    assert_true(before > 0);
    kill(srv[4].pid, SIGSTOP);
    int failed = 0;
    uint64_t slowest = 0;
    char why[300] = "";
    for (int round = 0; round < 30 && !failed; round++) {
        uint64_t t0 = tu_now_ms();
        relock_status st = relock_acquire(a, "qc", 60000, 0, &l);
        if (st == RELOCK_OK) {
            st = relock_release(l);
            relock_lock_free(l);
        }
        if (st == RELOCK_OK)
            st = relock_try_acquire(a, "qb", 60000, &l) == RELOCK_BUSY ? RELOCK_OK : RELOCK_EIO;
        uint64_t took = tu_now_ms() - t0;
        slowest = took > slowest ? took : slowest;
        if (st != RELOCK_OK) {
            failed = 1;
            snprintf(why, sizeof why, "round %d: %s", round, relock_client_error(a)->message);
        }
    }
    kill(srv[4].pid, SIGCONT);
    if (failed)
        fail_msg("%s", why);
    /* Waiting for the paused server would take its whole 6 s. */
    if (slowest >= 3000)
        fail_msg("a round took %llu ms", (unsigned long long)slowest);
    /* Ours and this query's, not one per request (90 were sent). */
    long long after = connections_received(&srv[4]);
    if (after - before > 4)
        fail_msg("%lld new connections to the paused server", after - before);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    relock_client_free(a);
    relock_client_free(b);
}

/* Both entry points: a server that refuses the configured password is a
 * configuration error, with its answer, not "servers did not answer"
 * (these servers have no password, so they run the batch pipelined
 * behind the refused AUTH: what it wrote expires with its TTL). */
static void test_refused_password_is_config_error(void **state)
{
    (void)state;
    both_client *a = both_client_set(500, "password = \"nope\";", "");
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(a, "qa", 5000, 0, &l), RELOCK_ECONFIG);
    assert_null(l);
    const char *msg = both_error(a);
    if (!strstr(msg, "AUTH"))
        fail_msg("message: %s", msg);
    both_free(a);
}

/* A quorum set from C without a file: relock_config_set(cfg, "servers",
 * URLs separated by commas). */
static void test_servers_set_without_file(void **state)
{
    (void)state;
    char urls[N * 32] = "";
    for (int i = 0; i < N; i++) {
        char one[32];
        snprintf(one, sizeof one, "%sredis://127.0.0.1:%d", i ? ", " : "", srv[i].port);
        strcat(urls, one);
    }
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "servers", urls), RELOCK_OK);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
    relock_config_free(cfg);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "q-text", 5000, 0, &l), RELOCK_OK);
    char value[64];
    snprintf(value, sizeof value, "%s", relock_lock_value(l));
    assert_true(holders_become("q-text", value, N));
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_true(holders_become("q-text", value, 0));
    relock_lock_free(l);
    relock_client_free(c);
}

/* Both entry points: the first server paused, a waiter subscribes for
 * release notices on another one (each step bounded by its timeouts), and
 * the release (a blocking holder's, from another process) wakes it long
 * before its 10 s backoff would. */
static void test_waiter_notified_without_first_server(void **state)
{
    (void)state;
    both_client *a = both_client_set(
        500, "", "wait = { backoff_min_ms = 10000; backoff_max_ms = 10000; };");
    relock_client *b = quorum_client();
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_acquire(b, "qw", 30000, 0, &held), RELOCK_OK);
    kill(srv[0].pid, SIGSTOP);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        tu_sleep_ms(1500); /* while the parent waits */
        relock_status rs = relock_release(held);
        if (rs != RELOCK_OK)
            fprintf(stderr, "release: %s: %s\n", relock_status_name(rs),
                    relock_client_error(b)->message);
        _exit(rs == RELOCK_OK ? 0 : 1);
    }
    uint64_t t0 = tu_now_ms();
    relock_status st = both_acquire(a, "qw", 30000, 8000, &l);
    uint64_t took = tu_now_ms() - t0;
    kill(srv[0].pid, SIGCONT);
    int status = tu_wait_child(child, 10000);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the releasing child ended with status %d", status);
    if (st != RELOCK_OK)
        fail_msg("waiter: %s: %s", relock_status_name(st), both_error(a));
    /* The release came after 1.5 s; the backoff alone would be 8 s. */
    if (took >= 6000)
        fail_msg("the waiter took %llu ms: no notice reached it", (unsigned long long)took);
    assert_int_equal(both_release(a, l), RELOCK_OK);
    relock_lock_free(l);
    relock_lock_free(held);
    both_free(a);
    relock_client_free(b);
}

/* Both entry points: a release half-way through the servers when its
 * notice comes: the releasing client has deleted (and announced) on the
 * server the waiter listens on, and reaches the others 200 ms later.  The waiter's attempt
 * right after the notice wins that one server and finds the others still
 * held: a majority refuses, which alone would mean a holder and a whole
 * backoff (10 s here), but the notice says the holder is leaving, so it
 * looks again after a server's timeout. */
/* The channel a lock's release is announced on: its key and this suffix. */
#define NOTICE_SUFFIX " relock:released"

static void test_waiter_notified_half_way(void **state)
{
    (void)state;
    both_client *a = both_client_set(
        500, "", "wait = { backoff_min_ms = 10000; backoff_max_ms = 10000; };");
    relock_client *b = quorum_client();
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_acquire(b, "qh", 30000, 0, &held), RELOCK_OK);
    char value[64];
    snprintf(value, sizeof value, "%s", relock_lock_value(held));
    assert_true(holders_become("qh", value, N));
    kill(srv[0].pid, SIGSTOP); /* the waiter subscribes on srv[1] */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        static const char del[] =
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) "
            "if ARGV[2] ~= '' then redis.call('publish', ARGV[2], '1') end return 1 end return 0";
        /* Once the waiter listens (bounded), release on srv[1] alone. */
        int listening = 0;
        for (int tries = 0; tries < 500 && !listening; tries++) {
            char *n = testsrv_cmd(&srv[1], "PUBSUB NUMSUB %s", "qh" NOTICE_SUFFIX);
            listening = n && strstr(n, "1") && !strstr(n, " 0");
            free(n);
            if (!listening)
                tu_sleep_ms(20);
        }
        free(testsrv_cmd(&srv[1], "EVAL %s 1 %s %s %s", del, "qh", value,
                         "qh" NOTICE_SUFFIX));
        tu_sleep_ms(200);
        for (int i = 2; i < N; i++)
            free(testsrv_cmd(&srv[i], "EVAL %s 1 %s %s %s", del, "qh", value, ""));
        _exit(listening ? 0 : 1);
    }
    uint64_t t0 = tu_now_ms();
    relock_status st = both_acquire(a, "qh", 30000, 8000, &l);
    uint64_t took = tu_now_ms() - t0;
    kill(srv[0].pid, SIGCONT);
    int status = tu_wait_child(child, 20000);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the releasing child ended with status %d", status);
    if (st != RELOCK_OK)
        fail_msg("waiter: %s: %s", relock_status_name(st), both_error(a));
    /* The backoff alone would end the wait at its 8 s bound. */
    if (took >= 6000)
        fail_msg("the waiter took %llu ms: a notice for a release half-way through the "
                 "servers was followed by a whole backoff", (unsigned long long)took);
    assert_int_equal(both_release(a, l), RELOCK_OK);
    relock_lock_free(l);
    relock_lock_free(held);
    both_free(a);
    relock_client_free(b);
}

/* Both entry points: a quorum refuses the timestamp modes at once. */
static void test_refuses_timestamp_modes(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char path[64];
    snprintf(path, sizeof path, "/tmp/relock-quorum-XXXXXX");
    int fd = mkstemp(path);
    dprintf(fd, "relock = { mode = \"bridge\"; servers = ( { port = %d; }, { port = %d; } ); };\n",
            srv[0].port, srv[1].port);
    close(fd);
    assert_int_equal(relock_config_load_file(cfg, path), RELOCK_OK);
    unlink(path);
    both_client *c = NULL;
    assert_int_equal(both_connect(entry, cfg, &c), RELOCK_EUNSUPPORTED);
    assert_non_null(strstr(both_error(c), "modern"));
    both_free(c);
    relock_config_free(cfg);
}

/* A majority that answers late (the proxy holds each reply 400 ms, more
 * than the 300 ms each server is given): the acquire fails once its
 * round's deadline passes, with the late servers' SET NX PX already run.
 * Its token goes from every server it may have been set on, the late
 * ones too (their delete follows the acquire on the same connection),
 * rather than staying on a majority for the rest of its lease, a lock
 * that nobody holds.  A second attempt, on the same connections once
 * they caught up, cleans up the same way.  Both entry points. */
static void test_late_majority_leaves_nothing(void **state)
{
    (void)state;
    testsrv px[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(testsrv_start_proxy(&px[i], srv[2 + i].port, "7", NULL), 0);
        char *ok = testsrv_cmd(&px[i], "RELOCK-PROXY FAULT delay-ms 400");
        assert_non_null(ok);
        assert_string_equal(ok, "OK");
        free(ok);
    }
    char urls[N * 32] = "";
    for (int i = 0; i < N; i++) {
        char one[32];
        snprintf(one, sizeof one, "%sredis://127.0.0.1:%d", i ? ", " : "",
                 i < 2 ? srv[i].port : px[i - 2].port);
        strcat(urls, one);
    }
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "servers", urls), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "300"), RELOCK_OK);
    both_client *c = NULL;
    assert_int_equal(both_connect(entry, cfg, &c), RELOCK_OK);
    relock_config_free(cfg);
    for (int attempt = 0; attempt < 2; attempt++) {
        relock_lock *l = NULL;
        /* Per-server timeout: min(command timeout, TTL / 10) = 300 ms. */
        assert_int_equal(both_acquire(c, "q-late", 60000, 0, &l), RELOCK_EIO);
        assert_null(l);
        if (!strstr(both_error(c), "only 2 of 5 servers answered"))
            fail_msg("attempt %d: %s", attempt, both_error(c));
        /* Without the clean-up the late three keep it for 60 s. */
        int left = 0;
        for (int tries = 0; tries < 150; tries++) {
            left = 0;
            for (int i = 0; i < N; i++) {
                char *v = testsrv_cmd(&srv[i], "EXISTS %s", "q-late");
                left += v && strcmp(v, "1") == 0;
                free(v);
            }
            if (!left)
                break;
            both_idle(c, 20); /* the asynchronous entry sends its deletes from the loop */
        }
        if (left)
            fail_msg("attempt %d: %d of %d servers still hold the failed acquire's token",
                     attempt, left, N);
        /* The late replies arrive: the next attempt finds the connections
         * caught up, and uses them again. */
        both_idle(c, 1000);
    }
    both_free(c);
    for (int i = 0; i < 3; i++)
        testsrv_stop(&px[i]);
}

/* The scripts (EVALSHA and EVAL) server i has run since its statistics
 * were last reset: every command a quorum client sends it. */
static long scripts_run(int i)
{
    char *info = testsrv_cmd(&srv[i], "INFO commandstats");
    assert_non_null(info);
    long n = 0;
    const char *names[] = {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    for (int k = 0; k < 2; k++) {
        const char *at = strstr(info, names[k]);
        if (at)
            n += atol(at + strlen(names[k]));
    }
    free(info);
    return n;
}

/* A holder on a majority but not on every server (here written there
 * directly; in a fleet, a server restarted or unreachable when it
 * acquired): each attempt of a waiter wins the other servers and deletes
 * its token there again.  That delete released nothing anyone could have
 * held, so it must not announce a release: the notice would wake the
 * waiter itself (it listens on the first server, where it won), which
 * then tries again at once, at network speed, for as long as the holder
 * holds.  With the default backoff (at most 200 ms between attempts once
 * it has grown) a 3 s wait makes a few dozen attempts, two scripts each
 * on the first server.  Both entry points. */
/* relock_scan() on a quorum client walks the first server (relock.h; the
 * asynchronous scan refuses several servers): the blocking client's
 * alone. */
static void test_scan_walks_first_server(void **state)
{
    (void)state;
    static const char tok[] = "0123456789abcdef0123456789abcdef";
    for (int i = 0; i < N; i++)
        free(testsrv_cmd(&srv[i], "SET %s %s PX 60000", "scanq:a", tok));
    free(testsrv_cmd(&srv[0], "SET %s %s PX 60000", "scanq:b", tok));
    free(testsrv_cmd(&srv[1], "SET %s %s PX 60000", "scanq:c", tok));
    relock_client *c = quorum_client();
    relock_scan_result *r = NULL;
    relock_status st = relock_scan(c, "scanq:*", &r);
    if (st != RELOCK_OK)
        fail_msg("scan: %s: %s", relock_status_name(st), relock_client_error(c)->message);
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_MODERN), 2);
    relock_scan_result_free(r);
    relock_client_free(c);
    for (int i = 0; i < N; i++)
        free(testsrv_cmd(&srv[i], "DEL %s %s %s", "scanq:a", "scanq:b", "scanq:c"));
}

/* The ids of srv[0]'s normal clients but the asking one (CLIENT LIST's
 * "id=" of each line without "cmd=client"), at most max; their count. */
static int first_server_clients(long long *ids, int max)
{
    char *list = testsrv_cmd(&srv[0], "CLIENT LIST TYPE normal");
    assert_non_null(list);
    int n = 0;
    for (char *line = list; line && *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        const char *id = strstr(line, "id=");
        if (id && !strstr(line, "cmd=client")) {
            assert_true(n < max);
            ids[n++] = atoll(id + 3);
        }
        line = end ? end + 1 : NULL;
    }
    free(list);
    return n;
}

static int has_id(const long long *ids, int n, long long id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

/* A look at the lock through the quorum client: it must see our value. */
static void inspect_sees(relock_client *c, const char *name, const char *value)
{
    relock_inspect_info *info = NULL;
    relock_status st = relock_inspect(c, name, &info);
    if (st != RELOCK_OK)
        fail_msg("inspect: %s: %s", relock_status_name(st), relock_client_error(c)->message);
    assert_int_equal(relock_inspect_info_kind(info), RELOCK_VALUE_TOKEN);
    assert_string_equal(relock_inspect_info_value(info, NULL), value);
    assert_true(relock_inspect_info_pttl_ms(info) > 0);
    relock_inspect_info_free(info);
}

/* A quorum client's calls on its first server that are not the quorum's
 * rounds (inspect, the server it reports) run on a connection of their
 * own to that server, beside the fan-out's: opened at the first such
 * call, kept for the next, and opened afresh once the server closed it. */
static void test_first_server_calls_beside_the_fan(void **state)
{
    (void)state;
    relock_client *c = quorum_client();
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, "qfirst", 30000, 0, &l);
    if (st != RELOCK_OK)
        fail_msg("acquire: %s: %s", relock_status_name(st), relock_client_error(c)->message);
    long long fan[8], ids[8], again[8];
    /* The quorum's rounds alone: one connection to the first server. */
    assert_int_equal(first_server_clients(fan, 8), 1);

    inspect_sees(c, "qfirst", relock_lock_value(l));
    assert_int_equal(first_server_clients(ids, 8), 2);
    assert_true(has_id(ids, 2, fan[0]));
    long long runner = ids[0] == fan[0] ? ids[1] : ids[0];

    /* The server it reports is the first, on the same connection; and a
     * second look opens none. */
    relock_server_info *info = NULL;
    st = relock_client_server(c, &info);
    if (st != RELOCK_OK)
        fail_msg("server: %s: %s", relock_status_name(st), relock_client_error(c)->message);
    assert_int_equal(relock_server_info_port(info), srv[0].port);
    assert_string_equal(relock_server_info_host(info), "127.0.0.1");
    relock_server_info_free(info);
    inspect_sees(c, "qfirst", relock_lock_value(l));
    assert_int_equal(first_server_clients(again, 8), 2);
    assert_true(has_id(again, 2, fan[0]));
    assert_true(has_id(again, 2, runner));

    /* The server closes that connection (as its `timeout` would): the
     * next look, once the connection is idle long enough to be looked at
     * before use (200 ms, pollloop.c; a sleep longer than that, never too
     * short), opens another and works, and the fan-out's is left as it
     * was. */
    char *r = testsrv_cmd(&srv[0], "CLIENT KILL ID %lld", runner);
    assert_non_null(r);
    assert_string_equal(r, "1");
    free(r);
    tu_sleep_ms(300);
    inspect_sees(c, "qfirst", relock_lock_value(l));
    assert_int_equal(first_server_clients(again, 8), 2);
    assert_true(has_id(again, 2, fan[0]));
    assert_false(has_id(again, 2, runner));

    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_waiter_not_woken_by_its_undo(void **state)
{
    (void)state;
    both_client *w = both_quorum();
    for (int i = 1; i <= 3; i++)
        free(testsrv_cmd(&srv[i], "SET %s %s PX %d", "q-split", "someone-else", 20000));
    for (int i = 0; i < N; i++)
        free(testsrv_cmd(&srv[i], "CONFIG RESETSTAT"));
    relock_lock *l = NULL;
    uint64_t t0 = tu_now_ms();
    relock_status st = both_acquire(w, "q-split", 5000, 3000, &l);
    uint64_t took = tu_now_ms() - t0;
    long first = scripts_run(0), last = scripts_run(N - 1), held = scripts_run(1);
    assert_int_equal(st, RELOCK_TIMEOUT);
    assert_null(l);
    /* Nothing of the waiter's is left behind: at once after the blocking
     * call, which returns after its clean-up; the asynchronous one may end
     * with the clean-up's replies still owed, read as its loop runs. */
    assert_int_equal(holders("q-split", "someone-else"), 3);
    for (int tries = 0; entry == BOTH_ASYNC && tries < 100; tries++) {
        int left = 0;
        for (int i = 0; i < N; i += N - 1) {
            char *v = testsrv_cmd(&srv[i], "EXISTS %s", "q-split");
            left += v && strcmp(v, "0") != 0;
            free(v);
        }
        if (!left)
            break;
        both_idle(w, 20);
    }
    for (int i = 0; i < N; i += N - 1) {
        char *v = testsrv_cmd(&srv[i], "EXISTS %s", "q-split");
        assert_string_equal(v, "0");
        free(v);
    }
    if (first >= 100)
        fail_msg("the waiter sent %ld commands to the first server (%ld to the last, %ld to a "
                 "holder's) in its %llu ms wait: it woke itself",
                 first, last, held, (unsigned long long)took);
    for (int i = 1; i <= 3; i++)
        free(testsrv_cmd(&srv[i], "DEL %s", "q-split"));
    both_free(w);
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    /* A write to a connection the server reset ends in EPIPE, not the
     * process: SIGPIPE at its default action, as a program using the
     * asynchronous client may leave it. */
    signal(SIGPIPE, SIG_DFL);
    /* Through both entry points. */
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_all_up),
        cmocka_unit_test(test_minority_down),
        cmocka_unit_test(test_refused_password_is_config_error),
        cmocka_unit_test(test_waiter_notified_without_first_server),
        cmocka_unit_test(test_waiter_notified_half_way),
        cmocka_unit_test(test_refuses_timestamp_modes),
        cmocka_unit_test(test_late_majority_leaves_nothing),
        cmocka_unit_test(test_waiter_not_woken_by_its_undo),
    };
    /* The blocking client's alone. */
    const struct CMUnitTest blocking[] = {
        cmocka_unit_test(test_lost_extend_leaves_nothing),
        cmocka_unit_test(test_fence_across_majorities),
        cmocka_unit_test(test_paused_server_not_waited_for),
        cmocka_unit_test(test_script_cache_flushed),
        cmocka_unit_test(test_error_replies_are_not_answers),
        cmocka_unit_test(test_idle_connections_reopened),
        cmocka_unit_test(test_paused_server_left_alone),
        cmocka_unit_test(test_kept_over_quorum),
        cmocka_unit_test(test_servers_set_without_file),
        cmocka_unit_test(test_scan_walks_first_server),
        cmocka_unit_test(test_first_server_calls_beside_the_fan),
    };
    return both_run(entry, shared, sizeof shared / sizeof *shared, blocking,
                    sizeof blocking / sizeof *blocking, setup, teardown);
}
