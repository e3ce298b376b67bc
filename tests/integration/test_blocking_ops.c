/*
 * The blocking lock calls as whole operations of the operation core
 * (src/core/pollloop.c, relock__lock_op()), attacked where a blocking
 * program meets them and the asynchronous suites do not: a lock handle
 * that an acquire's operation frees when it fails, locks adopted on one
 * server and on a quorum, handles freed after failed calls, the events of
 * each call, and the cancel flag.  Against real redis-servers: one, and a
 * quorum of three.  Run it under the sanitizer build too (the handles'
 * lives are what it is about).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
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

#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

#define NQ 3

static testsrv one;    /* the one-server client's */
static testsrv qs[NQ]; /* the quorum's */

/* Events told to a client (relock_config_set_event_fn()), counted by kind. */
typedef struct counts {
    int n[8];
} counts;

static void count_event(const relock_event *ev, void *arg)
{
    counts *k = arg;
    if (ev->kind > 0 && ev->kind < 8)
        k->n[ev->kind]++;
}

/* A client of srvs[0..n) (a quorum when n > 1) in modern mode, with
 * further settings as name, value pairs (NULL-terminated, or NULL), its
 * events counted in k (NULL: none). */
static relock_client *client_of(const testsrv *srvs, int n, counts *k, const char *const *set)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char urls[NQ * 40] = "";
    for (int i = 0; i < n; i++) {
        char u[40];
        snprintf(u, sizeof u, "%sredis://127.0.0.1:%d", i ? "," : "", srvs[i].port);
        strcat(urls, u);
    }
    if (n > 1)
        assert_int_equal(relock_config_set(cfg, "servers", urls), RELOCK_OK);
    else
        assert_int_equal(relock_config_set_url(cfg, urls), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    for (int i = 0; set && set[i] && set[i + 1]; i += 2)
        if (relock_config_set(cfg, set[i], set[i + 1]) != RELOCK_OK)
            fail_msg("setting %s: %s", set[i], relock_config_error(cfg)->message);
    if (k)
        assert_int_equal(relock_config_set_event_fn(cfg, count_event, k), RELOCK_OK);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", c ? relock_client_error(c)->message : "out of memory");
    return c;
}

/* How many servers of srvs[0..n) hold key with value ("" : any value). */
static int holders(const testsrv *srvs, int n, const char *key, const char *value)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        char *v = testsrv_cmd(&srvs[i], "GET %s", key);
        if (v && (!*value ? strcmp(v, "(nil)") != 0 : strcmp(v, value) == 0))
            k++;
        free(v);
    }
    return k;
}

/* An acquire that fails frees the handle it made inside the operation
 * (the core's, for either entry): busy, a wait that ran out and a server
 * that cannot be reached, each followed by calls that work, on one server
 * and on a quorum.  Under the sanitizer build, any read of the freed
 * handle after the operation ended shows. */
