/*
 * Durability (durability.*) against real replicas: a master and two
 * replicas.  With replicas = 2 an acquire and an extend succeed while both
 * replicas acknowledge; with one of them SIGSTOPped, an acquire fails
 * within about the timeout, reports that 1 replica acknowledged and leaves
 * no key behind, and an extend reports the same without deleting.
 * Settings a server or the configuration cannot honour are refused at
 * connect: WAITAOF on a server without it, WAIT before 3.0, several
 * servers.
 *
 * The scenarios the blocking and the asynchronous clients share are
 * written once, on both.h: it_durable runs them through the blocking API,
 * it_durable_async through the asynchronous API on libevent (the
 * program's argument); the blocking client's alone run in it_durable only.
 * The asynchronous client's own (owner records read between the write and
 * WAIT, cancellation) are in test_async_records.c.
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

#define TIMEOUT_MS 1000

static testsrv master, rep[2], proxy;
static int stopped = -1; /* the replica now SIGSTOPped, or -1 */
/* The entry point the shared scenarios run through. */
static both_entry entry;

static int setup(void **state)
{
    (void)state;
    if (testsrv_start(&master, NULL) != 0)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", master.port);
    const char *rargs[] = {"--replicaof", "127.0.0.1", port, NULL};
    for (int i = 0; i < 2; i++) {
        if (testsrv_start(&rep[i], rargs) != 0)
            return -1;
        if (testsrv_await(&rep[i], 15000, "master_link_status:up", "INFO %s",
                          "replication") != 0) {
            fprintf(stderr, "setup: replica %d did not sync within 15 s\n", i);
            return -1;
        }
    }
    if (testsrv_await(&master, 15000, "connected_slaves:2", "INFO %s",
                      "replication") != 0) {
        fprintf(stderr, "setup: the master did not see both replicas within 15 s\n");
        return -1;
    }
    return 0;
}

static void resume(void)
{
    if (stopped >= 0 && rep[stopped].pid > 0)
        kill(rep[stopped].pid, SIGCONT);
    stopped = -1;
}

static int teardown(void **state)
{
    (void)state;
    resume();
    testsrv_stop(&rep[0]);
    testsrv_stop(&rep[1]);
    testsrv_stop(&master);
    testsrv_stop(&proxy);
    return 0;
}

/* Connects to port in mode with settings (name, value pairs, NULL-ended);
 * returns the status, *out the client (also on failure). */
static relock_status connect_with(int port, const char *mode, const char *const *settings,
                                  relock_client **out)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    for (int i = 0; settings && settings[i] && settings[i + 1]; i += 2)
        if (relock_config_set(cfg, settings[i], settings[i + 1]) != RELOCK_OK)
            fail_msg("setting %s: %s", settings[i], relock_config_error(cfg)->message);
    relock_status st = relock_connect(cfg, out);
    relock_config_free(cfg);
    return st;
}

/* The modes and fencing settings each test runs with: WAIT follows the
 * write of every mode alike. */
static const struct {
    const char *mode, *fencing;
} cases[] = {{"modern", "true"}, {"modern", "false"}, {"legacy", "true"}, {"bridge", "true"}};
#define NCASES (sizeof cases / sizeof cases[0])

static relock_client *durable_client(const char *replicas, size_t k)
{
    const char *set[] = {"durability.replicas", replicas, "durability.timeout_ms", "1000",
                         "fencing", cases[k].fencing, NULL};
    relock_client *c = NULL;
    relock_status st = connect_with(master.port, cases[k].mode, set, &c);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", c ? relock_client_error(c)->message : "out of memory");
    return c;
}

/* The same through the entry point under test; the asynchronous entry
 * counts the timestamp modes in milliseconds, as its program did before
 * the two were merged. */
static both_client *both_durable(int port, const char *replicas, size_t k)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", cases[k].mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", replicas), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.timeout_ms", "1000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "fencing", cases[k].fencing), RELOCK_OK);
    if (entry == BOTH_ASYNC && strcmp(cases[k].mode, "modern") != 0)
        assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "ms"), RELOCK_OK);
    both_client *c = NULL;
    relock_status st = both_connect(entry, cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect (%s): %s", both_entry_name(entry), both_error(c));
    return c;
}

