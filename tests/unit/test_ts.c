/*
 * The timestamp algorithms' step machines (compat/ts.h), fed by hand:
 * replies built as the servers send them, faults at chosen places, the
 * times given.  No server: what is asserted is the machines' logic, the
 * commands they ask for and the transaction state they report.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"
#include "ts.h"

/* 2026-11-21 ...: the fleet's clock at the first feed, 700 ms into a second. */
#define NOW_MS 1795317548700LL
#define LIVE "1795317600"    /* a timestamp that holds at NOW_MS */
#define EXPIRED "1795317400" /* one that has passed */

static fake f;
static relock__batch b;
static relock__ts_acquire am;
static relock__ts_update um;

static int setup(void **state)
{
    (void)state;
    f = fake_new();
    f.c->mode = RELOCK_MODE_LEGACY;
    memset(&am, 0, sizeof am);
    memset(&um, 0, sizeof um);
    relock__batch_reset(&b);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(&f);
    return 0;
}

/* The first feed: no replies, the times. */
static relock__step acq_start(unsigned caps)
{
    f.c->conn.caps = caps;
    am.head.want_fleet = 1;
    am.head.hint_ms = -1;
    relock__feed in = feed_none(1000);
    in.fleet_ms = NOW_MS;
    return relock__ts_acquire_step(&am, f.l, &in, &b);
}

static relock__step acq(relock__feed in)
{
    return relock__ts_acquire_step(&am, f.l, &in, &b);
}

static relock__step upd(relock__feed in)
{
    return relock__ts_update_step(&um, f.l, &in, &b);
}

static relock__feed queued(int n)
{
    redisReply *q[3];
    for (int i = 0; i < 3; i++)
        q[i] = fr_status("QUEUED");
    return n == 1   ? feed_replies(1100, 1, q[0])
           : n == 2 ? feed_replies(1100, 2, q[0], q[1])
                    : feed_replies(1100, 3, q[0], q[1], q[2]);
}

/* ------------------------------------------------------------ acquire, 2.0 */

/* 2.0, first attempt: MULTI, then SETNX/INCR/GET breaks queued, then
 * EXEC, each its own batch, inside the transaction until EXEC. */
static void test_plain_first_attempt(void **state)
{
    (void)state;
    char bkey[RELOCK__KEY_MAX];
    assert_int_equal(relock__breaks_key(f.l->key, bkey, sizeof bkey), 0);
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_string_equal(f.l->value, "1795317550"); /* 1795317548 + 1 s + offset 1 */
    assert_int_equal(b.n, 1);
    assert_true(batch_is(&b, 0, "MULTI", NULL));
    assert_true(b.in_txn);
    assert_true(am.head.in_txn);
    assert_false(am.head.want_fleet); /* the clock is read once */
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 3);
    assert_true(batch_is(&b, 0, "SETNX", f.l->key, "1795317550", NULL));
    assert_true(batch_is(&b, 1, "INCR", f.l->fence_key, NULL));
    assert_true(batch_is(&b, 2, "GET", bkey, NULL));
    assert_true(am.head.in_txn);
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "EXEC", NULL));
    assert_false(b.in_txn);
    assert_false(am.head.in_txn);
    assert_int_equal(acq(feed_replies(1020, 1, fr_arr(3, fr_int(1), fr_int(7), fr_str("2")))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 7);
    assert_true(f.l->acquired);
    assert_true(f.l->breaks_known);
    assert_int_equal(f.l->breaks, 2);
    /* Validity from the moment before the clock was read (1000). */
    assert_true(f.l->valid_until > 1000 && f.l->valid_until <= 1000 + 1000);
    assert_false(f.l->looked);
}

/* Runs the 2.0 transaction of the current machine with EXEC's reply. */
static relock__step plain_txn(redisReply *exec)
{
    assert_true(batch_is(&b, 0, "MULTI", NULL));
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "EXEC", NULL));
    return acq(feed_replies(1020, 1, exec));
}

