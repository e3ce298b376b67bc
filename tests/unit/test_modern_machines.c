/*
 * Modern mode's step machines (src/algo/modern.h), fed replies and faults by
 * hand: which commands each way sends, what each reply or fault makes of
 * the attempt, release and extend, and the state a driver relies on
 * (in_txn between WATCH and EXEC, the fleet's clock asked for, the
 * EVALSHA-then-EVAL fallback).  The same operations against real servers:
 * it_modern, it_native, it_fence.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "caps.h"
#include "fakereply.h"
#include "modern.h"

#define TOKEN "0123456789abcdef0123456789abcdef"
#define LUA (RELOCK_CAP_WATCH | RELOCK_CAP_EVAL | RELOCK_CAP_PEXPIRE | RELOCK_CAP_SET_NX_PX)
#define NO_LUA (RELOCK_CAP_WATCH | RELOCK_CAP_PEXPIRE | RELOCK_CAP_SET_NX_PX)

static fake f;
static relock__batch out;

static int setup(void **state)
{
    (void)state;
    f = fake_new();
    f.c->conn.caps = LUA;
    strcpy(f.l->value, TOKEN);
    relock__batch_reset(&out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(&f);
    return 0;
}

static relock__step acq(relock__modern_acq *m, relock__feed in)
{
    return relock__modern_acq_step(m, f.l, &in, &out);
}

static relock__step cx(relock__modern_cx *m, relock__feed in)
{
    return relock__modern_cx_step(m, f.l, &in, &out);
}

/* ------------------------------------------------------------------ acquire */

