/*
 * The fence carry's step machine (src/algo/fence.h), fed by hand: by script, by
 * WATCH where Lua is left out (raised only when lower; a beaten EXEC looks
 * again), and by GET then SETNX before 2.6.  Against real servers:
 * it_fence (whole-tag keys), it_native (without Lua).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"
#include "fence.h"

#define BEFORE "{a} relock:fence"

static fake f;
static relock__batch out;

static int setup(void **state)
{
    (void)state;
    f = fake_new();
    f.c->conn.major = 7;
    relock__batch_reset(&out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(&f);
    return 0;
}

static relock__step step(relock__fence_carry_m *m, relock__feed in)
{
    return relock__fence_carry_step(m, f.l, &in, &out);
}

static void test_script(void **state)
{
    (void)state;
    f.c->conn.caps = RELOCK_CAP_EVAL | RELOCK_CAP_WATCH;
    relock__fence_carry_m m;
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    assert_int_equal(m.way, RELOCK__FW_SCRIPT);
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_FENCE_CARRY], "2",
                         f.l->fence_key, BEFORE, NULL));
    step(&m, feed_replies(2, 1, fr_err("NOSCRIPT No matching script")));
    assert_true(batch_is(&out, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_FENCE_CARRY), "2",
                         f.l->fence_key, BEFORE, NULL));
    assert_int_equal(step(&m, feed_replies(3, 1, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
}

static void test_watch(void **state)
{
    (void)state;
    f.c->conn.caps = RELOCK_CAP_WATCH; /* 7.x without Lua */
    relock__fence_carry_m m;
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    assert_int_equal(m.way, RELOCK__FW_WATCH);
    for (int round = 1; round <= 2; round++) {
        assert_int_equal(m.tries, round);
        assert_true(batch_is(&out, 0, "WATCH", f.l->fence_key, BEFORE, NULL));
        assert_int_equal(m.h.in_txn, 1);
        step(&m, feed_replies(2, 1, fr_status("OK")));
        assert_true(batch_is(&out, 0, "GET", BEFORE, NULL));
        step(&m, feed_replies(3, 1, fr_str("41")));
        assert_true(batch_is(&out, 0, "GET", f.l->fence_key, NULL));
        step(&m, feed_replies(4, 1, fr_str("not a number")));
        assert_true(batch_is(&out, 0, "MULTI", NULL));
        step(&m, feed_replies(5, 1, fr_status("OK")));
        assert_true(batch_is(&out, 0, "SET", f.l->fence_key, "41", NULL));
        assert_int_equal(m.h.in_txn, 1);
        step(&m, feed_replies(6, 1, fr_status("QUEUED")));
        assert_true(batch_is(&out, 0, "EXEC", NULL));
        assert_int_equal(m.h.in_txn, 0);
        /* First round beaten (nil): a second look. */
        step(&m, feed_replies(7, 1, round == 1 ? fr_nil() : fr_arr(1, fr_status("OK"))));
    }
    assert_int_equal(m.h.st, RELOCK_OK);

    /* High enough already: UNWATCH, nothing written. */
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    step(&m, feed_replies(2, 1, fr_status("OK")));
    step(&m, feed_replies(3, 1, fr_str("41")));
    step(&m, feed_replies(4, 1, fr_str("41")));
    assert_true(batch_is(&out, 0, "UNWATCH", NULL));
    assert_int_equal(m.h.in_txn, 0);
    step(&m, feed_replies(5, 1, fr_status("OK")));
    assert_int_equal(m.h.st, RELOCK_OK);

    /* A SET refused inside MULTI (NOPERM), then EXECABORT: an error with
     * the server's words at once, not a race looked at again. */
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    step(&m, feed_replies(2, 1, fr_status("OK")));
    step(&m, feed_replies(3, 1, fr_str("41")));
    step(&m, feed_replies(4, 1, fr_nil()));
    step(&m, feed_replies(5, 1, fr_status("OK")));
    assert_int_equal(step(&m, feed_replies(6, 1, fr_err("NOPERM no permission"))),
                     RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EPROTO);
    assert_int_equal(m.tries, 1);
    assert_int_equal(m.h.in_txn, 1);
    assert_non_null(strstr(f.c->err.msg, "raising the fence counter (SET in MULTI)"));
    relock__err_clear(&f.c->err);

    /* An error reply to a counter's GET is no absent counter. */
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    step(&m, feed_replies(2, 1, fr_status("OK")));
    step(&m, feed_replies(3, 1, fr_err("NOPERM no permission")));
    assert_int_equal(m.h.st, RELOCK_EPROTO);
    assert_non_null(strstr(f.c->err.msg, "reading the fence counter"));
    relock__err_clear(&f.c->err);

    /* A fault inside: failed, the connection to be dropped. */
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    step(&m, feed_replies(2, 1, fr_status("OK")));
    step(&m, feed_fault(3, RELOCK__FAULT_LOST, 0));
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_int_equal(m.h.in_txn, 1);
}

static void test_before_26(void **state)
{
    (void)state;
    f.c->conn.major = 2;
    f.c->conn.minor = 4;
    f.c->conn.caps = RELOCK_CAP_WATCH;
    relock__fence_carry_m m;
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    assert_int_equal(m.way, RELOCK__FW_SETNX);
    assert_true(batch_is(&out, 0, "GET", BEFORE, NULL));
    step(&m, feed_replies(2, 1, fr_str("12")));
    assert_true(batch_is(&out, 0, "SETNX", f.l->fence_key, "12", NULL));
    step(&m, feed_replies(3, 1, fr_int(0)));
    assert_int_equal(m.h.st, RELOCK_OK);

    /* Nothing under the old name: nothing to carry. */
    relock__fence_carry_init(&m, BEFORE);
    step(&m, feed_none(1));
    assert_int_equal(step(&m, feed_replies(2, 1, fr_nil())), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {T(test_script), T(test_watch), T(test_before_26)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