/* 2.0: SETNX lost, the key holds an expired value; GETSET takes it over,
 * and returns `old`.  Returns the machine's last step. */
static relock__step plain_takeover(redisReply *old)
{
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(plain_txn(fr_arr(3, fr_int(0), fr_int(5), fr_nil())), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GET", f.l->key, NULL));
    assert_false(b.in_txn);
    assert_int_equal(acq(feed_replies(1030, 1, fr_str(EXPIRED))), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "MULTI", NULL));
    assert_int_equal(acq(feed_replies(1040, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GETSET", f.l->key, "1795317550", NULL));
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    return acq(feed_replies(1050, 1, fr_arr(3, old, fr_int(6), fr_nil())));
}

/* A GETSET that returns an unexpired value lost the race: BUSY, nothing
 * claimed, look again at once. */
static void test_getset_unexpired_loses(void **state)
{
    (void)state;
    assert_int_equal(plain_takeover(fr_str(LIVE)), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
    assert_int_equal(am.head.hint_ms, 0);
    assert_false(f.l->acquired);
    assert_true(f.l->looked);
}

static void test_getset_expired_wins(void **state)
{
    (void)state;
    assert_int_equal(plain_takeover(fr_str(EXPIRED)), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 6);
    assert_true(f.l->acquired);
}

static void test_getset_gone_wins(void **state)
{
    (void)state;
    assert_int_equal(plain_takeover(fr_nil()), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_OK);
}

/* A timestamp of the other unit, written since our GET, proves nothing. */
static void test_getset_other_unit_loses(void **state)
{
    (void)state;
    assert_int_equal(plain_takeover(fr_str("1795317400000")), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
}

/* The connection lost after the takeover's EXEC was sent: the write may
 * have run, so neither won nor lost. */
static void test_getset_lost_is_ambiguous(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(plain_txn(fr_arr(3, fr_int(0), fr_int(5), fr_nil())), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_str(EXPIRED))), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1040, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_fault(1050, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EAMBIGUOUS);
    assert_non_null(strstr(f.c->err.msg, "acquire job: connection lost after the request"));
    assert_false(f.l->acquired);
}

/* Lost before EXEC was sent: the server discarded the transaction. */
static void test_lost_before_exec_is_eio(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_fault(1020, RELOCK__FAULT_LOST, 1, fr_status("QUEUED"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EIO);
    assert_true(am.head.in_txn); /* the driver drops the connection */
}

/* A queued command refused (before 2.6 that does not abort the
 * transaction): no EXEC is sent. */
static void test_queued_error_sends_no_exec(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1020, 3, fr_err("LOADING Redis is loading"),
                                      fr_status("QUEUED"), fr_status("QUEUED"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EPROTO);
    assert_true(am.head.in_txn);
    assert_non_null(strstr(f.c->err.msg, "SETNX"));
}

/* SETNX's EXEC lost: read the key back; our value there proves nothing
 * (timestamps repeat), so EAMBIGUOUS; another value: SETNX did not take
 * effect, and its I/O error stands. */
static void test_setnx_lost_read_back(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_fault(1020, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GET", f.l->key, NULL));
    assert_false(b.in_txn);
    assert_int_equal(acq(feed_replies(1030, 1, fr_str("1795317550"))), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EAMBIGUOUS);
    assert_non_null(strstr(f.c->err.msg, "connection lost after SETNX"));
}

static void test_setnx_lost_read_back_other(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_fault(1020, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_nil())), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EIO);
    assert_non_null(strstr(f.c->err.msg, "connection lost"));
}

/* The read-back answered with an error (-LOADING from a restarted server,
 * which may hold the SETNX): it says nothing about the key, so the outcome
 * stays ambiguous, never "nothing happened" (EIO). */
static void test_setnx_lost_read_back_error(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(3)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_fault(1020, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_err("LOADING Redis is loading the dataset "
                                                       "in memory"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EAMBIGUOUS);
}

/* A waiter on 2.0 reads first: a live value ends the attempt with no
 * write at all (the fence does not move); a free key is then written. */
static void test_waiter_looks_first(void **state)
{
    (void)state;
    f.l->looked = 1;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 1);
    assert_true(batch_is(&b, 0, "GET", f.l->key, NULL));
    assert_false(b.in_txn);
    assert_int_equal(acq(feed_replies(1010, 1, fr_str(LIVE))), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
    /* LIVE ends at 1795317601000: the hint runs to just then. */
    assert_int_equal(am.head.hint_ms, 1795317601000LL - NOW_MS);
    assert_true(f.l->legacy_holder);

    memset(&am, 0, sizeof am);
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_nil())), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "MULTI", NULL));
    assert_int_equal(plain_txn(fr_arr(3, fr_int(1), fr_int(9), fr_nil())), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 9);
}

/* The attempt that finds the lock held marks the handle. */
static void test_busy_marks_looked(void **state)
{
    (void)state;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(plain_txn(fr_arr(3, fr_int(0), fr_int(5), fr_nil())), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_str(LIVE))), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
    assert_true(f.l->looked);
}

