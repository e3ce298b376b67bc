/*
 * The blocking driver (relock__drive(): on a one-server client an
 * operation of the operation core on the blocking client's poll loop,
 * src/core/pollloop.c) against a real redis-server, with a test machine
 * that sends batches given by the test and records every feed: replies
 * in order from one pipelined batch, the transaction rule (a connection
 * lost inside WATCH is never replaced: the batches until the transaction
 * ends are faults, and only then does a new connection open), a timeout
 * part way through a batch (LOST after the replies that came), the
 * fleet's clock on request, a machine that ends inside a transaction
 * (its connection dropped), and the probe without INFO.  The connection's
 * facts are read from the core's connection (aconn, src/core/core.h).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "core/routing.h"
#include "core/pollloop.h"
#include "testclient.h"
#include "testutil.h"

#define MAXB 6

/* One batch the test machine sends: up to four commands of up to six
 * words (NULL-terminated each). */
typedef struct tbatch {
    const char *cmd[4][7];
    int in_txn;
} tbatch;

typedef struct tmachine {
    relock__mhead h;
    const tbatch *b;
    int nb;
    /* Before sending batch `kill_before`, the server closes every other
     * client's connection, and the test waits until the close has
     * reached the client (if kill_before > 0). */
    int kill_before;
    /* The core's connection the machine runs on (core_conn()). */
    const aconn *cn;
    /* Records, one per step. */
    int steps;
    int nreply[MAXB + 1];
    relock__fault fault[MAXB + 1];
    char text[MAXB + 1][4][64]; /* each reply: its string, or its type and integer */
    char fault_text[MAXB + 1][512];
    int conn_in_txn[MAXB + 1]; /* the connection is held by a transaction */
    int conn_open[MAXB + 1];
    long long fleet[MAXB + 1];
    unsigned long connects[MAXB + 1];
} tmachine;

static void describe(const redisReply *r, char *out, size_t len)
{
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        snprintf(out, len, "%s", r->str);
        break;
    case REDIS_REPLY_INTEGER:
        snprintf(out, len, ":%lld", r->integer);
        break;
    case REDIS_REPLY_NIL:
        snprintf(out, len, "nil");
        break;
    default:
        snprintf(out, len, "array %zu", r->elements);
    }
}

static relock__step tstep(void *vm, relock_lock *l, const relock__feed *in, relock__batch *out)
{
    tmachine *m = vm;
    int s = m->steps++;
    m->nreply[s] = in->nreply;
    m->fault[s] = in->fault;
    snprintf(m->fault_text[s], sizeof m->fault_text[s], "%s", in->fault_text ? in->fault_text : "");
    for (int i = 0; i < in->nreply && i < 4; i++)
        describe(in->reply[i], m->text[s][i], sizeof m->text[s][i]);
    m->conn_in_txn[s] = m->cn->txn_owner != NULL;
    m->conn_open[s] = m->cn->ac != NULL;
    m->fleet[s] = in->fleet_ms;
    m->connects[s] = l->c->connects;
    relock__err_clear(&l->c->err); /* each batch's error on its own */
    if (s >= m->nb)
        return relock__done(&m->h, RELOCK_OK);
    if (m->kill_before == s && s > 0) {
        free(testsrv_cmd(&tu_srv, "CLIENT KILL TYPE normal"));
        tu_sleep_ms(300); /* the server's close has reached the client */
    }
    relock__batch_reset(out);
    for (int i = 0; i < 4 && m->b[s].cmd[i][0]; i++) {
        int argc = 0;
        while (m->b[s].cmd[i][argc])
            argc++;
        assert_true(relock__batch_add(out, argc, m->b[s].cmd[i]) >= 0);
    }
    out->in_txn = m->b[s].in_txn;
    return relock__send(&m->h, out);
}

static relock_lock *lock_on(relock_client *c)
{
    static char name[] = "drive";
    relock_lock *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->c = c;
    l->name = name;
    l->key = name;
    return l;
}

/* The core's connection a lock named "drive" goes on.  A connection
 * never moves (core.h), so it stays this one for the client's life,
 * closed and opened again inside it. */
