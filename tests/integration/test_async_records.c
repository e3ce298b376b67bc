/*
 * The asynchronous client with the settings whose code it shares with the
 * blocking API through step machines: durability (WAIT after the write,
 * against a master with one real replica, which a SIGSTOP silences),
 * owner records (written beside the lock after acquire and each renewal,
 * deleted at release) and legacy.clock = "server" (a client whose own
 * wall clock is stepped by an hour still writes and reads by the
 * server's).  Built on libevent (it_async_records_libevent) and on libuv
 * (it_async_records_libuv, TEST_LIBUV).  The durability scenarios both
 * clients share (an unacknowledged extend to a shorter lease, the write's
 * connection closed before WAIT) run through both entry points in
 * test_durable.c, the owner record's life (written, renewed, deleted, a
 * stale handle's release) in test_owner.c.
 */
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

/* The adapters' report of a ready descriptor goes through read_hook()
 * first when it is readable (see the owner records' cancel test): the hook
 * runs before the client reads what the server answered, so the test acts
 * at a known point between a command's run on the server and the client's
 * learning of it. */
#include "relock.h"
#include "relock_async.h"
static void hooked_action(relock_async_socket *s, int events);
#define relock_async_socket_action hooked_action
#ifdef TEST_LIBUV
#include "relock_async_libuv.h"
#else
#include "relock_async_libevent.h"
#endif
#undef relock_async_socket_action
#include "clock_step.h"
#include "testclient.h"
#include "testsrv.h"
#include "testutil.h"

/* ------------------------------------------------------------ the read hook */

/* Returns 1 when it freed the client (and with it s). */
static int (*read_hook)(void);

static void hooked_action(relock_async_socket *s, int events)
{
    if ((events & RELOCK_IO_READ) && read_hook && read_hook())
        return;
    relock_async_socket_action(s, events);
}

/* ------------------------------------------------------------ the wall clock's step */

/* clock_step_ms and clock_true_wall_ms: tests/support/clock_step.c, a
 * source of this program. */

#include "testloop.h"

static testsrv master, replica;
static int stopped; /* the replica is SIGSTOPped */

static int setup(void **state)
{
    (void)state;
    if (testsrv_start(&master, NULL) != 0)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", master.port);
    const char *rargs[] = {"--replicaof", "127.0.0.1", port, NULL};
    if (testsrv_start(&replica, rargs) != 0)
        return -1;
    if (testsrv_await(&replica, 15000, "master_link_status:up", "INFO %s", "replication") != 0 ||
        testsrv_await(&master, 15000, "connected_slaves:1", "INFO %s",
                      "replication") != 0) {
        fprintf(stderr, "setup: the replica did not sync within 15 s\n");
        return -1;
    }
    return 0;
}

static void resume(void)
{
    if (stopped && replica.pid > 0)
        kill(replica.pid, SIGCONT);
    stopped = 0;
}

static int teardown(void **state)
{
    (void)state;
    resume();
    testsrv_stop(&replica);
    testsrv_stop(&master);
    return 0;
}

/* ------------------------------------------------------------ helpers */

static relock_async *client(relock_async_loop *lp, const char *mode, const char *const *kv)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", master.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    for (int i = 0; kv && kv[i] && kv[i + 1]; i += 2)
        if (relock_config_set(cfg, kv[i], kv[i + 1]) != RELOCK_OK)
            fail_msg("setting %s: %s", kv[i], relock_config_error(cfg)->message);
    if (strcmp(mode, "modern") != 0)
        assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "ms"), RELOCK_OK);
    assert_int_equal(relock_config_set_owner(cfg, 0, "async-owner"), RELOCK_OK);
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, lp, &a);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    return a;
}

typedef struct outcome {
    long calls;
    relock_status st;
    relock_lock *l;
    int acked;
    char msg[512];
} outcome;

static void record(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                   void *arg)
{
    outcome *o = arg;
    o->calls++;
    o->st = st;
    o->l = l;
    o->acked = relock_async_replicas_acked(a);
    snprintf(o->msg, sizeof o->msg, "%s", e->message);
}

/* Starts op (acquire: name set; else release or extend of l) and runs the
 * loop until its callback; fails the test after 10 s. */