static int key_exists(const char *key)
{
    char *v = testsrv_cmd(&master, "EXISTS %s", key);
    int e = v && strcmp(v, "1") == 0;
    free(v);
    return e;
}

static void test_acked(void **state)
{
    (void)state;
    for (size_t k = 0; k < NCASES; k++) {
        relock_client *c = durable_client("2", k);
        assert_int_equal(relock_client_replicas_acked(c), -1);
        relock_lock *l = NULL;
        relock_status st = relock_try_acquire(c, "dur-ok", 5000, &l);
        if (st != RELOCK_OK)
            fail_msg("acquire: %s", relock_client_error(c)->message);
        assert_int_equal(relock_client_replicas_acked(c), 2);
        /* The replicas hold the lock, as acknowledged. */
        char *v = testsrv_cmd(&rep[0], "GET %s", "dur-ok");
        assert_string_equal(v, relock_lock_value(l));
        free(v);
        assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
        assert_int_equal(relock_client_replicas_acked(c), 2);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(c);
    }
}

/* Acknowledged only after the lease ran out (a replica paused longer than
 * the TTL, within a longer WAIT timeout): never OK, since another client
 * may hold the lock by then; the write is undone by compare-and-delete. */
static void test_acked_too_late(void **state)
{
    (void)state;
    const char *set[] = {"durability.replicas", "2", "durability.timeout_ms", "8000", NULL};
    relock_client *c = NULL;
    if (connect_with(master.port, "modern", set, &c) != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    assert_int_equal(kill(rep[1].pid, SIGSTOP), 0);
    stopped = 1;
    pid_t waker = fork();
    assert_true(waker >= 0);
    if (waker == 0) {
        tu_sleep_ms(1200); /* four leases of 300 ms */
        kill(rep[1].pid, SIGCONT);
        _exit(0);
    }
    relock_lock *l = NULL;
    relock_status st = relock_try_acquire(c, "dur-late", 300, &l);
    int ws;
    waitpid(waker, &ws, 0);
    stopped = -1;
    if (st != RELOCK_EDURABILITY)
        fail_msg("acquire acknowledged after its lease: %s (%s)", relock_strerror(st),
                 relock_client_error(c)->message);
    assert_null(l);
    assert_non_null(strstr(relock_client_error(c)->message, "after the lease's validity"));
    assert_int_equal(relock_client_replicas_acked(c), 2);
    assert_false(key_exists("dur-late"));
    relock_client_free(c);
}

static void test_replica_stopped(void **state)
{
    (void)state;
    for (size_t k = 0; k < NCASES; k++) {
        relock_client *c = durable_client("2", k);
        relock_lock *held = NULL;
        assert_int_equal(relock_try_acquire(c, "dur-held", 10000, &held), RELOCK_OK);
        long long before = relock_lock_validity_ms(held);

        assert_int_equal(kill(rep[1].pid, SIGSTOP), 0);
        stopped = 1;

        /* Acquire: fails after about the timeout, with the count, and
         * leaves nothing behind. */
        relock_lock *l = NULL;
        uint64_t t0 = tu_now_ms();
        relock_status st = relock_try_acquire(c, "dur-fail", 5000, &l);
        uint64_t took = tu_now_ms() - t0;
        if (st != RELOCK_EDURABILITY)
            fail_msg("%s: %s: %s", cases[k].mode, relock_status_name(st),
                     relock_client_error(c)->message);
        assert_null(l);
        assert_int_equal(relock_client_replicas_acked(c), 1);
        const relock_error *e = relock_client_error(c);
        assert_int_equal(e->status, RELOCK_EDURABILITY);
        if (!strstr(e->message, "1 of 2 replicas acknowledged within 1000 ms") ||
            !strstr(e->message, "deleted"))
            fail_msg("message: %s", e->message);
        assert_true(took >= TIMEOUT_MS - 50);
        assert_true(took < TIMEOUT_MS + 4000);
        assert_false(key_exists("dur-fail"));

        /* Extend: reported with the count, not deleted, and the validity
         * stays the one the replicas know of. */
        t0 = tu_now_ms();
        st = relock_extend(held, 20000);
        took = tu_now_ms() - t0;
        assert_int_equal(st, RELOCK_EDURABILITY);
        assert_int_equal(relock_client_replicas_acked(c), 1);
        if (!strstr(relock_client_error(c)->message, "1 of 2 replicas acknowledged"))
            fail_msg("message: %s", relock_client_error(c)->message);
        assert_true(took >= TIMEOUT_MS - 50);
        assert_true(took < TIMEOUT_MS + 4000);
        assert_true(key_exists("dur-held"));
        assert_true(relock_lock_validity_ms(held) <= before);
        assert_true(relock_lock_validity_ms(held) > 0);

        /* One replica is enough for a client asking for one. */
        relock_client *one = durable_client("1", k);
        assert_int_equal(relock_try_acquire(one, "dur-one", 5000, &l), RELOCK_OK);
        assert_int_equal(relock_client_replicas_acked(one), 1);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(one);

        resume();
        assert_int_equal(
            testsrv_await(&rep[1], 15000, "master_link_status:up", "INFO %s", "replication"), 0);
        /* Acknowledged again once the replica runs: the extend succeeds
         * (bounded retries while it catches up). */
        for (int i = 0; i < 20 && (st = relock_extend(held, 10000)) != RELOCK_OK; i++)
            assert_int_equal(st, RELOCK_EDURABILITY);
        assert_int_equal(st, RELOCK_OK);
        assert_int_equal(relock_client_replicas_acked(c), 2);
        assert_true(relock_lock_validity_ms(held) > 9000);
        assert_int_equal(relock_release(held), RELOCK_OK);
        relock_lock_free(held);
        relock_client_free(c);
    }
}

/* Fails the test with the stopped replica running again, so that the
 * tests after it start from a healthy set. */
#define FAIL_RESUMED(...)                                                                   \
    do {                                                                                    \
        resume();                                                                           \
        fail_msg(__VA_ARGS__);                                                              \
    } while (0)

/*
 * An unacknowledged extend to a shorter lease: the master holds the new,
 * shorter lease even though the replicas did not acknowledge it, so the
 * validity after RELOCK_EDURABILITY is at most the new lease counted from
 * the extend's start, never the longer one from before.  Another client
 * then acquires once the master's lease ends, and by then the first one
 * must no longer be told it holds the lock.
 */
static void test_replica_stopped_shorter(void **state)
{
    (void)state;
    for (size_t k = 0; k < NCASES; k++) {
        both_client *c = both_durable(master.port, "2", k);
        relock_lock *held = NULL;
        assert_int_equal(both_try_acquire(c, "dur-short", 10000, &held), RELOCK_OK);
        assert_int_equal(kill(rep[1].pid, SIGSTOP), 0);
        stopped = 1;
        relock_status st = both_extend(c, held, 1000);
        if (st != RELOCK_EDURABILITY)
            FAIL_RESUMED("%s: extend: %s (%s)", cases[k].mode, relock_status_name(st),
                     both_error(c));
        long long left = relock_lock_validity_ms(held);
        if (left > 1000)
            FAIL_RESUMED("%s fencing=%s: an unacknowledged extend to 1000 ms left a validity of "
                     "%lld ms",
                     cases[k].mode, cases[k].fencing, left);
        /* Another client (asking for no replica) acquires once the
         * master's lease ends: bounded by the longest way to it (the
         * timestamp modes' second and skew margin), polled. */
        both_client *other = both_durable(master.port, "0", k);
        relock_lock *l2 = NULL;
        uint64_t t0 = tu_now_ms();
        while ((st = both_try_acquire(other, "dur-short", 5000, &l2)) == RELOCK_BUSY &&
               tu_now_ms() - t0 < 12000)
            both_idle(other, 50);
        if (st != RELOCK_OK)
            FAIL_RESUMED("%s: the second client's acquire: %s (%s)", cases[k].mode,
                     relock_status_name(st), both_error(other));
        left = relock_lock_validity_ms(held);
        if (left > 0)
            FAIL_RESUMED("%s fencing=%s: two holders: another client acquired while the first is "
                     "told it holds %lld ms more",
                     cases[k].mode, cases[k].fencing, left);
        assert_int_equal(both_release(other, l2), RELOCK_OK);
        relock_lock_free(l2);
        both_free(other);
        relock_lock_free(held);
        both_free(c);
        resume();
        assert_int_equal(
            testsrv_await(&rep[1], 15000, "master_link_status:up", "INFO %s", "replication"), 0);
    }
}

/* The connection closed right after the write's reply: WAIT can only go
 * on that connection, and must not be counted on a new one.  The acquire
 * fails (the acknowledgement unknown, or the connection changed, by which
 * of the two the client notices first) and deletes its key; an extend to
 * a shorter lease, the same way, keeps at most the new lease. */
static void test_durable_reconnect(void **state)
{
    (void)state;
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, master.port, "7", NULL), 0);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", px.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1"), RELOCK_OK);
    both_client *c = NULL;
    assert_int_equal(both_connect(entry, cfg, &c), RELOCK_OK);
    relock_config_free(cfg);
    /* Ready, and a first lock of another name acknowledged through the
     * proxy: the client's one-time write of the watch marker (scan's
     * evidence) then lies behind it, and the fault below meets the
     * acquire's own first reply. */
    relock_lock *l = NULL;
    relock_status st = both_try_acquire(c, "adur-rc-warm", 5000, &l);
    if (st != RELOCK_OK)
        fail_msg("warm-up: %s", both_error(c));
    /* At least the one asked for (WAIT counts every replica that has
     * acknowledged by its reply, of the master's two). */
    assert_true(both_replicas_acked(c) >= 1);
    assert_int_equal(both_release(c, l), RELOCK_OK);
    relock_lock_free(l);
    l = NULL;
    char *v = testsrv_cmd(&px, "RELOCK-PROXY FAULT at-reply %s at-kind %s", "1", "close-after");
    assert_non_null(v);
    free(v);
    st = both_try_acquire(c, "adur-rc", 5000, &l);
    const char *msg = both_error(c);
    if ((st != RELOCK_EDURABILITY && st != RELOCK_EIO) ||
        !strstr(msg, "the lock was not kept (deleted)"))
        fail_msg("%s: %s: %s", both_entry_name(entry), relock_status_name(st), msg);
    /* The asynchronous client's message names which of the two it
     * noticed first. */
    if (entry == BOTH_ASYNC &&
        !((st == RELOCK_EDURABILITY &&
           strstr(msg, "the connection changed between the write and WAIT")) ||
          (st == RELOCK_EIO && strstr(msg, "the replicas' acknowledgement is unknown"))))
        fail_msg("async: %s: %s", relock_status_name(st), msg);
    fprintf(stderr, "write's connection closed: %s %s\n", both_entry_name(entry),
            relock_status_name(st));
    assert_null(l);
    assert_false(key_exists("adur-rc"));
    /* An extend to a shorter lease, the same way: the master may hold
     * the new lease, so the validity is at most that one. */
    assert_int_equal(both_try_acquire(c, "adur-rc-x", 10000, &l), RELOCK_OK);
    v = testsrv_cmd(&px, "RELOCK-PROXY FAULT at-reply %s at-kind %s", "1", "close-after");
    free(v);
    st = both_extend(c, l, 1000);
    if ((st != RELOCK_EDURABILITY && st != RELOCK_EIO) || relock_lock_validity_ms(l) > 1000)
        fail_msg("%s extend to 1000 ms: %s (%s), validity %lld ms", both_entry_name(entry),
                 relock_status_name(st), both_error(c), relock_lock_validity_ms(l));
    relock_lock_free(l);
    both_free(c);
    testsrv_stop(&px);
}