static void test_plain_won(void **state)
{
    (void)state;
    f.c->s.fencing = 0;
    f.c->s.lock_delay_ms = 250;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    assert_int_equal(acq(&m, feed_none(100)), RELOCK__STEP_SEND);
    assert_int_equal(m.way, RELOCK__MW_PLAIN);
    assert_int_equal(out.n, 1);
    /* The key's TTL carries lock_delay_ms; validity does not. */
    assert_true(batch_is(&out, 0, "SET", "job", TOKEN, "NX", "PX", "1250", NULL));
    assert_int_equal(out.in_txn, 0);
    assert_int_equal(acq(&m, feed_replies(140, 1, fr_status("OK"))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 0);
    /* Validity counts from the first step, before the SET was sent. */
    assert_int_equal(f.l->valid_until, relock__valid_until(100, 1000));
}

static void test_plain_busy(void **state)
{
    (void)state;
    f.c->s.fencing = 0;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    assert_int_equal(acq(&m, feed_replies(101, 1, fr_nil())), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "PTTL", "job", NULL));
    assert_int_equal(acq(&m, feed_replies(102, 1, fr_int(700))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 700);
    assert_int_equal(f.l->valid_until, 0);

    /* Gone between the SET and the PTTL: look again at once. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_nil()));
    acq(&m, feed_replies(102, 1, fr_int(-2)));
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 0);
}

/* A timestamp without TTL: the fleet's clock decides; a live legacy
 * holder is waited for, an expired one taken over by script. */
static void test_legacy_leftover(void **state)
{
    (void)state;
    f.c->s.fencing = 0;
    f.c->s.legacy.skew_margin_ms = 500;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_nil()));
    assert_int_equal(acq(&m, feed_replies(102, 1, fr_int(-1))), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    assert_int_equal(acq(&m, feed_replies(103, 1, fr_str("1700000000"))), RELOCK__STEP_SEND);
    assert_int_equal(out.n, 0); /* no command: only the clock */
    assert_int_equal(m.h.want_fleet, 1);
    relock__feed in = feed_none(104);
    in.fleet_ms = 1700000000LL * 1000 + 300; /* the end is (ts + 1) s + 500 ms */
    assert_int_equal(acq(&m, in), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 1200);
    assert_int_equal(f.l->legacy_holder, 1);
    assert_int_equal(m.h.note_legacy, 1);
    assert_int_equal(m.h.want_fleet, 0);

    /* Past the end: the takeover script, by EVALSHA then by EVAL. */
    f.l->legacy_holder = 0;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_nil()));
    acq(&m, feed_replies(102, 1, fr_int(-1)));
    acq(&m, feed_replies(103, 1, fr_str("1700000000")));
    in = feed_none(104);
    in.fleet_ms = 1700000001LL * 1000 + 500;
    assert_int_equal(acq(&m, in), RELOCK__STEP_SEND);
    assert_int_equal(m.way, RELOCK__MW_TAKEOVER);
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_MODERN_TAKEOVER], "2", "job",
                         f.l->fence_key, "1700000000", TOKEN, "1000", "0", NULL));
    assert_int_equal(acq(&m, feed_replies(105, 1, fr_err("NOSCRIPT No matching script"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_MODERN_TAKEOVER),
                         "2", "job", f.l->fence_key, "1700000000", TOKEN, "1000", "0", NULL));
    assert_int_equal(acq(&m, feed_replies(106, 1, fr_arr(1, fr_int(1)))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->legacy_holder, 0);
    /* A dead holder's leftover is a legacy writer's value: a sighting. */
    assert_int_equal(m.h.note_legacy, 1);

    /* The clock could not be read: the attempt fails with its error. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_nil()));
    acq(&m, feed_replies(102, 1, fr_int(-1)));
    acq(&m, feed_replies(103, 1, fr_str("1700000000")));
    assert_int_equal(acq(&m, feed_fault(104, RELOCK__FAULT_UNSENT, 0)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EIO);
}

/* legacy.clock = "server": a leftover that looks expired on the estimate
 * of the server's clock is judged again on a fresh reading before it is
 * taken over (after a step of the server's clock the estimate is wrong). */
static void test_leftover_fresh_clock(void **state)
{
    (void)state;
    f.c->s.fencing = 0;
    f.c->s.legacy.clock_server = 1;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_nil()));
    acq(&m, feed_replies(102, 1, fr_int(-1)));
    acq(&m, feed_replies(103, 1, fr_str("1700000000")));
    relock__feed in = feed_none(104);
    in.fleet_ms = 1700000001LL * 1000 + 500; /* expired by the estimate */
    assert_int_equal(acq(&m, in), RELOCK__STEP_SEND);
    assert_int_equal(out.n, 0);
    assert_int_equal(m.h.want_fleet, RELOCK__FLEET_FRESH);
    /* The fresh reading says the server's clock is a minute behind: held. */
    in = feed_none(105);
    in.fleet_ms = 1700000001LL * 1000 + 500 - 60000;
    in.fleet_fresh = 1;
    assert_int_equal(acq(&m, in), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.want_fleet, 0);

    /* Expired on the fresh reading too: taken over. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_nil()));
    acq(&m, feed_replies(102, 1, fr_int(-1)));
    acq(&m, feed_replies(103, 1, fr_str("1700000000")));
    in = feed_none(104);
    in.fleet_ms = 1700000001LL * 1000 + 500;
    acq(&m, in);
    in = feed_none(105);
    in.fleet_ms = 1700000001LL * 1000 + 501;
    in.fleet_fresh = 1;
    assert_int_equal(acq(&m, in), RELOCK__STEP_SEND);
    assert_int_equal(m.way, RELOCK__MW_TAKEOVER);
}

static void test_foreign_without_ttl(void **state)
{
    (void)state;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_MODERN_ACQUIRE], "2", "job",
                         f.l->fence_key, TOKEN, "1000", NULL));
    /* Busy, no TTL, a value nobody's lock algorithm writes. */
    acq(&m, feed_replies(101, 1, fr_arr(3, fr_int(0), fr_int(-1), fr_str("hello"))));
    assert_int_equal(m.h.st, RELOCK_EFOREIGN);
    assert_string_equal(f.c->err.msg, "key job holds \"hello\" without a TTL: neither a lock "
                                      "relock wrote nor a legacy timestamp; never taken over");
}