static outcome run_acquire(relock_async *a, const char *name, long long ttl_ms)
{
    outcome o;
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_try_acquire(a, name, ttl_ms, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    return o;
}

static outcome run_release(relock_lock *l)
{
    outcome o;
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_release(l, record, &o), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    return o;
}

static outcome run_extend_to(relock_lock *l, long long ttl_ms)
{
    outcome o;
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_extend(l, ttl_ms, record, &o), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    return o;
}

static outcome run_extend(relock_lock *l)
{
    return run_extend_to(l, 0);
}

static int key_exists(const char *key)
{
    char *v = testsrv_cmd(&master, "EXISTS %s", key);
    int e = v && strcmp(v, "1") == 0;
    free(v);
    return e;
}

static const char *const modes[] = {"modern", "legacy", "bridge"};

/* ------------------------------------------------------------ durability */

/* With owner records on, a record seen on the server at any read of the
 * client (none may be written before WAIT's verdict). */
static const char *seen_rkey;
static long seen_record;

static int look_for_record(void)
{
    if (seen_rkey && key_exists(seen_rkey))
        seen_record++;
    return 0;
}

static void test_durable(void **state)
{
    (void)state;
    const char *const kv[] = {"durability.replicas", "1", "durability.timeout_ms", "1000",
                              "owner_info", "true", NULL};
    for (size_t mi = 0; mi < 3; mi++) {
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *a = client(&lp, modes[mi], kv);
        char name[64];
        snprintf(name, sizeof name, "adur-%s", modes[mi]);
        /* the replica acknowledges */
        outcome o = run_acquire(a, name, 10000);
        if (o.st != RELOCK_OK)
            fail_msg("%s: acquire: %s", modes[mi], o.msg);
        assert_int_equal(o.acked, 1);
        char nrkey[96];
        snprintf(nrkey, sizeof nrkey, "{%s} relock:owner", name);
        assert_true(key_exists(nrkey)); /* written after the acknowledgement */
        o = run_extend(o.l);
        assert_int_equal(o.st, RELOCK_OK);
        assert_int_equal(o.acked, 1);
        relock_lock *l = o.l;
        /* silenced: an extend fails and keeps the lock, held for its old
         * validity */
        assert_int_equal(kill(replica.pid, SIGSTOP), 0);
        stopped = 1;
        uint64_t t0 = tu_now_ms();
        o = run_extend(l);
        assert_int_equal(o.st, RELOCK_EDURABILITY);
        if (!strstr(o.msg, "0 of 1 replicas acknowledged within 1000 ms (WAIT)"))
            fail_msg("%s: extend: %s", modes[mi], o.msg);
        assert_int_equal(o.acked, 0);
        assert_true(tu_now_ms() - t0 >= 900);
        assert_true(key_exists(name));
        /* an acquire fails, and its write is deleted */
        char other[80], orkey[96];
        snprintf(other, sizeof other, "%s-2", name);
        snprintf(orkey, sizeof orkey, "{%s} relock:owner", other);
        seen_rkey = orkey;
        seen_record = 0;
        read_hook = look_for_record;
        t0 = tu_now_ms();
        o = run_acquire(a, other, 10000);
        read_hook = NULL;
        /* its owner record was never written: it comes after WAIT */
        assert_int_equal(seen_record, 0);
        assert_false(key_exists(orkey));
        assert_int_equal(o.st, RELOCK_EDURABILITY);
        assert_null(o.l);
        if (!strstr(o.msg, "acquire") || !strstr(o.msg, "0 of 1 replicas acknowledged") ||
            !strstr(o.msg, "the lock was not kept (deleted)"))
            fail_msg("%s: acquire: %s", modes[mi], o.msg);
        assert_int_equal(o.acked, 0);
        assert_true(tu_now_ms() - t0 >= 900);
        assert_false(key_exists(other));
        resume();
        assert_int_equal(
            testsrv_await(&master, 15000, "connected_slaves:1", "INFO %s", "replication"), 0);
        /* the lock extended while the replica was silent is still ours */
        o = run_release(l);
        assert_int_equal(o.st, RELOCK_OK);
        relock_lock_free(l);
        assert_false(key_exists(name));
        relock_async_free(a);
        loop_fini();
    }
}

/* WAITAOF: a server without it (before 7.2) refuses it at the probe; one
 * with it and with appendonly acknowledges the master's fsync. */
static void test_durable_aof(void **state)
{
    (void)state;
    const char *const kv[] = {"durability.aof", "true", NULL};
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = client(&lp, "modern", kv);
    outcome o = run_acquire(a, "adur-aof", 5000);
    relock_client *bc = tu_client(master.port, "modern", NULL);
    relock_server_info *info = NULL;
    assert_int_equal(relock_client_server(bc, &info), RELOCK_OK);
    relock_client_free(bc);
    unsigned caps = relock_server_info_caps(info);
    relock_server_info_free(info);
    if (!(caps & RELOCK_CAP_WAITAOF)) {
        assert_int_equal(o.st, RELOCK_EUNSUPPORTED);
        if (!strstr(o.msg, "has no WAITAOF (Redis 7.2 or later)"))
            fail_msg("message: %s", o.msg);
        assert_false(key_exists("adur-aof"));
        relock_async_free(a);
        loop_fini();
        return;
    }
    /* no appendonly on this master: refused at the first use, undone */
    assert_int_equal(o.st, RELOCK_EUNSUPPORTED);
    if (!strstr(o.msg, "appendonly"))
        fail_msg("message: %s", o.msg);
    assert_false(key_exists("adur-aof"));
    relock_async_free(a);
    testsrv aofsrv;
    const char *args[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    assert_int_equal(testsrv_start(&aofsrv, args), 0);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", aofsrv.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.aof", "true"), RELOCK_OK);
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    o = run_acquire(a, "adur-aof", 5000);
    if (o.st != RELOCK_OK)
        fail_msg("WAITAOF: %s", o.msg);
    assert_int_equal(o.acked, 0);
    outcome r = run_release(o.l);
    assert_int_equal(r.st, RELOCK_OK);
    relock_lock_free(o.l);
    relock_async_free(a);
    testsrv_stop(&aofsrv);
    loop_fini();
}

