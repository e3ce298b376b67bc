/*
 * The quorum's fan machine (src/algo/quorum.h), fed by hand, server by server:
 * a majority decides while a minority is paused (it is left owing), error
 * replies are not answers, a reply that comes after the majority counts
 * for nothing, NOSCRIPT brings EVAL to that server alone, the fence raise
 * on the majority, a busy lock answered without the silent server, and
 * the clean-up of a failed acquire (announced only after a majority) or
 * a late extend.  Against real servers: it_quorum, it_native (quorum
 * without Lua).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"
#include "quorum.h"

static fake f;
static relock__fanout out;
static redisReply *rep[RELOCK__MAX_SERVERS][1];

static int setup(void **state)
{
    (void)state;
    f = fake_new();
    f.c->s.nservers = 3;
    for (int i = 1; i < 3; i++) {
        strcpy(f.c->s.servers[i].host, "127.0.0.1");
        f.c->s.servers[i].port = 6379 + i;
    }
    f.c->conn.major = 7;
    strcpy(f.l->value, "tok");
    memset(&out, 0, sizeof out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fr_free_all();
    fake_free(&f);
    return 0;
}

/* A round's first feed: these servers reached and written. */
static relock__fanfeed fstart(uint64_t mono, unsigned reached)
{
    relock__fanfeed in;
    memset(&in, 0, sizeof in);
    in.mono_ms = mono;
    in.reached = reached;
    in.written = reached;
    return in;
}

/* A feed of one reply from server i; `written`: servers still written. */
static relock__fanfeed freply(uint64_t mono, unsigned written, int i, redisReply *r)
{
    relock__fanfeed in;
    memset(&in, 0, sizeof in);
    in.mono_ms = mono;
    in.written = written;
    in.from = 1u << i;
    rep[i][0] = r;
    in.srv[i].reply = rep[i];
    in.srv[i].nreply = 1;
    return in;
}

static relock__step step(relock__quorum_m *m, relock__fanfeed in)
{
    return relock__quorum_step(m, f.l, &in, &out);
}

static int is_script(int i, int id, int by_eval)
{
    const relock__cmd *k = &out.b[i].cmd[0];
    if (out.b[i].n != 1)
        return 0;
    const char *want = by_eval ? relock__script_source(id) : f.c->sha[id];
    return strcmp(k->argv[0], by_eval ? "EVAL" : "EVALSHA") == 0 && strcmp(k->argv[1], want) == 0;
}

/* Acquire on 3: servers 0 and 1 win with the same counter while server 2
 * says nothing: decided at once, no raise, server 2 left owing. */
static void test_minority_paused(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    assert_int_equal(step(&m, fstart(0, 0)), RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 7u);
    assert_int_equal(out.round, 1);
    assert_int_equal(out.timeout_ms, 100); /* a tenth of the lease */
    for (int i = 0; i < 3; i++)
        assert_true(is_script(i, RELOCK__SCRIPT_MODERN_ACQUIRE, 0));
    assert_string_equal(out.b[0].cmd[0].argv[5], "tok");
    assert_int_equal(step(&m, fstart(10, 7)), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(12, 6, 0, fr_arr(2, fr_int(1), fr_int(5)))),
                     RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(13, 4, 1, fr_arr(2, fr_int(1), fr_int(5)))),
                     RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 5);
    assert_true(f.l->acquired);
    /* Counted from the send (10), not from the majority's replies (13):
     * the servers started the TTL no earlier than the send. */
    assert_int_equal(f.l->valid_until, relock__valid_until(10, 1000));
    assert_int_equal(m.first.owing, 4u); /* the paused server owes its reply */
}

/* Error replies are not answers: a release where two servers answer with
 * errors and the third is silent is undecided (EAMBIGUOUS), never LOST,
 * and waits for the silent one until its deadline. */