static void test_script_won_after_noscript(void **state)
{
    (void)state;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    assert_int_equal(m.way, RELOCK__MW_SCRIPT);
    assert_int_equal(acq(&m, feed_replies(101, 1, fr_err("NOSCRIPT No matching script"))),
                     RELOCK__STEP_SEND);
    assert_int_equal(m.by_eval, 1);
    assert_true(batch_is(&out, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_MODERN_ACQUIRE),
                         "2", "job", f.l->fence_key, TOKEN, "1000", NULL));
    acq(&m, feed_replies(102, 1, fr_arr(2, fr_int(1), fr_int(42))));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 42);

    /* Busy: the script says the holder's PTTL. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_arr(3, fr_int(0), fr_int(300), fr_str("x"))));
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 300);

    /* A second NOSCRIPT (by EVAL) is an error like any other. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_err("NOSCRIPT No matching script")));
    acq(&m, feed_replies(102, 1, fr_err("NOSCRIPT No matching script")));
    assert_int_equal(m.h.st, RELOCK_EPROTO);
    assert_non_null(strstr(f.c->err.msg, "acquire script on 127.0.0.1:6379: server error"));
}

/* A lost reply to the acquire: read back; ours only with our token. */
static void test_lost_acquire_read_back(void **state)
{
    (void)state;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    assert_int_equal(acq(&m, feed_fault(101, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_SEND);
    assert_int_equal(m.readback, 1);
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    assert_int_equal(out.in_txn, 0);
    assert_int_equal(acq(&m, feed_replies(150, 1, fr_str(TOKEN))), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "GET", f.l->fence_key, NULL));
    acq(&m, feed_replies(151, 1, fr_str("17")));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 17);
    assert_int_equal(f.l->valid_until, relock__valid_until(100, 1000));
    assert_int_equal(f.c->err.pub.status, RELOCK_OK);

    /* Not ours: the write never took effect; the loss's error stands. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_fault(101, RELOCK__FAULT_LOST, 0));
    acq(&m, feed_replies(150, 1, fr_nil()));
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_string_equal(f.c->err.msg, "SET on 127.0.0.1:6379: connection lost");
    relock__err_clear(&f.c->err);

    /* The read-back answered with an error (-LOADING): it says nothing
     * about the key, which may hold our token: ambiguous, not EIO. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_fault(101, RELOCK__FAULT_LOST, 0));
    acq(&m, feed_replies(150, 1, fr_err("LOADING Redis is loading the dataset in memory")));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    relock__err_clear(&f.c->err);

    /* The key holds our token, but the fence cannot be read (lost, or an
     * error reply): the lock is ours with no fence to give; neither a
     * success (fence 0 would undercut every earlier holder's) nor EIO
     * ("nothing happened": our token sits in the key). */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_fault(101, RELOCK__FAULT_LOST, 0));
    assert_int_equal(acq(&m, feed_replies(150, 1, fr_str(TOKEN))), RELOCK__STEP_SEND);
    acq(&m, feed_replies(151, 1, fr_err("LOADING Redis is loading the dataset in memory")));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    relock__err_clear(&f.c->err);
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_fault(101, RELOCK__FAULT_LOST, 0));
    assert_int_equal(acq(&m, feed_replies(150, 1, fr_str(TOKEN))), RELOCK__STEP_SEND);
    acq(&m, feed_fault(151, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    relock__err_clear(&f.c->err);

    /* The read-back fails too: ambiguous. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_fault(101, RELOCK__FAULT_LOST, 0));
    acq(&m, feed_fault(150, RELOCK__FAULT_UNSENT, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    assert_string_equal(f.c->err.msg,
                        "acquire job: connection lost after the acquire was sent and the key "
                        "cannot be read back; the lock may be held by us until its TTL ends "
                        "(SET on 127.0.0.1:6379: connection lost)");
    relock__err_clear(&f.c->err);

    /* Unsent: nothing ran, no read-back. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    assert_int_equal(acq(&m, feed_fault(101, RELOCK__FAULT_UNSENT, 0)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_int_equal(m.readback, 0);
}

/* Fencing without Lua: WATCH, GET, MULTI, SET, INCR, EXEC, with in_txn
 * from the WATCH's batch to the one before EXEC's. */
static void test_watched_acquire(void **state)
{
    (void)state;
    f.c->conn.caps = NO_LUA;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    assert_int_equal(m.h.in_txn, 0);
    acq(&m, feed_none(100));
    assert_int_equal(m.way, RELOCK__MW_WATCH);
    assert_true(batch_is(&out, 0, "WATCH", "job", NULL));
    assert_int_equal(out.in_txn, 1);
    assert_int_equal(m.h.in_txn, 1);
    acq(&m, feed_replies(101, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    assert_int_equal(m.h.in_txn, 1);
    acq(&m, feed_replies(102, 1, fr_nil()));
    assert_true(batch_is(&out, 0, "MULTI", NULL));
    assert_int_equal(m.h.in_txn, 1);
    acq(&m, feed_replies(103, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "SET", "job", TOKEN, "PX", "1000", NULL));
    assert_int_equal(m.h.in_txn, 1);
    acq(&m, feed_replies(104, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "INCR", f.l->fence_key, NULL));
    assert_int_equal(m.h.in_txn, 1);
    acq(&m, feed_replies(105, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "EXEC", NULL));
    assert_int_equal(out.in_txn, 0); /* EXEC ends the transaction */
    assert_int_equal(m.h.in_txn, 0);
    acq(&m, feed_replies(106, 1, fr_arr(2, fr_status("OK"), fr_int(9))));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 9);

    /* EXEC nil: the key was written meanwhile; busy, look again. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_status("OK")));
    acq(&m, feed_replies(102, 1, fr_nil()));
    acq(&m, feed_replies(103, 1, fr_status("OK")));
    acq(&m, feed_replies(104, 1, fr_status("QUEUED")));
    acq(&m, feed_replies(105, 1, fr_status("QUEUED")));
    acq(&m, feed_replies(106, 1, fr_nil()));
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 0);

    /* Held: UNWATCH ends the transaction, then the holder is judged. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_status("OK")));
    acq(&m, feed_replies(102, 1, fr_str("someone")));
    assert_true(batch_is(&out, 0, "PTTL", "job", NULL));
    assert_int_equal(m.h.in_txn, 1);
    acq(&m, feed_replies(103, 1, fr_int(2500)));
    assert_true(batch_is(&out, 0, "UNWATCH", NULL));
    assert_int_equal(m.h.in_txn, 0);
    acq(&m, feed_replies(104, 1, fr_status("OK")));
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 2500);
}

static void test_watched_acquire_faults(void **state)
{
    (void)state;
    f.c->conn.caps = NO_LUA;
    /* A fault inside the transaction fails the attempt, the transaction
     * still open (the driver drops the connection). */
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_status("OK")));
    assert_int_equal(acq(&m, feed_fault(102, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_int_equal(m.h.in_txn, 1);
    relock__err_clear(&f.c->err);

    /* MULTI refused: failed, the transaction open. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_status("OK")));
    acq(&m, feed_replies(102, 1, fr_nil()));
    acq(&m, feed_replies(103, 1, fr_err("ERR MULTI calls can not be nested")));
    assert_int_equal(m.h.st, RELOCK_EPROTO);
    assert_int_equal(m.h.in_txn, 1);
    relock__err_clear(&f.c->err);

    /* EXEC lost: it may have run; read back on a new connection, and
     * when that fails too, ambiguous. */
    relock__modern_acq_init(&m);
    acq(&m, feed_none(100));
    acq(&m, feed_replies(101, 1, fr_status("OK")));
    acq(&m, feed_replies(102, 1, fr_nil()));
    acq(&m, feed_replies(103, 1, fr_status("OK")));
    acq(&m, feed_replies(104, 1, fr_status("QUEUED")));
    acq(&m, feed_replies(105, 1, fr_status("QUEUED")));
    assert_int_equal(acq(&m, feed_fault(106, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    assert_int_equal(m.h.in_txn, 0);
    acq(&m, feed_fault(107, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
}

/* ------------------------------------------------------------------ release and extend */

static void test_release_native(void **state)
{
    (void)state;
    f.c->conn.caps = LUA | RELOCK__CAP_DELIFEQ;
    relock__modern_cx m;
    relock__modern_cx_init(&m, 0, 0);
    assert_int_equal(cx(&m, feed_none(100)), RELOCK__STEP_SEND);
    assert_int_equal(m.way, RELOCK__MW_DELIFEQ);
    /* The notice rides in the same batch. */
    assert_int_equal(out.n, 2);
    assert_true(batch_is(&out, 0, "DELIFEQ", "job", TOKEN, NULL));
    assert_true(batch_is(&out, 1, "PUBLISH", "job" RELOCK__NOTIFY_SUFFIX, "1", NULL));
    cx(&m, feed_replies(101, 2, fr_int(1), fr_int(3)));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->waiters, 3);

    /* Only the notice's reply lost: released all the same. */
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    RELOCK__FAIL(&f.c->err, RELOCK_EIO, "PUBLISH on 127.0.0.1:6379: connection lost");
    cx(&m, feed_fault(101, RELOCK__FAULT_LOST, 1, fr_int(1)));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->waiters, 0);
    assert_int_equal(f.c->err.pub.status, RELOCK_OK);

    /* The compare-and-delete's reply lost: ambiguous. */
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    cx(&m, feed_fault(101, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    assert_string_equal(f.c->err.msg, "release job: connection lost after the request was sent; "
                                      "the lock's state is unknown");
    relock__err_clear(&f.c->err);

    /* DELEX without notices: one command; 0 is lost, "it expired" once
     * the validity has passed. */
    f.c->conn.caps = LUA | RELOCK__CAP_DELEX;
    f.c->s.wait.notify = 0;
    f.l->valid_until = 150;
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    assert_int_equal(out.n, 1);
    assert_true(batch_is(&out, 0, "DELEX", "job", "IFEQ", TOKEN, NULL));
    cx(&m, feed_replies(120, 1, fr_int(0)));
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_string_equal(f.c->err.msg, "release job: lock lost: the key was deleted, expired or "
                                      "holds another value");
    relock__err_clear(&f.c->err);
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    cx(&m, feed_replies(150, 1, fr_int(0)));
    assert_string_equal(f.c->err.msg, "release job: lock lost: it expired");
}

static void test_release_script(void **state)
{
    (void)state;
    relock__modern_cx m;
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    assert_int_equal(m.way, RELOCK__MW_SCRIPT);
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_DEL_IF_EQ], "1", "job", TOKEN,
                         "job" RELOCK__NOTIFY_SUFFIX, NULL));
    assert_int_equal(cx(&m, feed_replies(101, 1, fr_err("NOSCRIPT No matching script"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_DEL_IF_EQ), "1",
                         "job", TOKEN, "job" RELOCK__NOTIFY_SUFFIX, NULL));
    cx(&m, feed_replies(102, 1, fr_int(3)));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->waiters, 2);

    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    cx(&m, feed_replies(101, 1, fr_int(-1)));
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_string_equal(f.c->err.msg, "release job: lock lost: taken by another value");
    relock__err_clear(&f.c->err);

    /* The EVAL after NOSCRIPT lost: ambiguous, as the EVALSHA would be. */
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    cx(&m, feed_replies(101, 1, fr_err("NOSCRIPT No matching script")));
    cx(&m, feed_fault(102, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
}

static void test_release_watched(void **state)
{
    (void)state;
    f.c->conn.caps = NO_LUA;
    relock__modern_cx m;
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    assert_int_equal(m.way, RELOCK__MW_WATCH);
    assert_true(batch_is(&out, 0, "WATCH", "job", NULL));
    assert_int_equal(m.h.in_txn, 1);
    cx(&m, feed_replies(101, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    cx(&m, feed_replies(102, 1, fr_str(TOKEN)));
    assert_true(batch_is(&out, 0, "MULTI", NULL));
    cx(&m, feed_replies(103, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "DEL", "job", NULL));
    cx(&m, feed_replies(104, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "PUBLISH", "job" RELOCK__NOTIFY_SUFFIX, "1", NULL));
    assert_int_equal(m.h.in_txn, 1);
    cx(&m, feed_replies(105, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "EXEC", NULL));
    assert_int_equal(m.h.in_txn, 0);
    cx(&m, feed_replies(106, 1, fr_arr(2, fr_int(1), fr_int(4))));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->waiters, 4);

    /* A lost EXEC may have deleted the key: ambiguous. */
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    cx(&m, feed_replies(101, 1, fr_status("OK")));
    cx(&m, feed_replies(102, 1, fr_str(TOKEN)));
    cx(&m, feed_replies(103, 1, fr_status("OK")));
    cx(&m, feed_replies(104, 1, fr_status("QUEUED")));
    cx(&m, feed_replies(105, 1, fr_status("QUEUED")));
    cx(&m, feed_fault(106, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    relock__err_clear(&f.c->err);

    /* Another's value: UNWATCH, lost. */
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    cx(&m, feed_replies(101, 1, fr_status("OK")));
    cx(&m, feed_replies(102, 1, fr_str("other")));
    assert_true(batch_is(&out, 0, "UNWATCH", NULL));
    assert_int_equal(m.h.in_txn, 0);
    cx(&m, feed_replies(103, 1, fr_status("OK")));
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_string_equal(f.c->err.msg, "release job: lock lost: taken by another value");
    relock__err_clear(&f.c->err);

    /* EXEC nil every time: five rounds, then given up. */
    relock__modern_cx_init(&m, 0, 0);
    cx(&m, feed_none(100));
    for (int round = 0; round < RELOCK__MODERN_WATCH_TRIES; round++) {
        assert_int_equal(m.tries, round + 1);
        assert_true(batch_is(&out, 0, "WATCH", "job", NULL));
        cx(&m, feed_replies(101, 1, fr_status("OK")));
        cx(&m, feed_replies(102, 1, fr_str(TOKEN)));
        cx(&m, feed_replies(103, 1, fr_status("OK")));
        cx(&m, feed_replies(104, 1, fr_status("QUEUED")));
        cx(&m, feed_replies(105, 1, fr_status("QUEUED")));
        relock__step s = cx(&m, feed_replies(106, 1, fr_nil()));
        assert_int_equal(s, round + 1 < RELOCK__MODERN_WATCH_TRIES ? RELOCK__STEP_SEND
                                                                    : RELOCK__STEP_DONE);
        fr_free_all();
    }
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_string_equal(f.c->err.msg,
                        "release job: the key kept changing between WATCH and EXEC; not done");
}

static void test_extend(void **state)
{
    (void)state;
    f.c->conn.caps = LUA | RELOCK__CAP_SET_IFEQ;
    f.l->valid_until = 500;
    relock__modern_cx m;
    relock__modern_cx_init(&m, 1, 4000);
    cx(&m, feed_none(200));
    assert_int_equal(m.way, RELOCK__MW_SET_IFEQ);
    assert_true(batch_is(&out, 0, "SET", "job", TOKEN, "IFEQ", TOKEN, "PX", "4000", NULL));
    cx(&m, feed_replies(210, 1, fr_status("OK")));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->ttl_ms, 4000);
    assert_int_equal(f.l->valid_until, relock__valid_until(200, 4000));

    relock__modern_cx_init(&m, 1, 4000);
    cx(&m, feed_none(200));
    cx(&m, feed_replies(210, 1, fr_nil()));
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_string_equal(f.c->err.msg, "extend job: lock lost: the key was deleted, expired or "
                                      "holds another value");
    relock__err_clear(&f.c->err);

    /* By script (PEXPIRE if equal), the TTL with lock_delay_ms. */
    f.c->conn.caps = LUA;
    f.c->s.lock_delay_ms = 100;
    relock__modern_cx_init(&m, 1, 4000);
    cx(&m, feed_none(300));
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_PEXPIRE_IF_EQ], "1", "job",
                         TOKEN, "4100", NULL));
    cx(&m, feed_replies(310, 1, fr_int(1)));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->valid_until, relock__valid_until(300, 4000));

    /* By WATCH: PEXPIRE inside MULTI, no notice. */
    f.c->conn.caps = NO_LUA;
    relock__modern_cx_init(&m, 1, 4000);
    cx(&m, feed_none(400));
    cx(&m, feed_replies(401, 1, fr_status("OK")));
    cx(&m, feed_replies(402, 1, fr_str(TOKEN)));
    cx(&m, feed_replies(403, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "PEXPIRE", "job", "4100", NULL));
    assert_int_equal(m.h.in_txn, 1);
    cx(&m, feed_replies(404, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "EXEC", NULL));
    cx(&m, feed_replies(405, 1, fr_arr(1, fr_int(1))));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->valid_until, relock__valid_until(400, 4000));
}

/* From its start, an extend to a shorter lease bounds the validity by the
 * new lease (the server may hold it from the write on), and a fault keeps
 * the bound; a longer one keeps the old validity; unknown stays unknown. */
static void test_extend_fault_bound(void **state)
{
    (void)state;
    f.c->conn.caps = LUA | RELOCK__CAP_SET_IFEQ;
    f.l->valid_until = 10000;
    relock__modern_cx m;
    relock__modern_cx_init(&m, 1, 2000);
    assert_int_equal(cx(&m, feed_none(1000)), RELOCK__STEP_SEND);
    assert_int_equal(f.l->valid_until, relock__valid_until(1000, 2000));
    assert_int_equal(cx(&m, feed_fault(1010, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    assert_int_equal(f.l->valid_until, relock__valid_until(1000, 2000));
    relock__err_clear(&f.c->err);

    f.l->valid_until = 10000;
    relock__modern_cx_init(&m, 1, 20000);
    cx(&m, feed_none(1000));
    cx(&m, feed_fault(1010, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    assert_int_equal(f.l->valid_until, 10000);
    relock__err_clear(&f.c->err);

    f.l->valid_until = 0;
    relock__modern_cx_init(&m, 1, 2000);
    cx(&m, feed_none(1000));
    cx(&m, feed_fault(1010, RELOCK__FAULT_LOST, 0));
    assert_int_equal(f.l->valid_until, 0);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_plain_won),
        T(test_plain_busy),
        T(test_legacy_leftover),
        T(test_leftover_fresh_clock),
        T(test_foreign_without_ttl),
        T(test_script_won_after_noscript),
        T(test_lost_acquire_read_back),
        T(test_watched_acquire),
        T(test_watched_acquire_faults),
        T(test_release_native),
        T(test_release_script),
        T(test_release_watched),
        T(test_extend),
        T(test_extend_fault_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
