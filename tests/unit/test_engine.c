/*
 * The engine's shared helpers (src/algo/engine/engine.h), with replies built by
 * hand: batch building and its limits, the reply-shape check and the
 * messages it records, the EVALSHA-then-EVAL transition, faults.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"

static void test_batch_build(void **state)
{
    (void)state;
    relock__batch b;
    relock__batch_reset(&b);
    const char *ttl = relock__batch_num(&b, 30000);
    assert_string_equal(ttl, "30000");
    const char *set[] = {"SET", "k", "v", "NX", "PX", ttl};
    assert_int_equal(relock__batch_add(&b, 6, set), 0);
    const char *get[] = {"GET", "k"};
    assert_int_equal(relock__batch_add(&b, 2, get), 1);
    assert_int_equal(b.n, 2);
    assert_true(relock__batch_ok(&b));
    assert_true(batch_is(&b, 0, "SET", "k", "v", "NX", "PX", "30000", NULL));
    assert_true(batch_is(&b, 1, "GET", "k", NULL));
    assert_false(batch_is(&b, 1, "GET", NULL));
    assert_int_equal(b.cmd[0].len[5], 5);
    /* Formatted text stays valid as the scratch fills. */
    const char *a = relock__batch_fmt(&b, "%s-%d", "x", 7);
    const char *n = relock__batch_num(&b, -12);
    assert_string_equal(a, "x-7");
    assert_string_equal(n, "-12");
    assert_string_equal(ttl, "30000");
    /* Numbers are written as "%lld" writes them, to both ends. */
    static const long long nums[] = {0, 1, 9, 10, -1, -10, 1234567890123LL, LLONG_MAX,
                                     LLONG_MIN};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "%lld", nums[i]);
        assert_string_equal(relock__batch_num(&b, nums[i]), want);
    }
    relock__batch_reset(&b);
    assert_int_equal(b.n, 0);
    assert_int_equal(b.used, 0);
    assert_int_equal(b.in_txn, 0);
}

static void test_batch_limits(void **state)
{
    (void)state;
    relock__batch b;
    relock__batch_reset(&b);
    const char *ping[] = {"PING"};
    for (int i = 0; i < RELOCK__BATCH_OWN; i++)
        assert_int_equal(relock__batch_add(&b, 1, ping), i);
    assert_true(relock__batch_ok(&b));
    assert_int_equal(relock__batch_add(&b, 1, ping), -1);
    assert_false(relock__batch_ok(&b));
    /* A marked batch stays marked until reset. */
    assert_int_equal(relock__batch_add(&b, 1, ping), -1);
    relock__batch_reset(&b);
    assert_true(relock__batch_ok(&b));

    /* A wide batch: the machine's array, up to its room; a reset goes
     * back to the batch's own; widening a batch that holds commands, or
     * beyond RELOCK__BATCH_CMDS, marks it. */
    static relock__cmd wide[RELOCK__BATCH_CMDS];
    relock__batch_reset(&b);
    relock__batch_widen(&b, wide, RELOCK__BATCH_CMDS);
    for (int i = 0; i < RELOCK__BATCH_CMDS; i++)
        assert_int_equal(relock__batch_add(&b, 1, ping), i);
    assert_true(relock__batch_ok(&b));
    assert_ptr_equal(b.cmd, wide);
    assert_int_equal(relock__batch_add(&b, 1, ping), -1);
    assert_false(relock__batch_ok(&b));
    relock__batch_reset(&b);
    assert_ptr_equal(b.cmd, b.own);
    relock__batch_add(&b, 1, ping);
    relock__batch_widen(&b, wide, 20);
    assert_false(relock__batch_ok(&b));
    relock__batch_reset(&b);
    relock__batch_widen(&b, wide, RELOCK__BATCH_CMDS + 1);
    assert_false(relock__batch_ok(&b));

    /* Too many words in one command. */
    const char *many[RELOCK__CMD_ARGS + 1];
    for (int i = 0; i <= RELOCK__CMD_ARGS; i++)
        many[i] = "w";
    assert_int_equal(relock__batch_add(&b, RELOCK__CMD_ARGS + 1, many), -1);
    assert_false(relock__batch_ok(&b));
    relock__batch_reset(&b);
    assert_int_equal(relock__batch_add(&b, RELOCK__CMD_ARGS, many), 0);

    /* Scratch overflow: NULL, the batch marked, and a command given the
     * NULL is refused. */
    relock__batch_reset(&b);
    char big[RELOCK__BATCH_SCRATCH + 1];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0'; /* one byte too many with its NUL */
    assert_null(relock__batch_fmt(&b, "%s", big));
    assert_false(relock__batch_ok(&b));
    relock__batch_reset(&b);
    big[sizeof big - 2] = '\0';
    assert_non_null(relock__batch_fmt(&b, "%s", big)); /* exactly fills it */
    assert_int_equal(b.used, RELOCK__BATCH_SCRATCH);
    assert_true(relock__batch_ok(&b));
    const char *none = relock__batch_num(&b, 1);
    assert_null(none);
    /* A number that fits exactly, and one byte short of fitting. */
    relock__batch_reset(&b);
    big[RELOCK__BATCH_SCRATCH - 5] = '\0';
    assert_non_null(relock__batch_fmt(&b, "%s", big));
    assert_string_equal(relock__batch_num(&b, -12), "-12"); /* 4 bytes with its NUL */
    assert_int_equal(b.used, RELOCK__BATCH_SCRATCH);
    relock__batch_reset(&b);
    assert_non_null(relock__batch_fmt(&b, "%s", big));
    assert_null(relock__batch_num(&b, -123));
    assert_false(relock__batch_ok(&b));
    relock__batch_reset(&b);
    const char *cmd[] = {"GET", none};
    assert_int_equal(relock__batch_add(&b, 2, cmd), -1);
    assert_false(relock__batch_ok(&b));
}