static const aconn *core_conn(relock_client *c)
{
    const aconn *cn = relock__poll_conn(c, "drive");
    assert_non_null(cn);
    return cn;
}

static void run(relock_client *c, tmachine *m, const tbatch *b, int nb)
{
    m->b = b;
    m->nb = nb;
    m->cn = core_conn(c);
    relock_lock *l = lock_on(c);
    assert_int_equal(relock__drive(l, tstep, m), RELOCK_OK);
    free(l);
    assert_int_equal(m->steps, nb + 1);
}

static void test_pipelined_batch(void **state)
{
    (void)state;
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
    static const tbatch b[] = {
        {{{"DEL", "drv:k", "drv:n", NULL},
          {"SET", "drv:k", "v", NULL},
          {"GET", "drv:k", NULL},
          {"INCR", "drv:n", NULL}},
         0},
    };
    tmachine m = {0};
    run(c, &m, b, 1);
    assert_int_equal(m.nreply[0], 0); /* the first call: no replies */
    assert_int_equal(m.nreply[1], 4);
    assert_int_equal(m.fault[1], RELOCK__FAULT_NONE);
    assert_string_equal(m.text[1][1], "OK");
    assert_string_equal(m.text[1][2], "v");
    assert_string_equal(m.text[1][3], ":1");
    relock_client_free(c);
}

/* Decision 86 through the driver: inside WATCH a lost connection is not
 * replaced; every batch until the transaction's end is a fault (the one
 * ending it included); the batch after connects again.  The server
 * closes the connection while the machine holds it: the core writes the
 * GET on it without looking first (an operation's batches follow one
 * another at once), so the GET is LOST, and the EXEC after it UNSENT. */
static void test_transaction_not_replaced(void **state)
{
    (void)state;
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
    static const tbatch b[] = {
        {{{"WATCH", "drv:t", NULL}}, 1},
        {{{"GET", "drv:t", NULL}}, 1},
        {{{"EXEC", NULL}}, 0},
        {{{"PING", NULL}}, 0},
    };
    tmachine m = {0};
    m.kill_before = 1;
    run(c, &m, b, 4);
    assert_int_equal(m.fault[1], RELOCK__FAULT_NONE);
    assert_string_equal(m.text[1][0], "OK");
    assert_int_equal(m.conn_in_txn[1], 1);
    /* The GET: written on the closed connection, no reply. */
    assert_int_equal(m.fault[2], RELOCK__FAULT_LOST);
    assert_int_equal(m.nreply[2], 0);
    assert_non_null(strstr(m.fault_text[2], "127.0.0.1:"));
    assert_int_equal(m.conn_in_txn[2], 1);
    assert_int_equal(m.conn_open[2], 0);
    assert_int_equal(m.connects[2], m.connects[1]);
    /* EXEC, still inside: refused without a new connection.  The
     * connection stays the operation's until its machine has judged this
     * feed (core.h), so the transaction ends with the next batch. */
    assert_int_equal(m.fault[3], RELOCK__FAULT_UNSENT);
    assert_int_equal(m.nreply[3], 0);
    assert_non_null(strstr(m.fault_text[3], "the connection of a transaction was lost before its end"));
    assert_int_equal(m.conn_open[3], 0);
    assert_int_equal(m.connects[3], m.connects[1]);
    /* Outside: a new connection. */
    assert_int_equal(m.fault[4], RELOCK__FAULT_NONE);
    assert_string_equal(m.text[4][0], "PONG");
    assert_int_equal(m.conn_in_txn[4], 0);
    assert_int_equal(m.conn_open[4], 1);
    assert_int_equal(m.connects[4], m.connects[1] + 1);
    relock_client_free(c);
}

/* No reply within command_timeout_ms part way through a batch: the
 * replies that came are fed, then LOST. */