static void test_errors_not_answers(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_RELEASE, 0);
    step(&m, fstart(0, 0));
    assert_true(is_script(1, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    assert_int_equal(step(&m, fstart(0, 7)), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(1, 6, 0, fr_err("READONLY You can't write"))),
                     RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(2, 4, 1, fr_err("LOADING loading"))), RELOCK__STEP_WAIT);
    assert_int_equal(m.r.answered, 0);
    /* time passes, still within the deadline: wait */
    assert_int_equal(step(&m, fstart(99, 0)), RELOCK__STEP_WAIT);
    relock__fanfeed t = fstart(100, 0);
    t.written = 4;
    assert_int_equal(step(&m, t), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EAMBIGUOUS);
    assert_int_equal(m.r.owing, 4u); /* late, but written: it may still run the delete */
    assert_non_null(strstr(f.c->err.msg, "only 0 of 3 servers answered"));
    assert_non_null(strstr(f.c->err.msg, "127.0.0.1:6379: READONLY"));
}

/* Server 0's counter is lower: the majority is raised to the larger one
 * before success; a reply from server 2 to the acquire, arriving during
 * the raise, counts for nothing. */
static void test_raise_and_late_reply(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    step(&m, freply(1, 6, 0, fr_arr(2, fr_int(1), fr_int(3))));
    assert_int_equal(step(&m, freply(2, 4, 1, fr_arr(2, fr_int(1), fr_int(7)))),
                     RELOCK__STEP_SEND);
    assert_int_equal(out.round, 1);
    assert_int_equal(out.mask, 3u); /* the winners only */
    assert_true(is_script(0, RELOCK__SCRIPT_FENCE_RAISE, 0));
    assert_string_equal(out.b[0].cmd[0].argv[4], "7");
    assert_int_equal(step(&m, fstart(3, 3)), RELOCK__STEP_WAIT);
    /* the late acquire reply: not asked in this round */
    assert_int_equal(step(&m, freply(4, 3, 2, fr_arr(2, fr_int(1), fr_int(9)))),
                     RELOCK__STEP_WAIT);
    assert_int_equal(m.r.answered, 0);
    assert_int_equal(step(&m, freply(5, 2, 0, fr_int(7))), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(6, 0, 1, fr_int(7))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->fence, 7);
    /* From the acquire's send, not from its replies nor from the raise. */
    assert_int_equal(f.l->valid_until, relock__valid_until(0, 1000));
}

/* NOSCRIPT from one server: the script's text goes to it alone, within
 * the round; its answer then counts. */