static int lost_why = -1;

static void on_lost(relock_status why, void *arg)
{
    (void)arg;
    __atomic_store_n(&lost_why, (int)why, __ATOMIC_SEQ_CST);
}

/* A kept lock whose renewals the replicas stop acknowledging: each
 * renewal is retried at the next period, and once the validity the
 * replicas know of has run out the lock is reported lost, with
 * RELOCK_EDURABILITY; the key is still on the master (never deleted). */
static void test_keep_unacknowledged(void **state)
{
    (void)state;
    both_client *c = both_durable(master.port, "2", 0);
    relock_lock *l = NULL;
    assert_int_equal(both_try_acquire(c, "dur-keep", 3000, &l), RELOCK_OK);
    __atomic_store_n(&lost_why, -1, __ATOMIC_SEQ_CST);
    assert_int_equal(both_keep(c, l, on_lost, NULL), RELOCK_OK);
    both_idle(c, 1500); /* one renewal acknowledged */
    assert_int_equal(__atomic_load_n(&lost_why, __ATOMIC_SEQ_CST), -1);
    assert_int_equal(kill(rep[1].pid, SIGSTOP), 0);
    stopped = 1;
    uint64_t t0 = tu_now_ms();
    while (__atomic_load_n(&lost_why, __ATOMIC_SEQ_CST) < 0 && tu_now_ms() - t0 < 15000)
        both_idle(c, 50);
    uint64_t took = tu_now_ms() - t0;
    assert_int_equal(__atomic_load_n(&lost_why, __ATOMIC_SEQ_CST), RELOCK_EDURABILITY);
    /* Not before the validity of the last acknowledged renewal ran out
     * (at most 3000 ms after it, which was before the stop). */
    assert_true(took < 3000 + 2 * TIMEOUT_MS + 2000);
    /* A lock found lost is valid no more, in both clients: its handle
     * must not still report the lease of its last, unacknowledged
     * renewal. */
    long long left = relock_lock_validity_ms(l);
    if (left != 0)
        fail_msg("the lock was reported lost (durability), yet its handle says it is "
                 "valid for %lld ms more",
                 left);
    assert_true(key_exists("dur-keep"));
    assert_int_equal(both_keep_stop(c, l), RELOCK_LOST);
    relock_lock_free(l);
    both_free(c);
    resume();
    assert_int_equal(
        testsrv_await(&rep[1], 15000, "master_link_status:up", "INFO %s", "replication"), 0);
}