/* A value that is not a timestamp is never taken over. */
static void test_foreign_value(void **state)
{
    (void)state;
    f.l->looked = 1;
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1, fr_str("6f1c0e9a8d2b4c7e91a0f3d5b8c2e4a7"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EFOREIGN);
    assert_non_null(strstr(f.c->err.msg, "which is not a legacy timestamp"));
}

/* ------------------------------------------------------------ acquire, 2.2 (WATCH) */

/* in_txn is set from WATCH to EXEC, and only then. */
static void test_watch_in_txn(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 2);
    assert_true(batch_is(&b, 0, "WATCH", f.l->key, f.l->fence_key, NULL));
    assert_true(batch_is(&b, 1, "GET", f.l->key, NULL));
    assert_true(b.in_txn);
    assert_true(am.head.in_txn);
    assert_int_equal(acq(feed_replies(1010, 2, fr_status("OK"), fr_nil())), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "MULTI", NULL));
    assert_true(am.head.in_txn);
    assert_int_equal(acq(feed_replies(1020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 2);
    assert_true(batch_is(&b, 0, "SET", f.l->key, "1795317550", NULL));
    assert_true(batch_is(&b, 1, "INCR", f.l->fence_key, NULL));
    assert_true(am.head.in_txn);
    assert_int_equal(acq(queued(2)), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "EXEC", NULL));
    assert_false(am.head.in_txn);
    assert_int_equal(acq(feed_replies(1030, 1, fr_arr(2, fr_status("OK"), fr_int(4)))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 4);
}

/* Held: UNWATCH ends the transaction, then the value is judged. */
static void test_watch_held_unwatch(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 2, fr_status("OK"), fr_str(LIVE))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "UNWATCH", NULL));
    assert_false(b.in_txn);
    assert_false(am.head.in_txn);
    assert_int_equal(acq(feed_replies(1020, 1, fr_status("OK"))), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
    assert_true(am.head.hint_ms > 0);
}

/* An expired holder taken over by compare-and-set under WATCH; EXEC's
 * reply lost: EAMBIGUOUS. */
static void test_watch_takeover_lost(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 2, fr_status("OK"), fr_str(EXPIRED))),
                     RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    /* that was UNWATCH; now the compare-and-set from the expired value */
    assert_true(batch_is(&b, 0, "WATCH", f.l->key, f.l->fence_key, NULL));
    assert_int_equal(acq(feed_replies(1030, 2, fr_status("OK"), fr_str(EXPIRED))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "MULTI", NULL));
    assert_int_equal(acq(feed_replies(1040, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(2)), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "EXEC", NULL));
    assert_int_equal(acq(feed_fault(1050, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EAMBIGUOUS);
}

/* EXEC refused with an error: DISCARD, then the error. */
static void test_exec_error_discards(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 2, fr_status("OK"), fr_nil())), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(2)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_err("LOADING Redis is loading"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "DISCARD", NULL));
    assert_false(b.in_txn);
    assert_int_equal(acq(feed_replies(1040, 1, fr_status("OK"))), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EPROTO);
    assert_non_null(strstr(f.c->err.msg, "EXEC"));
}

