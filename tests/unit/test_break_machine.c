/*
 * relock_break()'s step machine (src/algo/break.h), fed replies and faults by
 * hand: each way (script, WATCH, 2.0's GET then transaction, no value
 * before 2.6), what each outcome reports, and the transaction marks.  The
 * same against real servers and the compat proxy: tests/cli/test_break.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "break.h"
#include "fakereply.h"

#define V "1700000000"
#define BKEY "job relock:breaks"
#define CHAN "job relock:released"
#define OKEY "job relock:owner"

static fake f;
static relock__batch out;

static int setup(void **state)
{
    (void)state;
    f = fake_new();
    f.c->conn.caps = RELOCK_CAP_WATCH | RELOCK_CAP_EVAL;
    relock__batch_reset(&out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(&f);
    return 0;
}

static relock__step brk_step(relock__break_m *m, relock__feed in)
{
    return relock__break_step(m, f.l, &in, &out);
}

static void test_script(void **state)
{
    (void)state;
    relock__break_m m;
    relock__break_init(&m, V, 7, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    assert_int_equal(m.way, RELOCK__BW_SCRIPT);
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_BREAK_IF_EQ], "2", "job",
                         f.l->fence_key, V, CHAN, "7", NULL));
    brk_step(&m, feed_replies(2, 1, fr_err("NOSCRIPT No matching script")));
    assert_true(batch_is(&out, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_BREAK_IF_EQ), "2",
                         "job", f.l->fence_key, V, CHAN, "7", NULL));
    assert_int_equal(brk_step(&m, feed_replies(3, 1, fr_int(-2))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_string_equal(f.c->err.msg, "break job: nothing deleted: the key holds that value, but "
                                      "fence 7 is no longer current (another holder acquired "
                                      "since)");
    relock__err_clear(&f.c->err);

    /* Without a value: '' matches anything; deleted (the script told the
     * waiters; no further command). */
    relock__break_init(&m, NULL, 0, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_BREAK_IF_EQ], "2", "job",
                         f.l->fence_key, "", CHAN, "0", NULL));
    assert_int_equal(brk_step(&m, feed_replies(2, 1, fr_int(3))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);

    relock__break_init(&m, V, 0, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    brk_step(&m, feed_replies(2, 1, fr_int(0)));
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_string_equal(f.c->err.msg, "break job: nothing to delete: the key is absent");
    relock__err_clear(&f.c->err);

    relock__break_init(&m, V, 0, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    brk_step(&m, feed_fault(2, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    assert_string_equal(f.c->err.msg, "break job: connection lost after the request was sent; "
                                      "whether the key was deleted is unknown");
}

/* 2.2 and 2.4: WATCH key and fence, GET, GET fence, MULTI, DEL, INCR,
 * EXEC; then the owner record and the notice, best effort. */
static void test_watch(void **state)
{
    (void)state;
    f.c->conn.caps = RELOCK_CAP_WATCH;
    relock__break_m m;
    relock__break_init(&m, V, 7, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    assert_int_equal(m.way, RELOCK__BW_WATCH);
    assert_true(batch_is(&out, 0, "WATCH", "job", f.l->fence_key, NULL));
    assert_int_equal(m.h.in_txn, 1);
    brk_step(&m, feed_replies(2, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    brk_step(&m, feed_replies(3, 1, fr_str(V)));
    assert_true(batch_is(&out, 0, "GET", f.l->fence_key, NULL));
    assert_int_equal(m.h.in_txn, 1);
    brk_step(&m, feed_replies(4, 1, fr_str("7")));
    assert_true(batch_is(&out, 0, "MULTI", NULL));
    brk_step(&m, feed_replies(5, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "DEL", "job", NULL));
    brk_step(&m, feed_replies(6, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "INCR", f.l->fence_key, NULL));
    assert_int_equal(m.h.in_txn, 1);
    brk_step(&m, feed_replies(7, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "EXEC", NULL));
    assert_int_equal(m.h.in_txn, 0);
    brk_step(&m, feed_replies(8, 1, fr_arr(2, fr_int(1), fr_int(8))));
    assert_true(batch_is(&out, 0, "DEL", OKEY, NULL));
    /* The owner record's DEL failing is forgotten. */
    brk_step(&m, feed_fault(9, RELOCK__FAULT_LOST, 0));
    assert_true(batch_is(&out, 0, "PUBLISH", CHAN, "1", NULL));
    assert_int_equal(brk_step(&m, feed_replies(10, 1, fr_int(0))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.c->err.pub.status, RELOCK_OK);

    /* The fence moved: UNWATCH, busy. */
    relock__break_init(&m, V, 7, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    brk_step(&m, feed_replies(2, 1, fr_status("OK")));
    brk_step(&m, feed_replies(3, 1, fr_str(V)));
    brk_step(&m, feed_replies(4, 1, fr_str("9")));
    assert_true(batch_is(&out, 0, "UNWATCH", NULL));
    assert_int_equal(m.h.in_txn, 0);
    brk_step(&m, feed_replies(5, 1, fr_status("OK")));
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_non_null(strstr(f.c->err.msg, "fence 7 is no longer current"));
    relock__err_clear(&f.c->err);

    /* Beaten every time: five rounds, then busy. */
    relock__break_init(&m, V, 0, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    for (int round = 0; round < RELOCK__BREAK_WATCH_TRIES; round++) {
        assert_int_equal(m.tries, round + 1);
        assert_true(batch_is(&out, 0, "WATCH", "job", f.l->fence_key, NULL));
        brk_step(&m, feed_replies(2, 1, fr_status("OK")));
        brk_step(&m, feed_replies(3, 1, fr_str(V)));
        brk_step(&m, feed_replies(4, 1, fr_status("OK")));
        brk_step(&m, feed_replies(5, 1, fr_status("QUEUED")));
        brk_step(&m, feed_replies(6, 1, fr_status("QUEUED")));
        brk_step(&m, feed_replies(7, 1, fr_nil()));
        fr_free_all();
    }
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_string_equal(f.c->err.msg, "break job: nothing deleted: the key kept changing");
    relock__err_clear(&f.c->err);

    /* A fault inside the transaction: failed, left inside it (the driver
     * drops the connection); a lost EXEC: ambiguous. */
    relock__break_init(&m, V, 0, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    brk_step(&m, feed_replies(2, 1, fr_status("OK")));
    brk_step(&m, feed_fault(3, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_int_equal(m.h.in_txn, 1);
    relock__err_clear(&f.c->err);
    relock__break_init(&m, V, 0, BKEY, CHAN, OKEY);
    brk_step(&m, feed_none(1));
    brk_step(&m, feed_replies(2, 1, fr_status("OK")));
    brk_step(&m, feed_replies(3, 1, fr_str(V)));
    brk_step(&m, feed_replies(4, 1, fr_status("OK")));
    brk_step(&m, feed_replies(5, 1, fr_status("QUEUED")));
    brk_step(&m, feed_replies(6, 1, fr_status("QUEUED")));
    brk_step(&m, feed_fault(7, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
}

/* 2.0: GET, then MULTI, GET, DEL, INCRBY fence (a new epoch), INCR
 * breaks, EXEC; a value that arrived in between is put back. */
static void test_plain_window(void **state)
{
    (void)state;
    f.c->conn.caps = 0;
    relock__break_m m;
    relock__break_init(&m, V, 0, BKEY, CHAN, "");
    brk_step(&m, feed_none(1));
    assert_int_equal(m.way, RELOCK__BW_PLAIN);
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    assert_int_equal(m.h.in_txn, 0);
    brk_step(&m, feed_replies(2, 1, fr_str(V)));
    assert_true(batch_is(&out, 0, "MULTI", NULL));
    assert_int_equal(m.h.in_txn, 1);
    brk_step(&m, feed_replies(3, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "GET", "job", NULL));
    brk_step(&m, feed_replies(4, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "DEL", "job", NULL));
    brk_step(&m, feed_replies(5, 1, fr_status("QUEUED")));
    /* the fence into its next epoch: a handle that knows only its fence
     * sees the break */
    assert_true(batch_is(&out, 0, "INCRBY", f.l->fence_key, "4294967296", NULL));
    brk_step(&m, feed_replies(6, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "INCR", BKEY, NULL));
    brk_step(&m, feed_replies(7, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "EXEC", NULL));
    brk_step(&m, feed_replies(8, 1, fr_arr(4, fr_str("1700000999"), fr_int(1), fr_int(4294967301LL), fr_int(2))));
    assert_true(batch_is(&out, 0, "SETNX", "job", "1700000999", NULL));
    brk_step(&m, feed_replies(9, 1, fr_int(1)));
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_string_equal(f.c->err.msg, "break job: the key changed just before the delete (Redis "
                                      "2.0 has no WATCH); the new value was put back");
    assert_null(m.got);
    relock__err_clear(&f.c->err);

    /* A fence cannot be compared on 2.0. */
    strcpy(f.c->conn.version, "2.0.4");
    relock__break_init(&m, V, 3, BKEY, CHAN, "");
    assert_int_equal(brk_step(&m, feed_none(1)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EUNSUPPORTED);
    assert_string_equal(f.c->err.msg, "break job: a fence cannot be compared on Redis 2.0.4: its "
                                      "fence counter also counts failed attempts");
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {T(test_script), T(test_watch), T(test_plain_window)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