/* Runs cmd by the shell; returns its exit code, its output in out. */
static int run(const char *cmd, char *out, size_t len)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The command line needs nothing but the file: more replicas asked for
 * than exist fails the acquire with exit code 4 and the count; probe
 * lists the wait capability. */
static void test_cli(void **state)
{
    (void)state;
    const char *bin = getenv("RELOCK_BIN");
    if (!bin) {
        testsrv_note_skip("relock command (RELOCK_BIN unset)");
        return;
    }
    char dir[] = "/tmp/relock-dur-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char conf[64];
    snprintf(conf, sizeof conf, "%s/relock.conf", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f,
            "relock = {\n  mode = \"modern\";\n"
            "  servers = ( { host = \"127.0.0.1\"; port = %d; } );\n"
            "  durability = { replicas = 3; timeout_ms = 500; };\n};\n",
            master.port);
    fclose(f);
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "RELOCK_CONFIG=%s '%s' acquire -n -t 10s dur-cli 2>&1", conf, bin);
    int rc = run(cmd, out, sizeof out);
    if (rc != 4 || !strstr(out, "2 of 3 replicas acknowledged within 500 ms"))
        fail_msg("exit %d: %s", rc, out);
    assert_false(key_exists("dur-cli"));
    snprintf(cmd, sizeof cmd, "RELOCK_CONFIG=%s '%s' probe 2>&1", conf, bin);
    rc = run(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, " wait"))
        fail_msg("probe: exit %d: %s", rc, out);
    unlink(conf);
    rmdir(dir);
}

