/*
 * relock_inspect()'s step machine (src/algo/inspect.h), fed by hand: the reads
 * go in one batch; TTL in seconds on servers without PTTL; a free lock
 * needs no TTL reply; a key of another type is RELOCK_EFOREIGN.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"
#include "inspect.h"

#define OKEY "job relock:owner"

static void test_one_batch(void **state)
{
    (void)state;
    fake f = fake_new();
    f.c->conn.caps = RELOCK_CAP_PEXPIRE;
    relock__batch out;
    relock_inspect_info info;
    memset(&info, 0, sizeof info);
    relock__inspect_m m;
    relock__inspect_init(&m, OKEY, &info);
    relock__feed in = feed_none(1);
    assert_int_equal(relock__inspect_step(&m, f.l, &in, &out), RELOCK__STEP_SEND);
    assert_int_equal(out.n, 4);
    assert_true(batch_is(&out, 0, "GET", f.l->fence_key, NULL));
    assert_true(batch_is(&out, 1, "GET", OKEY, NULL));
    assert_true(batch_is(&out, 2, "GET", "job", NULL));
    assert_true(batch_is(&out, 3, "PTTL", "job", NULL));
    in = feed_replies(2, 4, fr_str("12"), fr_str("host pid 7"), fr_str("1700000000123"),
                      fr_int(-1));
    assert_int_equal(relock__inspect_step(&m, f.l, &in, &out), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(info.fence, 12);
    assert_string_equal(info.owner, "host pid 7");
    assert_int_equal(info.kind, RELOCK_VALUE_TIMESTAMP);
    assert_int_equal(info.ts_unit_ms, 1);
    assert_int_equal(info.ts_ms, 1700000000123LL);
    assert_int_equal(info.pttl_ms, -1);

    /* Without PTTL (before 2.6): TTL, in seconds; no owner key. */
    f.c->conn.caps = 0;
    free(info.value);
    free(info.owner);
    memset(&info, 0, sizeof info);
    relock__inspect_init(&m, "", &info);
    in = feed_none(1);
    relock__inspect_step(&m, f.l, &in, &out);
    assert_int_equal(out.n, 3);
    assert_true(batch_is(&out, 2, "TTL", "job", NULL));
    in = feed_replies(2, 3, fr_nil(), fr_str("0123456789abcdef0123456789abcdef"), fr_int(9));
    relock__inspect_step(&m, f.l, &in, &out);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(info.kind, RELOCK_VALUE_TOKEN);
    assert_int_equal(info.pttl_ms, 9000);
    free(info.value);
    free(info.owner);
    fake_free(&f);
}

static void test_free_and_foreign(void **state)
{
    (void)state;
    fake f = fake_new();
    f.c->conn.caps = RELOCK_CAP_PEXPIRE;
    relock__batch out;
    relock_inspect_info info;
    memset(&info, 0, sizeof info);
    relock__inspect_m m;
    relock__inspect_init(&m, OKEY, &info);
    relock__feed in = feed_none(1);
    relock__inspect_step(&m, f.l, &in, &out);
    /* Free; the TTL's reply lost: not needed. */
    RELOCK__FAIL(&f.c->err, RELOCK_EIO, "PTTL on 127.0.0.1:6379: connection lost");
    in = feed_fault(2, RELOCK__FAULT_LOST, 3, fr_str("4"), fr_nil(), fr_nil());
    relock__inspect_step(&m, f.l, &in, &out);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(info.kind, RELOCK_VALUE_NONE);
    assert_int_equal(info.pttl_ms, -2);
    assert_int_equal(info.fence, 4);
    assert_int_equal(f.c->err.pub.status, RELOCK_OK);

    /* Lost before the value's reply: failed. */
    relock__inspect_init(&m, OKEY, &info);
    in = feed_none(1);
    relock__inspect_step(&m, f.l, &in, &out);
    in = feed_fault(2, RELOCK__FAULT_LOST, 2, fr_str("4"), fr_nil());
    relock__inspect_step(&m, f.l, &in, &out);
    assert_int_equal(m.h.st, RELOCK_EIO);
    relock__err_clear(&f.c->err);

    relock__inspect_init(&m, OKEY, &info);
    in = feed_none(1);
    relock__inspect_step(&m, f.l, &in, &out);
    in = feed_replies(2, 4, fr_nil(), fr_nil(),
                      fr_err("WRONGTYPE Operation against a key holding the wrong kind of value"),
                      fr_int(-1));
    relock__inspect_step(&m, f.l, &in, &out);
    assert_int_equal(m.h.st, RELOCK_EFOREIGN);
    fake_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_batch),
                                       cmocka_unit_test(test_free_and_foreign)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