static void test_reply_shapes(void **state)
{
    (void)state;
    assert_true(relock__reply_is(fr_status("OK"), "s"));
    assert_false(relock__reply_is(fr_status("OK"), "b"));
    assert_true(relock__reply_is(fr_nil(), "bn"));
    assert_true(relock__reply_is(fr_str("v"), "bn"));
    assert_false(relock__reply_is(fr_int(1), "bn"));
    assert_true(relock__reply_is(fr_int(1), "?"));
    assert_false(relock__reply_is(NULL, "?"));
    assert_false(relock__reply_is(fr_err("ERR x"), "sbina"));
    assert_true(relock__reply_is(fr_err("ERR x"), "e"));

    redisReply *two = fr_arr(2, fr_int(1), fr_int(7));
    assert_true(relock__reply_is(two, "a"));
    assert_true(relock__reply_is(two, "a[ii]"));
    assert_true(relock__reply_is(two, "a[i]"));
    assert_true(relock__reply_is(two, "a[ii$]"));
    assert_false(relock__reply_is(two, "a[i$]"));
    assert_false(relock__reply_is(two, "a[iii]"));
    assert_false(relock__reply_is(two, "a[ib]"));
    assert_true(relock__reply_is(two, "a[i(bi)]"));
    assert_true(relock__reply_is(two, "a[??$]"));
    /* A letter after an array's elements is still a choice. */
    assert_true(relock__reply_is(fr_nil(), "a[si$]n"));
    assert_true(relock__reply_is(fr_nil(), "na[si$]"));
    assert_false(relock__reply_is(fr_status("OK"), "na[si$]"));
    redisReply *exec = fr_arr(2, fr_status("OK"), fr_int(3));
    assert_true(relock__reply_is(exec, "na[si$]"));
    assert_false(relock__reply_is(exec, "na[s$]"));
    /* Elements that are not there never match, even with '?'. */
    assert_false(relock__reply_is(fr_arr(0), "a[?]"));
    assert_true(relock__reply_is(fr_arr(0), "a[$]"));
    assert_true(relock__reply_is(fr_arr(3, fr_int(0), fr_int(-1), fr_str("v")), "a[ii(bn)]"));
    fr_free_all();
}

static void test_reply_check_messages(void **state)
{
    (void)state;
    fake f = fake_new();
    relock_client *c = f.c;
    assert_int_equal(relock__reply_check(c, fr_status("OK"), "s", "WATCH"), RELOCK_OK);
    assert_int_equal(c->err.pub.status, RELOCK_OK);

    assert_int_equal(relock__reply_check(c, fr_int(3), "bn", "GET"), RELOCK_EPROTO);
    assert_string_equal(c->err.msg, "GET on 127.0.0.1:6379: unexpected integer reply");
    relock__err_clear(&c->err);

    assert_int_equal(relock__reply_check(c, fr_err("ERR unknown command 'DELEX'"), "i",
                                         "DELEX IFEQ"),
                     RELOCK_EPROTO);
    assert_string_equal(c->err.msg,
                        "DELEX IFEQ on 127.0.0.1:6379: server error: ERR unknown command 'DELEX'");
    assert_string_equal(c->err.server, "ERR unknown command 'DELEX'");
    relock__err_clear(&c->err);

    assert_int_equal(relock__reply_check(c,
                                         fr_err("WRONGTYPE Operation against a key holding "
                                                "the wrong kind of value"),
                                         "s", "SET NX PX"),
                     RELOCK_EFOREIGN);
    assert_non_null(strstr(c->err.msg, "SET NX PX on 127.0.0.1:6379: the key holds a value"));
    relock__err_clear(&c->err);

    /* The first error recorded stays. */
    relock__reply_check(c, fr_nil(), "i", "first");
    relock__reply_check(c, fr_nil(), "i", "second");
    assert_non_null(strstr(c->err.msg, "first"));
    relock__err_clear(&c->err);

    /* Without a server (a driver without connections) the message still
     * reads. */
    c->conn.srv = NULL;
    assert_int_equal(relock__reply_check(c, fr_arr(0), "i", "PTTL"), RELOCK_EPROTO);
    assert_string_equal(c->err.msg, "PTTL on (no server): unexpected array reply");
    fake_free(&f);
}