/* ---- the boundary between the write and WAIT, through a proxy ---- */

static long long proxy_int(int port, const char *fmt, const char *a, const char *b)
{
    char *v = testsrv_cmd_port(port, fmt, a, b);
    assert_non_null(v);
    if (strncmp(v, "ERR", 3) == 0)
        fail_msg("%s: %s", fmt, v);
    long long n = atoll(v);
    free(v);
    return n;
}

/* The replies the proxy relays for one acquire (op 0) or extend (op 1) of
 * a warmed-up client: the write's sequence, then WAIT. */
static long long count_replies(int pport, relock_client *c, int op, int n)
{
    char name[48];
    snprintf(name, sizeof name, "dur-count-%d-%d", op, n);
    relock_lock *l = NULL;
    long long replies = 0;
    if (op == 1)
        assert_int_equal(relock_try_acquire(c, name, 5000, &l), RELOCK_OK);
    proxy_int(pport, "RELOCK-PROXY FAULT at-reply %s%s", "0", "");
    if (op == 0)
        assert_int_equal(relock_try_acquire(c, name, 5000, &l), RELOCK_OK);
    else
        assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
    replies = proxy_int(pport, "RELOCK-PROXY REPLIES%s%s", "", "");
    assert_int_equal(relock_client_replicas_acked(c), 2);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    return replies;
}