/* ------------------------------------------------------------ owner records */

/* A cancel that arrives after the acquire's owner record was written (the
 * record is on the server, its reply not yet read by the client: the read
 * hook cancels before hiredis reads it).  The undo deletes the record
 * first, while the lock holds the handle's value, then releases the lock,
 * as a release does; nothing is left for the TTL.  relock_async_free() at
 * the same point cannot undo without the loop: it reports EAMBIGUOUS. */
static relock_async_op *cancel_h;
static const char *cancel_rkey;
static int cancel_now; /* 1: cancel; 2: free the client */
static relock_async *cancel_a;
static long cancelled;

static int cancel_at_record(void)
{
    if (cancelled || !cancel_rkey || !key_exists(cancel_rkey))
        return 0;
    cancelled = 1;
    if (cancel_now == 1) {
        assert_int_equal(relock_async_cancel(cancel_h), RELOCK_OK);
        return 0;
    }
    relock_async_free(cancel_a);
    return 1;
}

static void test_owner_cancel(void **state)
{
    (void)state;
    const char *const kv[] = {"owner_info", "true", NULL};
    for (int how = 1; how <= 2; how++)
        for (size_t mi = 0; mi < 3; mi++) {
            relock_async_loop lp;
            loop_init(&lp);
            relock_async *a = client(&lp, modes[mi], kv);
            char name[64], rkey[96];
            snprintf(name, sizeof name, "aown-cancel-%s", modes[mi]);
            snprintf(rkey, sizeof rkey, "{%s} relock:owner", name);
            assert_false(key_exists(rkey));
            outcome o;
            memset(&o, 0, sizeof o);
            cancel_h = NULL;
            cancel_rkey = rkey;
            cancel_now = how;
            cancel_a = a;
            cancelled = 0;
            read_hook = cancel_at_record;
            assert_int_equal(relock_async_try_acquire(a, name, 30000, record, &o, &cancel_h),
                             RELOCK_OK);
            assert_int_equal(run_until(&o.calls, 1, 10000), 1);
            read_hook = NULL;
            assert_int_equal(cancelled, 1);
            assert_null(o.l);
            if (how == 1) {
                if (o.st != RELOCK_ECANCELED)
                    fail_msg("%s: cancel: %s: %s", modes[mi], relock_status_name(o.st), o.msg);
                if (!strstr(o.msg, "the lock it had won was released"))
                    fail_msg("%s: cancel: %s", modes[mi], o.msg);
                /* nothing left for the TTL: neither the lock nor its record */
                assert_false(key_exists(name));
                if (key_exists(rkey))
                    fail_msg("%s: the owner record outlived the cancelled acquire", modes[mi]);
                relock_async_free(a);
            } else {
                /* freed with the record's write in flight: no undo is
                 * possible without the loop, and the outcome says so */
                if (o.st != RELOCK_EAMBIGUOUS)
                    fail_msg("%s: free: %s: %s", modes[mi], relock_status_name(o.st), o.msg);
                assert_true(key_exists(name));
                char *r = testsrv_cmd(&master, "DEL %s %s", name, rkey);
                free(r);
            }
            loop_fini();
        }
}