static void test_noscript(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_EXTEND, 2000);
    step(&m, fstart(0, 0));
    assert_true(is_script(2, RELOCK__SCRIPT_PEXPIRE_IF_EQ, 0));
    assert_int_equal(out.timeout_ms, 200);
    step(&m, fstart(0, 7));
    assert_int_equal(step(&m, freply(1, 6, 0, fr_err("NOSCRIPT No matching script"))),
                     RELOCK__STEP_SEND);
    assert_int_equal(out.round, 0);
    assert_int_equal(out.mask, 1u);
    assert_true(is_script(0, RELOCK__SCRIPT_PEXPIRE_IF_EQ, 1));
    /* a second NOSCRIPT from it is an error, not sent again */
    assert_int_equal(step(&m, freply(2, 7, 0, fr_err("NOSCRIPT No matching script"))),
                     RELOCK__STEP_WAIT);
    assert_int_equal(m.r.answered, 0);
    assert_int_equal(step(&m, freply(3, 4, 1, fr_int(1))), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(4, 0, 2, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(f.l->ttl_ms, 2000);
    assert_int_equal(f.l->valid_until, relock__valid_until(0, 2000));
}

/* Two servers say the lock is held: busy at once, without waiting for the
 * silent third, with the shorter PTTL as the hint; the silent one, which
 * may yet say yes, is sent the compare-and-delete. */
static void test_busy_without_the_silent(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    step(&m, freply(1, 6, 0, fr_arr(2, fr_int(0), fr_int(800))));
    assert_int_equal(step(&m, freply(2, 4, 1, fr_arr(2, fr_int(0), fr_int(500)))),
                     RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 4u);
    assert_true(is_script(2, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    assert_int_equal(step(&m, fstart(3, 4)), RELOCK__STEP_DONE); /* need 0: once written */
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 500);
    assert_false(f.l->acquired);
}

/* A release caught half-way (or a holder on one server): server 0 says
 * yes, server 1 says held, server 2 is silent to the deadline.  A majority
 * answered and the lock is held on one of them: busy (a waiter tries
 * again), not an I/O error; the compare-and-delete goes to the win and to
 * the silent server, which may still run the acquire: on its connection,
 * behind the acquire, however late (out.after). */
static void test_split_with_a_silent_server(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    step(&m, freply(1, 6, 0, fr_arr(2, fr_int(1), fr_int(4))));
    assert_int_equal(step(&m, freply(2, 4, 1, fr_arr(2, fr_int(0), fr_int(700)))),
                     RELOCK__STEP_WAIT);
    relock__fanfeed t = fstart(100, 0);
    t.written = 4;
    assert_int_equal(step(&m, t), RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 5u);
    assert_int_equal(out.after, 5u);
    assert_true(is_script(0, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    assert_true(is_script(2, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    step(&m, fstart(101, 5));
    assert_int_equal(step(&m, freply(102, 4, 0, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    /* a release may be half-way: again after a server's timeout */
    assert_int_equal(m.h.hint_ms, 100);
    assert_false(f.l->acquired);
}

/* A round decided by its deadline while requests are in flight: server 0
 * says yes in time, server 1's request was written but its reply is late,
 * and server 2's connection failed after its request was written.  All
 * three may hold the token: the compare-and-delete goes to all three,
 * behind the acquire on each connection still open, and the attempt
 * fails without waiting for the late ones. */
static void test_deadline_with_requests_in_flight(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    assert_int_equal(step(&m, freply(1, 6, 0, fr_arr(2, fr_int(1), fr_int(4)))),
                     RELOCK__STEP_WAIT);
    relock__fanfeed lostf;
    memset(&lostf, 0, sizeof lostf);
    lostf.mono_ms = 2;
    lostf.written = 2;
    lostf.from = 4;
    lostf.srv[2].fault = RELOCK__FAULT_LOST;
    lostf.srv[2].fault_status = RELOCK_EIO;
    assert_int_equal(step(&m, lostf), RELOCK__STEP_WAIT);
    relock__fanfeed t = fstart(100, 0);
    t.written = 2;
    assert_int_equal(step(&m, t), RELOCK__STEP_SEND);
    assert_int_equal(m.first.owing, 2u);
    assert_int_equal(m.first.unsure, 4u);
    assert_int_equal(out.round, 1);
    assert_int_equal(out.mask, 7u);
    assert_int_equal(out.after, 7u);
    for (int i = 0; i < 3; i++)
        assert_true(is_script(i, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    relock__fanfeed d = fstart(101, 7);
    d.written = 3; /* server 2 is connected afresh: its delete not written yet */
    assert_int_equal(step(&m, d), RELOCK__STEP_WAIT);
    /* server 0's delete answered: still waiting for server 2's to be written */
    assert_int_equal(step(&m, freply(102, 2, 0, fr_int(1))), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, fstart(103, 6)), RELOCK__STEP_DONE);
    assert_int_equal(m.r.owing, 6u);
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_false(f.l->acquired);
    assert_non_null(strstr(f.c->err.msg, "only 1 of 3 servers answered"));
}

/* The delete that undoes a failed acquire announces a release (its
 * channel argument) only when the attempt had won a majority: short of
 * one, nothing anyone held is freed, and the notice would wake the waiter
 * itself. */
static void test_undo_announces_only_a_majority(void **state)
{
    (void)state;
    f.c->s.wait.notify = 1;
    char chan[64];
    snprintf(chan, sizeof chan, "%s" RELOCK__NOTIFY_SUFFIX, f.l->key);
    /* Server 0 won, the others are held by someone else: silent. */
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    step(&m, freply(1, 6, 0, fr_arr(2, fr_int(1), fr_int(4))));
    step(&m, freply(2, 4, 1, fr_arr(2, fr_int(0), fr_int(700))));
    assert_int_equal(step(&m, freply(3, 0, 2, fr_arr(2, fr_int(0), fr_int(700)))),
                     RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 1u);
    assert_true(is_script(0, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    assert_string_equal(out.b[0].cmd[0].argv[5], "");
    step(&m, fstart(4, 1));
    assert_int_equal(step(&m, freply(5, 0, 0, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    /* Servers 0 and 1 won, but their counters could not be raised: the
     * lock was held, and its delete tells the waiters. */
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(10, 0));
    step(&m, fstart(10, 7));
    step(&m, freply(11, 6, 0, fr_arr(2, fr_int(1), fr_int(3))));
    assert_int_equal(step(&m, freply(12, 4, 1, fr_arr(2, fr_int(1), fr_int(7)))),
                     RELOCK__STEP_SEND);
    assert_true(is_script(0, RELOCK__SCRIPT_FENCE_RAISE, 0));
    step(&m, fstart(13, 3));
    step(&m, freply(14, 2, 0, fr_err("OOM command not allowed")));
    assert_int_equal(step(&m, freply(15, 0, 1, fr_int(7))), RELOCK__STEP_SEND);
    assert_true(out.mask & 3u);
    assert_true(is_script(0, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    assert_string_equal(out.b[0].cmd[0].argv[5], chan);
    f.c->s.wait.notify = 0;
}

/* Only one of three reachable: that win is deleted, and the error says
 * how many were reachable. */
static void test_unreachable(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 1));
    assert_int_equal(step(&m, freply(1, 0, 0, fr_arr(2, fr_int(1), fr_int(4)))),
                     RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 1u);
    assert_true(is_script(0, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    step(&m, fstart(2, 1));
    assert_int_equal(step(&m, freply(3, 0, 0, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_EIO);
    assert_non_null(strstr(f.c->err.msg, "only 1 of 3 servers reachable"));
}

/* A refused AUTH, fed as a server's fault: RELOCK_ECONFIG naming it. */
static void test_config(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_RELEASE, 0);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    relock__fanfeed in = fstart(1, 0);
    in.written = 6;
    in.from = 1;
    in.srv[0].fault = RELOCK__FAULT_LOST;
    in.srv[0].fault_status = RELOCK_ECONFIG;
    in.srv[0].fault_text = "127.0.0.1:6379: AUTH/SELECT: WRONGPASS invalid";
    assert_int_equal(step(&m, in), RELOCK__STEP_WAIT);
    step(&m, freply(2, 2, 1, fr_int(1)));
    in = fstart(100, 0);
    in.written = 2;
    assert_int_equal(step(&m, in), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_ECONFIG);
    assert_non_null(strstr(f.c->err.msg, "WRONGPASS"));
}

/* An acquire where one server refuses AUTH while the other two answer,
 * one of them saying held: busy (a majority answered without it, and wins
 * without it once the holder is gone), not RELOCK_ECONFIG; our win is
 * deleted.  As docs/configuration.md says of a refused login. */
static void test_config_busy(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, 1000);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    relock__fanfeed in = fstart(1, 0);
    in.written = 6;
    in.from = 1;
    in.srv[0].fault = RELOCK__FAULT_LOST;
    in.srv[0].fault_status = RELOCK_ECONFIG;
    in.srv[0].fault_text = "127.0.0.1:6379: AUTH/SELECT: WRONGPASS invalid";
    assert_int_equal(step(&m, in), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(2, 6, 1, fr_arr(2, fr_int(1), fr_int(4)))),
                     RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(3, 6, 2, fr_arr(2, fr_int(0), fr_int(900)))),
                     RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 2u);
    assert_true(is_script(1, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    step(&m, fstart(4, 2));
    assert_int_equal(step(&m, freply(5, 0, 1, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_BUSY);
    assert_int_equal(m.h.hint_ms, 100); /* split with one server out: looked at again soon */
    assert_false(f.l->acquired);
}

/* An extend answered by a majority, but after its own lease: lost, and
 * our value deleted everywhere. */
static void test_extend_too_late(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_EXTEND, 100);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    step(&m, freply(5, 6, 0, fr_int(1)));
    assert_int_equal(step(&m, freply(150, 4, 1, fr_int(1))), RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 7u);
    assert_int_equal(out.after, 4u); /* server 2 may yet extend: behind it, however late */
    assert_int_equal(out.timeout_ms, 100); /* of the lease held (1000 ms) */
    assert_true(is_script(1, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    step(&m, fstart(150, 7));
    step(&m, freply(151, 6, 0, fr_int(1)));
    assert_int_equal(step(&m, freply(152, 4, 1, fr_int(1))), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_non_null(strstr(f.c->err.msg, "took longer than the 100 ms"));
}

/* An extend that took too long, where server 2's connection failed after
 * its extend was written (it may have run there): the delete that follows
 * goes to server 2 on a new connection, and the clean-up is not decided
 * before that delete is written, however soon the others answer, or the
 * driver would drop it unsent and leave our token on server 2 for the
 * new lease. */
static void test_extend_lost_delete_unwritten(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_EXTEND, 100);
    step(&m, fstart(0, 0));
    step(&m, fstart(0, 7));
    relock__fanfeed lostf;
    memset(&lostf, 0, sizeof lostf);
    lostf.mono_ms = 1;
    lostf.written = 3;
    lostf.from = 4;
    lostf.srv[2].fault = RELOCK__FAULT_LOST;
    lostf.srv[2].fault_status = RELOCK_EIO;
    assert_int_equal(step(&m, lostf), RELOCK__STEP_WAIT);
    step(&m, freply(150, 2, 0, fr_int(1)));
    assert_int_equal(step(&m, freply(150, 0, 1, fr_int(1))), RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 7u);
    assert_true(is_script(2, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    relock__fanfeed d = fstart(151, 7);
    d.written = 3; /* server 2 is connected afresh: its delete not written yet */
    assert_int_equal(step(&m, d), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(152, 2, 0, fr_int(1))), RELOCK__STEP_WAIT);
    if (step(&m, freply(153, 0, 1, fr_int(1))) != RELOCK__STEP_WAIT)
        fail_msg("the extend's clean-up was decided before server 2's delete was written");
    assert_int_equal(step(&m, fstart(154, 4)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_LOST);
    assert_int_equal(m.r.owing, 4u); /* server 2 owes the delete's reply */
}

/* A release on 3 whose server 2 is connected afresh (its delete not
 * written yet) while servers 0 and 1 delete at once: the release is not
 * decided before server 2's delete is written, or the driver would drop it
 * unsent and leave our token on server 2 until its TTL; once written, the
 * majority decides, server 2 owing its reply. */
static void test_release_delete_unwritten(void **state)
{
    (void)state;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_RELEASE, 0);
    assert_int_equal(step(&m, fstart(0, 0)), RELOCK__STEP_SEND);
    assert_int_equal(out.mask, 7u);
    assert_true(is_script(2, RELOCK__SCRIPT_DEL_IF_EQ, 0));
    relock__fanfeed d = fstart(1, 7);
    d.written = 3;
    assert_int_equal(step(&m, d), RELOCK__STEP_WAIT);
    assert_int_equal(step(&m, freply(2, 3, 0, fr_int(1))), RELOCK__STEP_WAIT);
    if (step(&m, freply(3, 3, 1, fr_int(1))) != RELOCK__STEP_WAIT)
        fail_msg("the release was decided before server 2's delete was written");
    assert_int_equal(step(&m, fstart(4, 4)), RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(m.r.owing, 4u); /* server 2 owes the delete's reply */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_minority_paused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_not_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raise_and_late_reply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_undo_announces_only_a_majority, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_without_the_silent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_with_a_silent_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_with_requests_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extend_too_late, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extend_lost_delete_unwritten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_delete_unwritten, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