/*
 * The connection dies exactly between the write and WAIT (the write's
 * reply arrives, then the proxy closes the connection: WAIT meets a dead
 * one), WAIT's reply is lost (it was sent), or the write's own reply is
 * lost (the lock is read back on a new connection, on which WAIT could
 * count nothing).  An acquire never returns OK: RELOCK_EIO or
 * RELOCK_EDURABILITY with the write deleted again, or RELOCK_EAMBIGUOUS
 * saying the lock may stay until its TTL.  An extend never returns OK, its
 * validity is at most the earlier one and at most the new lease from the
 * extend's start (an extend to a shorter lease may have reached the
 * master); the lock key is never deleted by it.
 */
static void test_dead_before_wait(void **state)
{
    (void)state;
    testsrv wp;
    if (!testsrv_personality_runs("7")) {
        testsrv_note_skip("the write/WAIT boundary through the proxy");
        return;
    }
    assert_int_equal(testsrv_start_proxy(&wp, master.port, "7", NULL), 0);
    enum { DEAD_BETWEEN, WAIT_LOST, WRITE_LOST, NKINDS };
    static const char *const kind_name[] = {"dead between the write and WAIT",
                                            "WAIT's reply lost", "the write's reply lost"};
    int runs = 0;
    for (int lua = 1; lua >= 0; lua--) {
        proxy_int(wp.port, "RELOCK-PROXY LUA %s%s", lua ? "on" : "off", "");
        for (size_t k = 0; k < NCASES; k++) {
            if (!lua && (strcmp(cases[k].mode, "bridge") == 0 ||
                         strcmp(cases[k].mode, "legacy") == 0))
                continue; /* bridge is refused without Lua; legacy's WATCH path is 2.2's */
            const char *set[] = {"durability.replicas", "2", "durability.timeout_ms", "1000",
                                 "fencing", cases[k].fencing, NULL};
            relock_client *c = NULL;
            if (connect_with(wp.port, cases[k].mode, set, &c) != RELOCK_OK)
                fail_msg("connect: %s", relock_client_error(c)->message);
            /* op 2: an extend to a shorter lease, which the master may
             * hold whatever the replicas say. */
            for (int op = 0; op < 3; op++) {
                count_replies(wp.port, c, op > 0, 0); /* scripts cached from here on */
                long long n = count_replies(wp.port, c, op > 0, 1);
                assert_true(n >= 2 && n < 20);
                for (int kind = 0; kind < NKINDS; kind++) {
                    char name[64];
                    snprintf(name, sizeof name, "dur-wb-%d-%zu-%d-%d", lua, k, op, kind);
                    relock_lock *l = NULL;
                    long before = 0;
                    char ours[64] = "";
                    if (op > 0) {
                        assert_int_equal(relock_try_acquire(c, name, 5000, &l), RELOCK_OK);
                        snprintf(ours, sizeof ours, "%s", relock_lock_value(l));
                        before = relock_lock_validity_ms(l);
                    }
                    char at[24];
                    snprintf(at, sizeof at, "%lld", kind == WAIT_LOST ? n : n - 1);
                    proxy_int(wp.port, "RELOCK-PROXY FAULT at-reply %s at-kind %s", at,
                              kind == DEAD_BETWEEN ? "close-after" : "close-before");
                    relock_status st = op == 0 ? relock_try_acquire(c, name, 5000, &l)
                                               : relock_extend(l, op == 1 ? 20000 : 1000);
                    proxy_int(wp.port, "RELOCK-PROXY FAULT off%s%s", "", "");
                    const char *msg = relock_client_error(c)->message;
                    if (st != RELOCK_EIO && st != RELOCK_EAMBIGUOUS && st != RELOCK_EDURABILITY)
                        fail_msg("%s%s fencing=%s %s, %s: %s (%s)", cases[k].mode,
                                 lua ? "" : " (no Lua)", cases[k].fencing,
                                 op ? "extend" : "acquire", kind_name[kind],
                                 relock_status_name(st), msg);
                    char *v = testsrv_cmd(&master, "GET %s", name);
                    assert_non_null(v);
                    if (op == 0) {
                        assert_null(l);
                        /* Undone, unless said to be unknown. */
                        if (st != RELOCK_EAMBIGUOUS && strcmp(v, "(nil)") != 0)
                            fail_msg("%s %s, acquire, %s: %s, yet the key holds %s (%s)",
                                     cases[k].mode, cases[k].fencing, kind_name[kind],
                                     relock_status_name(st), v, msg);
                        if (st != RELOCK_EAMBIGUOUS && !strstr(msg, "deleted"))
                            fail_msg("%s, acquire, %s: no word of the delete: %s",
                                     cases[k].mode, kind_name[kind], msg);
                        char *d = testsrv_cmd(&master, "DEL %s", name);
                        free(d);
                    } else {
                        /* Never deleted by an extend; its validity not raised. */
                        if (strcmp(v, ours) != 0 && !(strcmp(cases[k].mode, "modern") != 0))
                            fail_msg("%s, extend, %s: the key holds %s, not %s", cases[k].mode,
                                     kind_name[kind], v, ours);
                        if (strcmp(v, "(nil)") == 0)
                            fail_msg("%s, extend, %s: the key was deleted", cases[k].mode,
                                     kind_name[kind]);
                        long long left = relock_lock_validity_ms(l);
                        if (left > before || (op == 2 && left > 1000))
                            fail_msg("%s%s fencing=%s, extend to %d ms, %s: %s, and the "
                                     "validity is %lld ms (%ld before)",
                                     cases[k].mode, lua ? "" : " (no Lua)", cases[k].fencing,
                                     op == 1 ? 20000 : 1000, kind_name[kind],
                                     relock_status_name(st), left, before);
                        relock_lock_free(l);
                        char *d = testsrv_cmd(&master, "DEL %s", name);
                        free(d);
                    }
                    free(v);
                    runs++;
                }
            }
            relock_client_free(c);
        }
    }
    proxy_int(wp.port, "RELOCK-PROXY LUA %s%s", "on", "");
    print_message("%d runs at the write/WAIT boundary\n", runs);
    testsrv_stop(&wp);
}