static void failed_acquires(const testsrv *srvs, int n)
{
    const char *const fast[] = {"command_timeout_ms", "500", "connect_timeout_ms", "500", NULL};
    relock_client *h = client_of(srvs, n, NULL, fast);
    relock_client *w = client_of(srvs, n, NULL, fast);
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_try_acquire(h, "fa", 30000, &held), RELOCK_OK);
    assert_int_equal(holders(srvs, n, "fa", relock_lock_value(held)), n);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(relock_try_acquire(w, "fa", 30000, &l), RELOCK_BUSY);
        assert_null(l);
        assert_non_null(strstr(relock_client_error(w)->message, "lock fa is held"));
        assert_int_equal(relock_acquire(w, "fa", 30000, 150, &l), RELOCK_TIMEOUT);
        assert_null(l);
        assert_non_null(strstr(relock_client_error(w)->message, "still held after 150 ms"));
    }
    /* a free lock is won after the failures, and released */
    assert_int_equal(relock_try_acquire(w, "fa-free", 30000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    assert_int_equal(holders(srvs, n, "fa", ""), 0);
    relock_client_free(h);
    relock_client_free(w);
}

static void test_failed_acquires_one(void **state)
{
    (void)state;
    failed_acquires(&one, 1);
}

static void test_failed_acquires_quorum(void **state)
{
    (void)state;
    failed_acquires(qs, NQ);
}

/* Locks adopted (relock_lock_adopt()) carry no state of the core before
 * their first call: extend and release run on the client's runner, on
 * one server and on a quorum (whose calls run on the quorum's loop, not
 * on its first server's), and free cleanly; the released event is told
 * once, by the client that released. */
static void adopted(const testsrv *srvs, int n)
{
    counts ka = {{0}}, kb = {{0}};
    relock_client *a = client_of(srvs, n, &ka, NULL);
    relock_client *b = client_of(srvs, n, &kb, NULL);
    relock_lock *l = NULL, *ad = NULL;
    assert_int_equal(relock_try_acquire(a, "ad", 30000, &l), RELOCK_OK);
    assert_int_equal(ka.n[RELOCK_EVENT_ACQUIRED], 1);
    assert_int_equal(relock_lock_adopt(b, "ad", relock_lock_value(l), relock_lock_fence(l), 20000,
                                       &ad),
                     RELOCK_OK);
    assert_int_equal(relock_extend(ad, 0), RELOCK_OK);
    assert_int_equal(holders(srvs, n, "ad", relock_lock_value(l)), n);
    long long v = relock_lock_validity_ms(ad);
    if (v <= 0 || v > 20000)
        fail_msg("an adopted lock extended to 20 s: validity %lld ms", v);
    assert_int_equal(relock_release(ad), RELOCK_OK);
    assert_int_equal(holders(srvs, n, "ad", ""), 0);
    assert_int_equal(kb.n[RELOCK_EVENT_RELEASED], 1);
    assert_int_equal(kb.n[RELOCK_EVENT_ACQUIRED], 0);
    /* released: the handle is lost, and says so without a round trip */
    assert_int_equal(relock_release(ad), RELOCK_LOST);
    assert_int_equal(relock_extend(ad, 0), RELOCK_LOST);
    assert_non_null(strstr(relock_client_error(b)->message, "already lost"));
    relock_lock_free(ad);
    /* the holder's own handle finds it gone */
    assert_int_equal(relock_release(l), RELOCK_LOST);
    assert_int_equal(ka.n[RELOCK_EVENT_RELEASED], 0);
    relock_lock_free(l);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_adopted_one(void **state)
{
    (void)state;
    adopted(&one, 1);
}

static void test_adopted_quorum(void **state)
{
    (void)state;
    adopted(qs, NQ);
}

/* Handles freed after calls that failed on a server that stopped
 * answering (SIGSTOP: the command timeout) and after one that is gone
 * (connect refused): extend, release and acquire fail with the messages
 * the blocking API gave, nothing of the core stays with the handle, and
 * the client works on once the server is back. */
static void test_free_after_failures(void **state)
{
    (void)state;
    testsrv s;
    assert_int_equal(testsrv_start(&s, NULL), 0);
    const char *const fast[] = {"command_timeout_ms", "300", "connect_timeout_ms", "300", NULL};
    relock_client *c = client_of(&s, 1, NULL, fast);
    relock_lock *l = NULL, *m = NULL;
    assert_int_equal(relock_try_acquire(c, "ff", 30000, &l), RELOCK_OK);
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    relock_status st = relock_extend(l, 5000);
    if (st != RELOCK_EAMBIGUOUS && st != RELOCK_EIO)
        fail_msg("extend on a stopped server: %s", relock_status_name(st));
    if (relock_lock_validity_ms(l) > 5000)
        fail_msg("a failed extend to 5 s left %lld ms", relock_lock_validity_ms(l));
    st = relock_release(l);
    if (st != RELOCK_EAMBIGUOUS && st != RELOCK_EIO)
        fail_msg("release on a stopped server: %s", relock_status_name(st));
    assert_int_equal(relock_try_acquire(c, "ff2", 30000, &m), RELOCK_EIO);
    assert_non_null(strstr(relock_client_error(c)->message, "no reply within 300 ms"));
    assert_null(m);
    relock_lock_free(l);
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    assert_int_equal(relock_try_acquire(c, "ff3", 30000, &l), RELOCK_OK);
    int port = s.port;
    testsrv_stop(&s);
    assert_int_equal(relock_extend(l, 5000) != RELOCK_OK, 1);
    assert_int_equal(relock_release(l) != RELOCK_OK, 1);
    relock_lock_free(l);
    assert_int_equal(relock_try_acquire(c, "ff4", 30000, &m), RELOCK_EIO);
    char want[64];
    snprintf(want, sizeof want, "connect to 127.0.0.1:%d:", port);
    if (!strstr(relock_client_error(c)->message, want))
        fail_msg("acquire with the server gone: %s", relock_client_error(c)->message);
    relock_client_free(c);
}

/* relock_client_cancel_on()'s flag set while a waiting acquire subscribes
 * to the lock's release notices (the SUBSCRIBE's reply held back by the
 * proxy): the acquire ends with RELOCK_ECANCELED, nothing held, and the
 * client's next acquire, subscription and all, works. */
static volatile sig_atomic_t sub_flag;
static int sub_upstream;

static void on_usr1(int sig)
{
    (void)sig;
}

static void *cancel_when_subscribing(void *arg)
{
    (void)arg;
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &m, NULL);
    uint64_t end = tu_now_ms() + 20000;
    while (tu_now_ms() < end) {
        char *v = testsrv_cmd_port(sub_upstream, "CLIENT LIST");
        int seen = v && strstr(v, "cmd=subscribe");
        free(v);
        if (seen)
            break;
        tu_sleep_ms(5);
    }
    sub_flag = 1;
    kill(getpid(), SIGUSR1); /* the main thread's: this one blocks it */
    return NULL;
}

static void test_cancel_while_subscribing(void **state)
{
    (void)state;
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, one.port, "7", NULL), 0);
    const char *const slow[] = {"command_timeout_ms", "10000", NULL};
    relock_client *h = client_of(&one, 1, NULL, NULL);
    relock_client *w = client_of(&px, 1, NULL, slow);
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_try_acquire(h, "cs", 60000, &held), RELOCK_OK);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    sub_flag = 0;
    sub_upstream = one.port;
    assert_int_equal(relock_client_cancel_on(w, &sub_flag), RELOCK_OK);
    char *r = testsrv_cmd(&px, "RELOCK-PROXY FAULT delay-ms 3000");
    free(r);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_when_subscribing, NULL), 0);
    relock_status st = relock_acquire(w, "cs", 60000, 60000, &l);
    pthread_join(t, NULL);
    if (st != RELOCK_ECANCELED)
        fail_msg("an acquire cancelled while subscribing: %s: %s", relock_status_name(st),
                 relock_client_error(w)->message);
    assert_null(l);
    assert_int_equal(relock_client_cancel_on(w, NULL), RELOCK_OK);
    assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
    r = testsrv_cmd(&px, "RELOCK-PROXY FAULT off");
    free(r);
    assert_int_equal(holders(&one, 1, "cs", relock_lock_value(held)), 1);
    /* the next wait subscribes again and is woken by the release */
    assert_int_equal(relock_acquire(w, "cs", 60000, 200, &l), RELOCK_TIMEOUT);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    assert_int_equal(relock_acquire(w, "cs", 60000, 20000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(w);
    relock_client_free(h);
    testsrv_stop(&px);
}

/* Forks a child that extends and releases l on its parent's client c,
 * then takes and releases child_name: the child's exit status is the
 * first call that failed (1 extend, 2 release, 3 acquire, 4 its release),
 * 0 when none did.  Returns it. */
static int child_calls(relock_client *c, relock_lock *l, const char *child_name)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        relock_lock *m = NULL;
        int code = relock_extend(l, 20000) != RELOCK_OK                          ? 1
                   : relock_release(l) != RELOCK_OK                              ? 2
                   : relock_try_acquire(c, child_name, 30000, &m) != RELOCK_OK ? 3
                   : relock_release(m) != RELOCK_OK                              ? 4
                                                                                 : 0;
        _exit(code);
    }
    int status = tu_wait_child(pid, 30000);
    assert_true(status != -1 && WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* A forked child using its parent's client and lock (pollloop.c: the
 * child's copy of the loop is its own, on the parent's descriptors): the
 * child extends and releases the parent's lock and takes another; the
 * parent, after the child's exit, finds its lock released (RELOCK_LOST)
 * and works on.  mode: the client's. */