static void test_timeout_part_way(void **state)
{
    (void)state;
    const char *set[] = {"command_timeout_ms", "300", NULL};
    relock_client *c = tu_client(tu_srv.port, "modern", set);
    static const tbatch b[] = {
        {{{"SET", "drv:a", "1", NULL}, {"BLPOP", "drv:empty", "2", NULL}, {"PING", NULL}}, 0},
        {{{"GET", "drv:a", NULL}}, 0},
    };
    tmachine m = {0};
    uint64_t t0 = tu_now_ms();
    run(c, &m, b, 2);
    assert_true(tu_now_ms() - t0 < 1800); /* not the BLPOP's 2 s */
    assert_int_equal(m.nreply[1], 1);
    assert_int_equal(m.fault[1], RELOCK__FAULT_LOST);
    assert_string_equal(m.text[1][0], "OK");
    assert_non_null(strstr(m.fault_text[1], "127.0.0.1:"));
    assert_non_null(strstr(m.fault_text[1], "no reply within 300 ms"));
    assert_int_equal(m.conn_open[1], 0); /* dropped */
    /* The next batch goes on a new connection. */
    assert_int_equal(m.fault[2], RELOCK__FAULT_NONE);
    assert_string_equal(m.text[2][0], "1");
    assert_int_equal(m.connects[2], m.connects[1] + 1);
    relock_client_free(c);
}

static void test_fleet_clock_on_request(void **state)
{
    (void)state;
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
    static const tbatch b[] = {{{{"PING", NULL}}, 0}};
    tmachine m = {0};
    m.h.want_fleet = 1;
    long long before = relock__wall_ms();
    run(c, &m, b, 1);
    long long after = relock__wall_ms();
    for (int s = 0; s < 2; s++) {
        assert_true(m.fleet[s] >= before);
        assert_true(m.fleet[s] <= after);
    }
    /* Not asked: zero. */
    tmachine n = {0};
    run(c, &n, b, 1);
    assert_int_equal(n.fleet[0], 0);
    assert_int_equal(n.fleet[1], 0);
    relock_client_free(c);
}

/* A machine that ends inside WATCH: its connection is dropped (the server
 * would keep the WATCH), and no transaction stays open. */
static void test_end_inside_transaction(void **state)
{
    (void)state;
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
    static const tbatch b[] = {{{{"WATCH", "drv:w", NULL}}, 1}};
    tmachine m = {0};
    run(c, &m, b, 1);
    assert_int_equal(m.conn_in_txn[1], 1);
    assert_int_equal(m.conn_open[1], 1);
    /* after the call: no transaction holds the connection, which is closed */
    assert_null(m.cn->txn_owner);
    assert_null(m.cn->ac);
    int open = -1;
    relock__cluster_counts(c, NULL, &open, NULL);
    assert_int_equal(open, 0);
    relock_client_free(c);
}

/* The probe is a machine too, run by the operation core while it opens a
 * connection.  Where the operator renamed INFO away, the version is told
 * by which harmless commands are refused: TIME and SET NX PX (2.6.12), or
 * without TIME, UNWATCH (2.2). */
static void probe_without(const char *const *renamed, const char *mode, const char *version)
{
    testsrv s;
    assert_int_equal(testsrv_start(&s, renamed), 0);
    relock_client *c = tu_client(s.port, mode, NULL);
    relock_server_info *info = NULL;
    assert_int_equal(relock_client_server(c, &info), RELOCK_OK);
    assert_string_equal(relock_server_info_version(info), version);
    relock_server_info_free(info);
    relock_lock *l = NULL;
    assert_int_equal(relock_try_acquire(c, "probe-cycle", 5000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&s);
}

static void test_probe_without_info(void **state)
{
    (void)state;
    if (testsrv_target_version()) {
        testsrv_note_skip("probe without INFO: the default server only");
        return;
    }
    const char *no_info[] = {"--rename-command", "INFO", "", NULL};
    probe_without(no_info, "modern", "2.6.12");
    const char *no_info_time[] = {"--rename-command", "INFO", "", "--rename-command", "TIME", "",
                                  NULL};
    probe_without(no_info_time, "legacy", "2.2.0");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_batch),
        cmocka_unit_test(test_transaction_not_replaced),
        cmocka_unit_test(test_timeout_part_way),
        cmocka_unit_test(test_fleet_clock_on_request),
        cmocka_unit_test(test_end_inside_transaction),
        cmocka_unit_test(test_probe_without_info),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