static void test_refused(void **state)
{
    (void)state;
    relock_client *c = NULL;
    relock_lock *l = NULL;

    /* WAITAOF: refused at connect by a server without it (7.0); a server
     * that has it but runs without appendonly refuses it at the first
     * use, and the write is removed. */
    const char *aof[] = {"durability.aof", "true", NULL};
    relock_status st = connect_with(master.port, "modern", aof, &c);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", relock_client_error(c)->message);
    relock_server_info *info = NULL;
    assert_int_equal(relock_client_server(c, &info), RELOCK_OK);
    unsigned caps = relock_server_info_caps(info);
    relock_server_info_free(info);
    if (!(caps & RELOCK_CAP_WAITAOF)) {
        assert_int_equal(st, RELOCK_EUNSUPPORTED);
        if (!strstr(msg, "has no WAITAOF (Redis 7.2 or later)"))
            fail_msg("message: %s", msg);
        assert_int_equal(relock_try_acquire(c, "dur-aof", 5000, &l), RELOCK_EUNSUPPORTED);
        if (!strstr(relock_client_error(c)->message, "WAITAOF"))
            fail_msg("message: %s", relock_client_error(c)->message);
    } else {
        assert_int_equal(st, RELOCK_OK);
        assert_int_equal(relock_try_acquire(c, "dur-aof", 5000, &l), RELOCK_EUNSUPPORTED);
        if (!strstr(relock_client_error(c)->message, "appendonly"))
            fail_msg("message: %s", relock_client_error(c)->message);
        /* A master with appendonly (fsync always, so that its own
         * acknowledgement does not wait for the next second): its fsync is
         * acknowledged; a replica it does not have is not. */
        testsrv aofsrv;
        const char *args[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
        assert_int_equal(testsrv_start(&aofsrv, args), 0);
        const char *none[] = {"durability.aof", "true", NULL};
        relock_client *a = NULL;
        assert_int_equal(connect_with(aofsrv.port, "modern", none, &a), RELOCK_OK);
        assert_int_equal(relock_try_acquire(a, "dur-aof", 5000, &l), RELOCK_OK);
        assert_int_equal(relock_client_replicas_acked(a), 0);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        l = NULL;
        relock_client_free(a);
        const char *one[] = {"durability.aof", "true", "durability.replicas", "1",
                             "durability.timeout_ms", "300", NULL};
        assert_int_equal(connect_with(aofsrv.port, "modern", one, &a), RELOCK_OK);
        assert_int_equal(relock_try_acquire(a, "dur-aof", 5000, &l), RELOCK_EDURABILITY);
        if (!strstr(relock_client_error(a)->message, "0 of 1 replicas acknowledged within 300 "
                                                      "ms (WAITAOF)"))
            fail_msg("message: %s", relock_client_error(a)->message);
        char *v = testsrv_cmd(&aofsrv, "EXISTS %s", "dur-aof");
        assert_string_equal(v, "0");
        free(v);
        relock_client_free(a);
        testsrv_stop(&aofsrv);
    }
    assert_null(l);
    assert_false(key_exists("dur-aof"));
    relock_client_free(c);

    /* Several servers: refused. */
    relock_config *cfg = relock_config_new();
    char servers[128];
    snprintf(servers, sizeof servers, "redis://127.0.0.1:%d,redis://127.0.0.1:%d", master.port,
             rep[0].port);
    assert_int_equal(relock_config_set(cfg, "servers", servers), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1"), RELOCK_OK);
    c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_EUNSUPPORTED);
    if (!strstr(relock_client_error(c)->message, "durability: not with several servers"))
        fail_msg("message: %s", relock_client_error(c)->message);
    assert_int_equal(relock_try_acquire(c, "dur-q", 5000, &l), RELOCK_EUNSUPPORTED);
    relock_client_free(c);
    relock_config_free(cfg);

    /* A server before 3.0 (the proxy imitating 2.4) has no WAIT. */
    if (testsrv_personality_runs("2.4")) {
        assert_int_equal(testsrv_start_proxy(&proxy, master.port, "2.4", NULL), 0);
        const char *rep1[] = {"durability.replicas", "1", NULL};
        c = NULL;
        assert_int_equal(connect_with(proxy.port, "legacy", rep1, &c), RELOCK_EUNSUPPORTED);
        if (!strstr(relock_client_error(c)->message, "has no WAIT (Redis 3.0 or later)"))
            fail_msg("message: %s", relock_client_error(c)->message);
        relock_client_free(c);
        testsrv_stop(&proxy);
    }
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    /* Through both entry points. */
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_replica_stopped_shorter),
        cmocka_unit_test(test_keep_unacknowledged),
        cmocka_unit_test(test_durable_reconnect),
    };
    /* The blocking client's alone. */
    const struct CMUnitTest blocking[] = {
        cmocka_unit_test(test_acked),
        cmocka_unit_test(test_acked_too_late),
        cmocka_unit_test(test_replica_stopped),
        cmocka_unit_test(test_dead_before_wait),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_refused),
    };
    return both_run(entry, shared, sizeof shared / sizeof *shared, blocking,
                    sizeof blocking / sizeof *blocking, setup, teardown);
}