static void fork_child(const char *mode, const char *const *set, int legacy_leftover)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", one.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    for (int i = 0; set && set[i] && set[i + 1]; i += 2)
        assert_int_equal(relock_config_set(cfg, set[i], set[i + 1]), RELOCK_OK);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
    relock_config_free(cfg);
    relock_lock *l = NULL;
    if (legacy_leftover) {
        /* an expired classic value without TTL: taken over, a legacy
         * writer's sighting (the marker's write ends the acquire) */
        char *r = testsrv_cmd(&one, "SET fk 1000000000");
        free(r);
    }
    assert_int_equal(relock_try_acquire(c, "fk", 30000, &l), RELOCK_OK);
    int code = child_calls(c, l, "fk-child");
    if (code != 0)
        fail_msg("%s: the child's call %d on its parent's client failed", mode, code);
    assert_int_equal(holders(&one, 1, "fk", ""), 0);
    relock_status st = relock_release(l);
    if (st != RELOCK_LOST)
        fail_msg("%s%s: the parent's release of the lock its child released: %s: %s", mode,
                 legacy_leftover ? " (after a legacy leftover)" : "",
                 relock_status_name(st), relock_client_error(c)->message);
    relock_lock_free(l);
    st = relock_try_acquire(c, "fk-parent", 30000, &l);
    if (st != RELOCK_OK)
        fail_msg("%s: the parent's acquire after its child's calls: %s: %s", mode,
                 relock_status_name(st), relock_client_error(c)->message);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_fork_child_modern(void **state)
{
    (void)state;
    fork_child("modern", NULL, 0);
}