static void test_script_calls(void **state)
{
    (void)state;
    fake f = fake_new();
    relock_client *c = f.c;
    relock__batch b;
    relock__batch_reset(&b);
    const char *args[] = {"k", "fk", "tok", "30000"};
    assert_int_equal(relock__batch_script(&b, c, RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4, args, 0),
                     0);
    assert_true(batch_is(&b, 0, "EVALSHA", c->sha[RELOCK__SCRIPT_MODERN_ACQUIRE], "2", "k",
                         "fk", "tok", "30000", NULL));
    assert_int_equal(strlen(c->sha[RELOCK__SCRIPT_MODERN_ACQUIRE]), 40);
    relock__batch_reset(&b);
    assert_int_equal(relock__batch_script(&b, c, RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4, args, 1),
                     0);
    assert_true(batch_is(&b, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_MODERN_ACQUIRE),
                         "2", "k", "fk", "tok", "30000", NULL));
    /* Refused shapes. */
    relock__batch_reset(&b);
    assert_int_equal(relock__batch_script(&b, c, RELOCK__SCRIPT_CAS, 3, 2, args, 0), -1);
    assert_false(relock__batch_ok(&b));
    relock__batch_reset(&b);
    assert_int_equal(relock__batch_script(&b, c, RELOCK__NSCRIPTS, 0, 0, args, 0), -1);

    /* NOSCRIPT on EVALSHA: once, then EVAL; the second NOSCRIPT (EVAL
     * cannot say it, but a proxy could) is the machine's to judge. */
    int by_eval = 0;
    relock__feed in = feed_replies(5, 1, fr_err("NOSCRIPT No matching script. Use EVAL."));
    assert_int_equal(relock__script_again(&in, 0, &by_eval), 1);
    assert_int_equal(by_eval, 1);
    assert_int_equal(relock__script_again(&in, 0, &by_eval), 0);
    by_eval = 0;
    in = feed_replies(5, 1, fr_err("ERR Error running script"));
    assert_int_equal(relock__script_again(&in, 0, &by_eval), 0);
    assert_int_equal(by_eval, 0);
    in = feed_replies(5, 1, fr_int(1));
    assert_int_equal(relock__script_again(&in, 0, &by_eval), 0);
    /* The reply is not there (a fault): nothing to retry. */
    in = feed_fault(5, RELOCK__FAULT_LOST, 0);
    assert_int_equal(relock__script_again(&in, 0, &by_eval), 0);
    assert_int_equal(by_eval, 0);
    fake_free(&f);
}

static void test_head_and_faults(void **state)
{
    (void)state;
    fake f = fake_new();
    relock__mhead h;
    memset(&h, 0, sizeof h);
    relock__batch b;
    relock__batch_reset(&b);
    b.in_txn = 1;
    assert_int_equal(relock__send(&h, &b), RELOCK__STEP_SEND);
    assert_int_equal(h.in_txn, 1);
    b.in_txn = 0;
    relock__send(&h, &b);
    assert_int_equal(h.in_txn, 0);
    assert_int_equal(relock__done(&h, RELOCK_BUSY), RELOCK__STEP_DONE);
    assert_int_equal(h.st, RELOCK_BUSY);

    /* A fault's words are recorded when nothing is yet (a driver that
     * recorded none of its own), and the driver's own record is kept
     * otherwise. */
    relock__feed in = feed_fault(9, RELOCK__FAULT_UNSENT, 0);
    assert_int_equal(relock__fault_fail(f.c, &in), RELOCK_EIO);
    assert_string_equal(f.c->err.msg, "connect to 127.0.0.1:6379: refused");
    in.fault_text = "other words";
    in.fault_status = RELOCK_ENOMEM;
    assert_int_equal(relock__fault_fail(f.c, &in), RELOCK_ENOMEM);
    assert_string_equal(f.c->err.msg, "connect to 127.0.0.1:6379: refused");
    fake_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_build),          cmocka_unit_test(test_batch_limits),
        cmocka_unit_test(test_reply_shapes),         cmocka_unit_test(test_reply_check_messages),
        cmocka_unit_test(test_script_calls),         cmocka_unit_test(test_head_and_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