/* ------------------------------------------------------------ legacy.clock = "server" */

#define STEP 3600000LL /* an hour */

/* The child: its wall clock an hour ahead, an asynchronous legacy client
 * acquires a free lock and tries a live one.  Reports "VALUE BUSYSTATUS"
 * on ch; exit 0. */
static void clock_child(const char *clock, const char *mode, const char *mine,
                        const char *live, tu_chan *ch)
{
    clock_step_ms = STEP;
    relock_async_loop lp;
    loop_init(&lp);
    const char *const kv[] = {"legacy.clock", clock, NULL};
    relock_async *a = client(&lp, mode, kv);
    outcome o = run_acquire(a, mine, 10000);
    outcome b = run_acquire(a, live, 10000);
    char line[256];
    snprintf(line, sizeof line, "%s %d", o.st == RELOCK_OK ? relock_lock_value(o.l) : "failed",
             (int)b.st);
    tu_chan_send(ch, line);
    if (o.l)
        relock_lock_free(o.l); /* left held for the parent to judge */
    if (b.l)
        relock_lock_free(b.l);
    relock_async_free(a);
    _exit(0);
}

static void test_clock_server(void **state)
{
    (void)state;
    static const char *const cmodes[] = {"legacy", "bridge"};
    for (int ci = 0; ci < 2; ci++)
        for (int server = 1; server >= 0; server--) {
            const char *clock = server ? "server" : "local";
            char mine[64], live[64];
            snprintf(mine, sizeof mine, "aclk-mine-%s-%s", cmodes[ci], clock);
            snprintf(live, sizeof live, "aclk-live-%s-%s", cmodes[ci], clock);
            char v[32];
            /* a classic holder, live for 60 s by every true clock */
            snprintf(v, sizeof v, "%lld", clock_true_wall_ms() + 60000);
            char *r = testsrv_cmd(&master, "SET %s %s", live, v);
            free(r);
            r = testsrv_cmd(&master, "DEL %s", mine);
            free(r);
            tu_chan ch;
            assert_int_equal(tu_chan_open(&ch), 0);
            pid_t pid = fork();
            assert_true(pid >= 0);
            if (pid == 0) {
                close(ch.rd);
                clock_child(clock, cmodes[ci], mine, live, &ch);
            }
            close(ch.wr);
            ch.wr = -1;
            char line[256] = "";
            int got = tu_chan_recv(&ch, line, sizeof line, 30000);
            int status = 0;
            assert_int_equal(waitpid(pid, &status, 0), pid);
            assert_int_equal(got, 0);
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            tu_chan_close(&ch);
            long long ts = atoll(line);
            const char *sp = strrchr(line, ' ');
            int busy = sp ? atoi(sp + 1) : -1;
            long long now = clock_true_wall_ms();
            if (server) {
                /* written by the server's clock: about now + 10 s */
                if (!(ts >= now + 8000 && ts <= now + 11000))
                    fail_msg("%s, clock server: wrote %s, now %lld", cmodes[ci], line, now);
                assert_int_equal(busy, RELOCK_BUSY);
                /* and an unstepped client meets it held */
                const char *const ckv[] = {"legacy.clock_unit", "ms", NULL};
                relock_client *bc = tu_client(master.port, cmodes[ci], ckv);
                relock_lock *l = NULL;
                assert_int_equal(relock_try_acquire(bc, mine, 5000, &l), RELOCK_BUSY);
                relock_client_free(bc);
            } else {
                /* the control: its own clock, an hour ahead, takes the
                 * live lock and writes an hour into the future */
                if (!(ts >= now + STEP))
                    fail_msg("%s, clock local: wrote %s, now %lld", cmodes[ci], line, now);
                assert_int_equal(busy, RELOCK_OK);
            }
            r = testsrv_cmd(&master, "DEL %s %s", mine, live);
            free(r);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durable),
        cmocka_unit_test(test_durable_aof),
        cmocka_unit_test(test_owner_cancel),
        cmocka_unit_test(test_clock_server),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
