/*
 * The machines the blocking API and the asynchronous client share for
 * durability (src/algo/durable.h), the owner record (src/algo/ownrec.h) and the
 * server's clock (src/algo/clock.h), fed by hand.  Against real servers:
 * it_durable, it_owner, it_clock and it_async_records_*.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "durable.h"
#include "fakereply.h"
#include "ownrec.h"

static fake f;
static relock__batch out;

static int setup(void **state)
{
    (void)state;
    f = fake_new();
    f.c->conn.major = 7;
    snprintf(f.l->value, sizeof f.l->value, "%s", "v1");
    f.l->valid_until = 10000;
    relock__batch_reset(&out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(&f);
    return 0;
}

static int has(const char *what)
{
    if (strstr(f.c->err.msg, what))
        return 1;
    print_error("message: %s\n", f.c->err.msg);
    return 0;
}

/* ------------------------------------------------------------ durability */

static relock__step dstep(relock__durable_m *m, relock__feed in)
{
    return relock__durable_step(m, f.l, &in, &out);
}

static void test_durable_wait(void **state)
{
    (void)state;
    f.c->conn.caps = RELOCK_CAP_WAIT;
    f.c->s.durability.replicas = 2;
    f.c->s.durability.timeout_ms = 500;
    relock__durable_m m;
    relock__durable_init(&m, "acquire");
    assert_int_equal(dstep(&m, feed_none(1)), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "WAIT", "2", "500", NULL));
    assert_int_equal(out.n, 1);
    assert_int_equal(out.pinned, 1);
    assert_int_equal(out.slow_ms, 500);
    assert_int_equal(out.in_txn, 0);
    assert_int_equal(dstep(&m, feed_replies(600, 1, fr_int(2))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(m.acked, 2);

    /* fewer */
    relock__durable_init(&m, "extend");
    dstep(&m, feed_none(1));
    dstep(&m, feed_replies(600, 1, fr_int(1)));
    assert_int_equal(m.h.st, RELOCK_EDURABILITY);
    assert_int_equal(m.acked, 1);
    assert_true(has("extend job: 1 of 2 replicas acknowledged within 500 ms (WAIT)"));
    relock__err_clear(&f.c->err);

    /* enough, but after the validity ran out */
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    dstep(&m, feed_replies(10000, 1, fr_int(2)));
    assert_int_equal(m.h.st, RELOCK_EDURABILITY);
    assert_int_equal(m.acked, 2);
    assert_true(has("only after the lease's validity ran out"));
    relock__err_clear(&f.c->err);

    /* the write's connection is gone: the driver's pinned fault */
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    relock__feed in = feed_fault(2, RELOCK__FAULT_UNSENT, 0);
    in.fault_status = RELOCK_EDURABILITY;
    dstep(&m, in);
    assert_int_equal(m.h.st, RELOCK_EDURABILITY);
    assert_int_equal(m.acked, 0);
    assert_true(has("the connection changed between the write and WAIT"));
    assert_true(has("(0 of 2 replicas)"));
    relock__err_clear(&f.c->err);

    /* the reply lost */
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    in = feed_fault(2, RELOCK__FAULT_LOST, 0);
    in.fault_status = RELOCK_EIO;
    in.fault_text = "Connection reset by peer";
    dstep(&m, in);
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_true(has("acquire job: WAIT on 127.0.0.1:6379: Connection reset by peer; the "
                    "replicas' acknowledgement is unknown"));
    relock__err_clear(&f.c->err);

    /* refused by the server */
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    dstep(&m, feed_replies(2, 1, fr_err("ERR unknown command 'WAIT'")));
    assert_int_equal(m.h.st, RELOCK_EUNSUPPORTED);
    relock__err_clear(&f.c->err);

    /* a server without WAIT: refused before anything is sent */
    f.c->conn.caps = 0;
    relock__durable_init(&m, "acquire");
    assert_int_equal(dstep(&m, feed_none(1)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EUNSUPPORTED);
    assert_true(has("has no WAIT"));
    relock__err_clear(&f.c->err);
}

static void test_durable_waitaof(void **state)
{
    (void)state;
    f.c->conn.caps = RELOCK_CAP_WAIT | RELOCK_CAP_WAITAOF;
    f.c->s.durability.replicas = 1;
    f.c->s.durability.aof = 1;
    f.c->s.durability.timeout_ms = 300;
    relock__durable_m m;
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    assert_true(batch_is(&out, 0, "WAITAOF", "1", "1", "300", NULL));
    dstep(&m, feed_replies(2, 1, fr_arr(2, fr_int(1), fr_int(1))));
    assert_int_equal(m.h.st, RELOCK_OK);
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    dstep(&m, feed_replies(2, 1, fr_arr(2, fr_int(0), fr_int(1))));
    assert_int_equal(m.h.st, RELOCK_EDURABILITY);
    assert_true(has("the master did not write it to its append-only file within 300 ms"));
    relock__err_clear(&f.c->err);
    /* WAIT's integer where WAITAOF's pair is due: a protocol error */
    relock__durable_init(&m, "acquire");
    dstep(&m, feed_none(1));
    dstep(&m, feed_replies(2, 1, fr_int(1)));
    assert_int_equal(m.h.st, RELOCK_EPROTO);
    relock__err_clear(&f.c->err);
}

static void test_durable_undone(void **state)
{
    (void)state;
    relock__err kept;
    relock__err_clear(&kept);
    RELOCK__FAIL(&kept, RELOCK_EDURABILITY, "acquire job: 0 of 1 replicas acknowledged");
    assert_int_equal(relock__durable_undone(f.c, &kept, RELOCK_EDURABILITY, RELOCK_OK),
                     RELOCK_EDURABILITY);
    assert_true(has("0 of 1 replicas acknowledged; the lock was not kept (deleted)"));
    relock__err_clear(&f.c->err);
    RELOCK__FAIL(&f.c->err, RELOCK_EIO, "release job: connection lost");
    assert_int_equal(relock__durable_undone(f.c, &kept, RELOCK_EDURABILITY, RELOCK_EIO),
                     RELOCK_EAMBIGUOUS);
    assert_true(has("deleting it again failed (release job: connection lost)"));
    relock__err_clear(&f.c->err);
}

/* ------------------------------------------------------------ owner record */

#define INFO "host=h pid=1 at=2026-01-01T00:00:00Z"

static relock__step ostep(relock__owner_m *m, relock__feed in)
{
    return relock__owner_step(m, f.l, &in, &out);
}

static void test_owner_script(void **state)
{
    (void)state;
    relock__owner_m m;
    assert_int_equal(relock__owner_init(&m, f.l, "v1", 1, INFO), 0); /* owner_info off */
    f.c->s.owner_info = 1;
    f.c->conn.caps = RELOCK_CAP_EVAL | RELOCK_CAP_WATCH | RELOCK_CAP_PEXPIRE;
    assert_int_equal(relock__owner_init(&m, f.l, "v1", 1, INFO), 1);
    ostep(&m, feed_none(1));
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_OWNER_IF_HELD], "3", f.l->key,
                         f.l->fence_key, m.key, "v1", "0", INFO, "1000", NULL));
    ostep(&m, feed_replies(2, 1, fr_err("NOSCRIPT No matching script")));
    assert_true(batch_is(&out, 0, "EVAL", relock__script_source(RELOCK__SCRIPT_OWNER_IF_HELD),
                         "3", f.l->key, f.l->fence_key, m.key, "v1", "0", INFO, "1000", NULL));
    assert_int_equal(ostep(&m, feed_replies(3, 1, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(m.done, 1);
    /* legacy: the fence compared too; a delete sends no record */
    f.c->mode = RELOCK_MODE_LEGACY;
    f.l->fence = 7;
    relock__owner_init(&m, f.l, "v1", 0, "");
    ostep(&m, feed_none(1));
    assert_true(batch_is(&out, 0, "EVALSHA", f.c->sha[RELOCK__SCRIPT_OWNER_IF_HELD], "3", f.l->key,
                         f.l->fence_key, m.key, "v1", "7", "", "1000", NULL));
    ostep(&m, feed_replies(2, 1, fr_int(0)));
    assert_int_equal(m.done, 0);
}

static void test_owner_watch(void **state)
{
    (void)state;
    f.c->s.owner_info = 1;
    f.c->conn.caps = RELOCK_CAP_WATCH | RELOCK_CAP_PEXPIRE; /* no Lua */
    relock__owner_m m;
    relock__owner_init(&m, f.l, "v1", 1, INFO);
    ostep(&m, feed_none(1));
    assert_int_equal(out.n, 2);
    assert_true(batch_is(&out, 0, "WATCH", f.l->key, NULL));
    assert_true(batch_is(&out, 1, "GET", f.l->key, NULL));
    assert_int_equal(m.h.in_txn, 1);
    ostep(&m, feed_replies(2, 2, fr_status("OK"), fr_str("v1")));
    assert_true(batch_is(&out, 0, "MULTI", NULL));
    assert_int_equal(out.n, 1);
    ostep(&m, feed_replies(3, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "PSETEX", m.key, "1000", INFO, NULL));
    assert_int_equal(out.n, 1);
    ostep(&m, feed_replies(4, 1, fr_status("QUEUED")));
    assert_true(batch_is(&out, 0, "EXEC", NULL));
    assert_int_equal(m.h.in_txn, 0);
    ostep(&m, feed_replies(5, 1, fr_arr(1, fr_status("OK"))));
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(m.done, 1);

    /* not ours: UNWATCH, nothing written */
    relock__owner_init(&m, f.l, "v1", 0, "");
    ostep(&m, feed_none(1));
    ostep(&m, feed_replies(2, 2, fr_status("OK"), fr_str("someone else")));
    assert_true(batch_is(&out, 0, "UNWATCH", NULL));
    assert_int_equal(m.h.in_txn, 0);
    ostep(&m, feed_replies(3, 1, fr_status("OK")));
    assert_int_equal(m.done, 0);
    assert_int_equal(m.h.in_txn, 0);

    /* a delete refused inside MULTI: the transaction left for the driver
     * to drop */
    relock__owner_init(&m, f.l, "v1", 0, "");
    ostep(&m, feed_none(1));
    ostep(&m, feed_replies(2, 2, fr_status("OK"), fr_str("v1")));
    ostep(&m, feed_replies(3, 1, fr_status("OK")));
    assert_true(batch_is(&out, 0, "DEL", m.key, NULL));
    ostep(&m, feed_replies(4, 1, fr_err("NOPERM no permission")));
    assert_int_equal(m.done, 0);
    assert_int_equal(m.h.in_txn, 1);
}

static void test_owner_20(void **state)
{
    (void)state;
    f.c->s.owner_info = 1;
    f.c->conn.major = 2;
    f.c->conn.minor = 0;
    f.c->conn.caps = 0;
    f.l->ttl_ms = 1500;
    relock__owner_m m;
    relock__owner_init(&m, f.l, "v1", 1, INFO);
    ostep(&m, feed_none(1));
    assert_true(batch_is(&out, 0, "GET", f.l->key, NULL));
    ostep(&m, feed_replies(2, 1, fr_str("v1")));
    assert_true(batch_is(&out, 0, "SETEX", m.key, "2", INFO, NULL));
    ostep(&m, feed_replies(3, 1, fr_status("OK")));
    assert_int_equal(m.done, 1);
    relock__owner_init(&m, f.l, "v1", 1, INFO);
    ostep(&m, feed_none(1));
    assert_int_equal(ostep(&m, feed_replies(2, 1, fr_nil())), RELOCK__STEP_DONE);
    assert_int_equal(m.done, 0);
}

/* ------------------------------------------------------------ the server's clock */

static void test_clock(void **state)
{
    (void)state;
    relock__clock_m m;
    relock__clock_init(&m, 1);
    assert_int_equal(relock__clock_step(&m, f.l, &(relock__feed){.mono_ms = 100}, &out),
                     RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "TIME", NULL));
    assert_int_equal(out.in_txn, 1); /* inside the asking machine's WATCH */
    relock__feed in = feed_replies(120, 1, fr_arr(2, fr_str("1000"), fr_str("500000")));
    assert_int_equal(relock__clock_step(&m, f.l, &in, &out), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_true(f.c->conn.clock.known);
    /* sent at 100, read at 120: the server read 1000500 at about 110 */
    assert_int_equal(relock__clock_server_ms(&f.c->conn.clock, 130), 1000520);
    assert_false(relock__clock_due(&f.c->conn.clock, 130));

    relock__clock_init(&m, 0);
    relock__clock_step(&m, f.l, &(relock__feed){.mono_ms = 200}, &out);
    assert_int_equal(out.in_txn, 0);
    in = feed_replies(210, 1, fr_int(5));
    relock__clock_step(&m, f.l, &in, &out);
    assert_int_equal(m.h.st, RELOCK_EPROTO);
    relock__err_clear(&f.c->err);
    relock__clock_init(&m, 0);
    relock__clock_step(&m, f.l, &(relock__feed){.mono_ms = 200}, &out);
    relock__clock_step(&m, f.l, &(relock__feed){.mono_ms = 210, .fault = RELOCK__FAULT_LOST,
                                                 .fault_status = RELOCK_EIO,
                                                 .fault_text = "gone"},
                       &out);
    assert_int_equal(m.h.st, RELOCK_EIO);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {T(test_durable_wait), T(test_durable_waitaof),
                                       T(test_durable_undone), T(test_owner_script),
                                       T(test_owner_watch), T(test_owner_20), T(test_clock)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