static void test_fork_child_bridge(void **state)
{
    (void)state;
    fork_child("bridge", NULL, 0);
    fork_child("bridge", NULL, 1);
}

/* A forked child's call that leaves a reply owed on the connection (the
 * legacy marker's write, after an attempt that met a live classic holder)
 * and exits: the reply arrives on the socket the parent shares.  The
 * parent's next acquire of a lock another client holds must still be
 * RELOCK_BUSY (not won on the child's "+OK", nor a crash on a reply
 * nobody asked for). */
static void test_fork_child_owed_reply(void **state)
{
    (void)state;
    relock_client *h = client_of(&one, 1, NULL, NULL);
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_try_acquire(h, "fo-held", 60000, &held), RELOCK_OK);
    char *r = testsrv_cmd(&one, "SET fo-classic %lld", (long long)time(NULL) + 600);
    free(r);
    const char *const unfenced[] = {"fencing", "false", NULL};
    for (int round = 0; round < 5; round++) {
        relock_client *c = client_of(&one, 1, NULL, unfenced);
        assert_int_equal(relock_try_acquire(c, "fo-warm", 60000, &l), RELOCK_OK);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            relock_lock *m = NULL;
            _exit(relock_try_acquire(c, "fo-classic", 60000, &m) == RELOCK_BUSY ? 0 : 1);
        }
        int status = tu_wait_child(pid, 30000);
        assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        relock_status st = relock_try_acquire(c, "fo-held", 60000, &l);
        if (st != RELOCK_BUSY)
            fail_msg("round %d: a lock held by another client, after a child's call: %s (%s)",
                     round, relock_status_name(st), relock_client_error(c)->message);
        relock_client_free(c);
    }
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    relock_client_free(h);
}

/* An extend that fails before its machine runs (its connection, closed by
 * the server, is opened again to a server that stopped: connected, but its
 * setup unanswered) leaves no more validity than its lease counted from
 * the extend's start, as relock_extend() promises, not from its end. */