/* EXEC and then DISCARD refused (a server loading refuses both before
 * 2.6): the server's MULTI may still be open, so the connection must be
 * dropped (head.in_txn), or the next operation's commands would be queued
 * in it.  The same for 2.0's fenced write. */
static void test_exec_and_discard_refused(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 2, fr_status("OK"), fr_nil())), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(2)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_err("LOADING Redis is loading"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "DISCARD", NULL));
    assert_int_equal(acq(feed_replies(1040, 1, fr_err("LOADING Redis is loading"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EPROTO);
    assert_true(am.head.in_txn);

    /* 2.0 */
    memset(&am, 0, sizeof am);
    assert_int_equal(acq_start(0), RELOCK__STEP_SEND);
    assert_int_equal(plain_txn(fr_err("LOADING Redis is loading")), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "DISCARD", NULL));
    assert_int_equal(acq(feed_replies(1030, 1, fr_err("LOADING Redis is loading"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EPROTO);
    assert_true(am.head.in_txn);
}

/* A beaten EXEC (nil) is BUSY, looked at again at once. */
static void test_watch_beaten(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 2, fr_status("OK"), fr_nil())), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_int_equal(acq(queued(2)), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1030, 1, fr_nil())), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
    assert_int_equal(am.head.hint_ms, 0);
}

/* ------------------------------------------------------------ acquire, EVAL */

/* NOSCRIPT: the same call again by EVAL; the script's lost reply: read
 * the key back. */
static void test_script_noscript_then_lost(void **state)
{
    (void)state;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH | RELOCK_CAP_EVAL), RELOCK__STEP_SEND);
    assert_string_equal(b.cmd[0].argv[0], "EVALSHA");
    assert_false(b.in_txn);
    assert_int_equal(acq(feed_replies(1010, 1, fr_err("NOSCRIPT No matching script"))),
                     RELOCK__STEP_SEND);
    assert_string_equal(b.cmd[0].argv[0], "EVAL");
    assert_int_equal(acq(feed_fault(1020, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GET", f.l->key, NULL));
    assert_int_equal(acq(feed_fault(1030, RELOCK__FAULT_UNSENT, 0)), RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_EAMBIGUOUS);
}

/* Bridge: a token with a TTL (another program's lock) is waited out. */
static void test_script_bridge_token_waits(void **state)
{
    (void)state;
    f.c->mode = RELOCK_MODE_BRIDGE;
    assert_int_equal(acq_start(RELOCK_CAP_WATCH | RELOCK_CAP_EVAL), RELOCK__STEP_SEND);
    assert_int_equal(acq(feed_replies(1010, 1,
                                      fr_arr(3, fr_int(0), fr_int(2500),
                                             fr_str("6f1c0e9a8d2b4c7e91a0f3d5b8c2e4a7")))),
                     RELOCK__STEP_DONE);
    assert_int_equal(am.head.st, RELOCK_BUSY);
    assert_int_equal(am.head.hint_ms, 2500);
}

/* ------------------------------------------------------------ release, extend */

static void held_lock(const char *value, long long fence, uint64_t valid_until)
{
    snprintf(f.l->value, sizeof f.l->value, "%s", value);
    f.l->fence = fence;
    f.l->acquired = 1;
    f.l->valid_until = valid_until;
}

/* 2.0 release: GET and the break counter together, then DEL, then the
 * notice (best effort). */
static void test_plain_release(void **state)
{
    (void)state;
    char bkey[RELOCK__KEY_MAX];
    assert_int_equal(relock__breaks_key(f.l->key, bkey, sizeof bkey), 0);
    held_lock("1795317550", 5, 5000);
    f.l->breaks_known = 1;
    f.l->breaks = 1;
    f.c->conn.caps = 0;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 3);
    assert_true(batch_is(&b, 0, "GET", f.l->key, NULL));
    assert_true(batch_is(&b, 1, "GET", bkey, NULL));
    assert_true(batch_is(&b, 2, "GET", f.l->fence_key, NULL));
    assert_int_equal(upd(feed_replies(2010, 3, fr_str("1795317550"), fr_str("1"), fr_str("7"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "DEL", f.l->key, NULL));
    assert_int_equal(upd(feed_replies(2020, 1, fr_int(1))), RELOCK__STEP_SEND);
    assert_string_equal(b.cmd[0].argv[0], "PUBLISH");
    assert_int_equal(upd(feed_fault(2030, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_OK); /* the notice is best effort */
    assert_int_equal(f.c->err.pub.status, RELOCK_OK);
}

/* 2.0 release: broken since (the break counter moved): LOST, nothing
 * deleted; validity passed: LOST, nothing deleted. */
static void test_plain_release_broken_or_expired(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.l->breaks_known = 1;
    f.l->breaks = 1;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(2010, 3, fr_str("1795317550"), fr_str("2"), fr_str("7"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "it was broken"));

    relock__err_clear(&f.c->err);
    memset(&um, 0, sizeof um);
    assert_int_equal(upd(feed_none(6000)), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(6010, 3, fr_str("1795317550"), fr_str("1"), fr_str("7"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "it expired; not deleted"));
}

/* 2.0 release of a handle that knows only its value and fence (adopted):
 * the fence counter in a later epoch than the fence means a break since,
 * and the same timestamp is another holder's: LOST, nothing deleted. */
static void test_plain_release_adopted_after_break(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.l->breaks_known = 0;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 2);
    assert_true(batch_is(&b, 1, "GET", f.l->fence_key, NULL));
    assert_int_equal(upd(feed_replies(2010, 2, fr_str("1795317550"), fr_str("4294967303"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "it was broken"));
}

/* 2.0 extend: after its validity, LOST without a command. */
static void test_plain_extend_expired(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    um.extend = 1;
    um.ttl_ms = 1000;
    um.head.want_fleet = 1;
    relock__feed in = feed_none(5000);
    in.fleet_ms = NOW_MS;
    assert_int_equal(upd(in), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "it expired (without WATCH"));
}

/* 2.0 extend: GETSET returned another value: we have just written over
 * it; LOST, said so. */
static void test_plain_extend_getset_other(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    um.extend = 1;
    um.ttl_ms = 1000;
    um.head.want_fleet = 1;
    relock__feed in = feed_none(2000);
    in.fleet_ms = NOW_MS + 1000;
    assert_int_equal(upd(in), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 2); /* breaks not known: GET and the fence counter */
    assert_true(batch_is(&b, 1, "GET", f.l->fence_key, NULL));
    assert_int_equal(upd(feed_replies(2010, 2, fr_str("1795317550"), fr_str("7"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GETSET", f.l->key, "1795317551", NULL));
    assert_int_equal(upd(feed_replies(2020, 1, fr_str(LIVE))), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "now overwritten by our new timestamp"));
    assert_string_equal(f.l->value, "1795317550"); /* not ours */
}

/* 2.0 extend: the GETSET's reply lost: EAMBIGUOUS, and the value it
 * carried noted; the next extend finds that value while the lock is valid
 * and takes it as its own (it was ours); after the validity it would not. */
static void test_plain_extend_lost_then_found(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    um.extend = 1;
    um.ttl_ms = 1000;
    um.head.want_fleet = 1;
    relock__feed in = feed_none(2000);
    in.fleet_ms = NOW_MS + 1000;
    assert_int_equal(upd(in), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(2010, 2, fr_str("1795317550"), fr_str("7"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GETSET", f.l->key, "1795317551", NULL));
    assert_int_equal(upd(feed_fault(2020, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_EAMBIGUOUS);
    assert_string_equal(f.l->value, "1795317550");
    assert_string_equal(f.l->unsure_value, "1795317551");
    /* the next extend: GET finds our GETSET's value */
    relock__err_clear(&f.c->err);
    memset(&um, 0, sizeof um);
    um.extend = 1;
    um.ttl_ms = 1000;
    um.head.want_fleet = 1;
    in = feed_none(2100);
    in.fleet_ms = NOW_MS + 2000;
    assert_int_equal(upd(in), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(2110, 2, fr_str("1795317551"), fr_str("7"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "GETSET", f.l->key, "1795317552", NULL));
    assert_int_equal(upd(feed_replies(2120, 1, fr_str("1795317551"))), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_OK);
    assert_string_equal(f.l->value, "1795317552");
    assert_null(f.l->unsure_value);
}

/* The same value found after the validity ended: LOST, not taken. */
static void test_plain_extend_lost_then_expired(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.l->unsure_value = strdup("1795317551");
    memset(&um, 0, sizeof um); /* a release, after the validity */
    assert_int_equal(upd(feed_none(6000)), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(6010, 1, fr_str("1795317551"))), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_string_equal(f.l->value, "1795317550");
}

/* EVAL release: a GETSET loser's write followed once, under the fence,
 * while our validity remains. */
static void test_script_release_follows_loser(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.c->conn.caps = RELOCK_CAP_WATCH | RELOCK_CAP_EVAL;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    assert_string_equal(b.cmd[0].argv[0], "EVALSHA");
    assert_string_equal(b.cmd[0].argv[5], "1795317550"); /* expected */
    assert_string_equal(b.cmd[0].argv[6], "5");          /* fence */
    assert_int_equal(upd(feed_replies(2010, 1, fr_arr(2, fr_int(0), fr_str("1795317551")))),
                     RELOCK__STEP_SEND);
    assert_string_equal(b.cmd[0].argv[5], "1795317551");
    assert_string_equal(b.cmd[0].argv[6], "5");
    assert_int_equal(upd(feed_replies(2020, 1, fr_arr(2, fr_int(1), fr_int(3)))),
                     RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_OK);
    assert_int_equal(f.l->loser_writes, 1);
    assert_int_equal(f.l->waiters, 3);
}

/* ... but not once our validity has passed, nor from an adopted handle. */
static void test_script_release_no_follow_after_validity(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.c->conn.caps = RELOCK_CAP_WATCH | RELOCK_CAP_EVAL;
    assert_int_equal(upd(feed_none(6000)), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(6010, 1, fr_arr(2, fr_int(0), fr_str("1795317551")))),
                     RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "the key now holds 1795317551"));
}

/* WATCH release: the fence compared inside the watch; the delete's EXEC
 * lost: EAMBIGUOUS. */
static void test_watch_release_lost(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.c->conn.caps = RELOCK_CAP_WATCH;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    assert_int_equal(b.n, 3);
    assert_true(batch_is(&b, 0, "WATCH", f.l->key, f.l->fence_key, NULL));
    assert_true(batch_is(&b, 2, "GET", f.l->fence_key, NULL));
    assert_true(um.head.in_txn);
    assert_int_equal(upd(feed_replies(2010, 3, fr_status("OK"), fr_str("1795317550"),
                                      fr_str("5"))),
                     RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(2020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "DEL", f.l->key, NULL));
    assert_int_equal(upd(queued(2)), RELOCK__STEP_SEND); /* DEL, PUBLISH */
    assert_true(batch_is(&b, 0, "EXEC", NULL));
    assert_int_equal(upd(feed_fault(2030, RELOCK__FAULT_LOST, 0)), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_EAMBIGUOUS);
    assert_non_null(strstr(f.c->err.msg, "release job: connection lost after the request"));
}

/* WATCH release: the fence moved (a break, or another acquisition):
 * UNWATCH, and LOST with our value named. */
static void test_watch_release_fence_moved(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.c->conn.caps = RELOCK_CAP_WATCH;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    assert_int_equal(upd(feed_replies(2010, 3, fr_status("OK"), fr_str("1795317550"),
                                      fr_str("6"))),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&b, 0, "UNWATCH", NULL));
    assert_false(um.head.in_txn);
    assert_int_equal(upd(feed_replies(2020, 1, fr_status("OK"))), RELOCK__STEP_DONE);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "holds our value, but another holder acquired"));
}

/* A WATCH beaten every time: four rounds, then LOST, "kept changing". */
static void test_watch_release_kept_changing(void **state)
{
    (void)state;
    held_lock("1795317550", 5, 5000);
    f.c->conn.caps = RELOCK_CAP_WATCH;
    assert_int_equal(upd(feed_none(2000)), RELOCK__STEP_SEND);
    relock__step s = RELOCK__STEP_SEND;
    int rounds = 0;
    for (; rounds < 10 && s == RELOCK__STEP_SEND; rounds++) {
        assert_true(batch_is(&b, 0, "WATCH", f.l->key, f.l->fence_key, NULL));
        assert_int_equal(upd(feed_replies(2010, 3, fr_status("OK"), fr_str("1795317550"),
                                          fr_str("5"))),
                         RELOCK__STEP_SEND);
        assert_int_equal(upd(feed_replies(2020, 1, fr_status("OK"))), RELOCK__STEP_SEND);
        assert_int_equal(upd(queued(2)), RELOCK__STEP_SEND);
        s = upd(feed_replies(2030, 1, fr_nil()));
    }
    assert_int_equal(rounds, 4);
    assert_int_equal(um.head.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "the key kept changing"));
}

/* ------------------------------------------------------------ adopt */

static void test_adopt_validity(void **state)
{
    (void)state;
    snprintf(f.l->value, sizeof f.l->value, "1795317558");
    relock__ts_adopt m;
    memset(&m, 0, sizeof m);
    relock__feed in = feed_none(100);
    in.fleet_ms = NOW_MS;
    assert_int_equal(relock__ts_adopt_step(&m, f.l, &in, &b), RELOCK__STEP_DONE);
    /* until V * 1000 = NOW + 9300 ms, less 1% + 2 ms */
    assert_int_equal(f.l->valid_until, 100 + 9300 - (9300 / 100 + 2));
    /* No clock: the validity stays unknown, and no error is left. */
    f.l->valid_until = 0;
    memset(&m, 0, sizeof m);
    in = feed_fault(100, RELOCK__FAULT_UNSENT, 0);
    assert_int_equal(relock__ts_adopt_step(&m, f.l, &in, &b), RELOCK__STEP_DONE);
    assert_int_equal(m.head.st, RELOCK_OK);
    assert_int_equal(f.l->valid_until, 0);
    assert_int_equal(f.c->err.pub.status, RELOCK_OK);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_plain_first_attempt),
        T(test_getset_unexpired_loses),
        T(test_getset_expired_wins),
        T(test_getset_gone_wins),
        T(test_getset_other_unit_loses),
        T(test_getset_lost_is_ambiguous),
        T(test_lost_before_exec_is_eio),
        T(test_queued_error_sends_no_exec),
        T(test_setnx_lost_read_back),
        T(test_setnx_lost_read_back_error),
        T(test_exec_and_discard_refused),
        T(test_setnx_lost_read_back_other),
        T(test_waiter_looks_first),
        T(test_busy_marks_looked),
        T(test_foreign_value),
        T(test_watch_in_txn),
        T(test_watch_held_unwatch),
        T(test_watch_takeover_lost),
        T(test_exec_error_discards),
        T(test_watch_beaten),
        T(test_script_noscript_then_lost),
        T(test_script_bridge_token_waits),
        T(test_plain_release),
        T(test_plain_release_broken_or_expired),
        T(test_plain_release_adopted_after_break),
        T(test_plain_extend_expired),
        T(test_plain_extend_getset_other),
        T(test_plain_extend_lost_then_found),
        T(test_plain_extend_lost_then_expired),
        T(test_script_release_follows_loser),
        T(test_script_release_no_follow_after_validity),
        T(test_watch_release_lost),
        T(test_watch_release_fence_moved),
        T(test_watch_release_kept_changing),
        T(test_adopt_validity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