static void test_failed_extend_counts_from_start(void **state)
{
    (void)state;
    testsrv s;
    assert_int_equal(testsrv_start(&s, NULL), 0);
    const char *const set[] = {"command_timeout_ms", "1500", "connect_timeout_ms", "1500", NULL};
    relock_client *c = client_of(&s, 1, NULL, set);
    relock_lock *l = NULL;
    assert_int_equal(relock_try_acquire(c, "fx", 60000, &l), RELOCK_OK);
    char *r = testsrv_cmd(&s, "CLIENT KILL TYPE normal SKIPME yes");
    free(r);
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    tu_sleep_ms(300); /* past the idle check: the closed connection is seen */
    enum { TTL = 3000 };
    uint64_t t0 = tu_now_ms();
    relock_status st = relock_extend(l, TTL);
    long long left = relock_lock_validity_ms(l);
    uint64_t took = tu_now_ms() - t0;
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    if (st == RELOCK_OK)
        fail_msg("an extend on a stopped server succeeded");
    /* From the start: about TTL - took (less the drift allowance); 500 ms
     * of slack for a loaded machine's scheduling between the clock reads
     * and the call's, far below the 1500 ms a bound from the end adds. */
    if (left > (long long)TTL - (long long)took + 500)
        fail_msg("an extend to %d ms that failed after %llu ms (%s: %s) left %lld ms of validity, "
                 "more than its lease from its start",
                 TTL, (unsigned long long)took, relock_status_name(st),
                 relock_client_error(c)->message, left);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&s);
}

static void on_lost_none(relock_lock *l, relock_status why, void *arg)
{
    (void)l, (void)why, (void)arg;
}

/* Each blocking call tells its event once: acquired for each acquire won
 * (none for busy, a timeout, or one undone for durability), released for
 * each release that deleted the lock (none for RELOCK_LOST), also for a
 * kept lock; relock_client_replicas_acked() says -1 after calls that sent
 * no WAIT, and the count after one that did. */
static void test_events_and_acks(void **state)
{
    (void)state;
    counts k = {{0}}, kd = {{0}};
    relock_client *c = client_of(&one, 1, &k, NULL);
    relock_client *o = client_of(&one, 1, NULL, NULL);
    relock_lock *l = NULL, *m = NULL;
    assert_int_equal(relock_try_acquire(c, "ev", 30000, &l), RELOCK_OK);
    assert_int_equal(relock_client_replicas_acked(c), -1);
    assert_int_equal(relock_extend(l, 30000), RELOCK_OK);
    assert_int_equal(relock_client_replicas_acked(c), -1);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_LOST);
    relock_lock_free(l);
    assert_int_equal(relock_try_acquire(o, "ev", 30000, &m), RELOCK_OK);
    assert_int_equal(relock_try_acquire(c, "ev", 30000, &l), RELOCK_BUSY);
    assert_int_equal(relock_acquire(c, "ev", 30000, 100, &l), RELOCK_TIMEOUT);
    assert_int_equal(relock_release(m), RELOCK_OK);
    relock_lock_free(m);
    assert_int_equal(k.n[RELOCK_EVENT_ACQUIRED], 1);
    assert_int_equal(k.n[RELOCK_EVENT_RELEASED], 1);
    /* kept, then released: one of each more, and renewals told apart */
    assert_int_equal(relock_try_acquire(c, "ev", 3000, &l), RELOCK_OK);
    assert_int_equal(relock_keep(l, on_lost_none, NULL), RELOCK_OK);
    tu_sleep_ms(1200); /* a renewal or so (every third of the lease) */
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    assert_int_equal(k.n[RELOCK_EVENT_ACQUIRED], 2);
    assert_int_equal(k.n[RELOCK_EVENT_RELEASED], 2);
    assert_int_equal(k.n[RELOCK_EVENT_LOST], 0);
    /* durability with no replica: the acquire is undone, nothing told */
    const char *const durable[] = {"durability.replicas", "1", "durability.timeout_ms", "100",
                                   NULL};
    relock_client *d = client_of(&one, 1, &kd, durable);
    assert_int_equal(relock_try_acquire(d, "evd", 30000, &l), RELOCK_EDURABILITY);
    assert_null(l);
    assert_int_equal(relock_client_replicas_acked(d), 0);
    assert_int_equal(holders(&one, 1, "evd", ""), 0);
    assert_int_equal(relock_try_acquire(o, "evd", 30000, &m), RELOCK_OK);
    assert_int_equal(relock_try_acquire(d, "evd", 30000, &l), RELOCK_BUSY);
    assert_int_equal(relock_client_replicas_acked(d), -1);
    assert_int_equal(kd.n[RELOCK_EVENT_ACQUIRED], 0);
    assert_int_equal(relock_release(m), RELOCK_OK);
    relock_lock_free(m);
    relock_client_free(d);
    relock_client_free(o);
    relock_client_free(c);
}

/* A quorum client's child: the same as fork_child() over the quorum's
 * loop (whose rounds may leave replies owed by the slower servers). */
static void test_fork_child_quorum(void **state)
{
    (void)state;
    relock_client *c = client_of(qs, NQ, NULL, NULL);
    relock_lock *l = NULL;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(relock_try_acquire(c, "fq", 30000, &l), RELOCK_OK);
        int code = child_calls(c, l, "fq-child");
        if (code != 0)
            fail_msg("round %d: the child's call %d on its parent's quorum client failed", round,
                     code);
        assert_int_equal(holders(qs, NQ, "fq", ""), 0);
        relock_status st = relock_release(l);
        if (st != RELOCK_LOST)
            fail_msg("round %d: the parent's release of the lock its child released: %s: %s", round,
                     relock_status_name(st), relock_client_error(c)->message);
        relock_lock_free(l);
    }
    relock_client_free(c);
}

/* The cancel flag on a quorum client's waiting acquire (sleeping or
 * subscribed on one of the servers): RELOCK_ECANCELED, nothing held on any
 * server, and the client's next acquire is won. */
static volatile sig_atomic_t q_flag;

static void *set_q_flag_later(void *arg)
{
    (void)arg;
    tu_sleep_ms(400);
    q_flag = 1;
    return NULL;
}

static void test_cancel_quorum_wait(void **state)
{
    (void)state;
    relock_client *h = client_of(qs, NQ, NULL, NULL);
    relock_client *w = client_of(qs, NQ, NULL, NULL);
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_try_acquire(h, "cq", 60000, &held), RELOCK_OK);
    q_flag = 0;
    assert_int_equal(relock_client_cancel_on(w, &q_flag), RELOCK_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, set_q_flag_later, NULL), 0);
    relock_status st = relock_acquire(w, "cq", 60000, 60000, &l);
    pthread_join(t, NULL);
    if (st != RELOCK_ECANCELED)
        fail_msg("a quorum's waiting acquire, cancelled: %s: %s", relock_status_name(st),
                 relock_client_error(w)->message);
    assert_null(l);
    assert_int_equal(relock_client_cancel_on(w, NULL), RELOCK_OK);
    assert_int_equal(holders(qs, NQ, "cq", relock_lock_value(held)), NQ);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    assert_int_equal(relock_acquire(w, "cq", 60000, 10000, &l), RELOCK_OK);
    assert_int_equal(holders(qs, NQ, "cq", relock_lock_value(l)), NQ);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(w);
    relock_client_free(h);
}

static int setup(void **state)
{
    (void)state;
    if (testsrv_start(&one, NULL) != 0)
        return -1;
    for (int i = 0; i < NQ; i++)
        if (testsrv_start(&qs[i], NULL) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&one);
    for (int i = 0; i < NQ; i++)
        testsrv_stop(&qs[i]);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_acquires_one),
        cmocka_unit_test(test_failed_acquires_quorum),
        cmocka_unit_test(test_adopted_one),
        cmocka_unit_test(test_adopted_quorum),
        cmocka_unit_test(test_free_after_failures),
        cmocka_unit_test(test_cancel_while_subscribing),
        cmocka_unit_test(test_cancel_quorum_wait),
        cmocka_unit_test(test_fork_child_modern),
        cmocka_unit_test(test_fork_child_bridge),
        cmocka_unit_test(test_fork_child_owed_reply),
        cmocka_unit_test(test_fork_child_quorum),
        cmocka_unit_test(test_failed_extend_counts_from_start),
        cmocka_unit_test(test_events_and_acks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
