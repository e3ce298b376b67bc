/*
 * The pure parts of Sentinel and Cluster that the blocking and the
 * asynchronous client share (src/core/sentinel.c, src/core/cluster.c): the search
 * through the sentinels and its messages, the role check, what a reply
 * asks of the client, and reading CLUSTER SLOTS; no server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"
#include "internal.h"
#include "routing.h"

static relock__settings sentinel_settings(int n)
{
    relock__settings s;
    memset(&s, 0, sizeof s);
    snprintf(s.sentinel.master, sizeof s.sentinel.master, "m");
    for (int i = 0; i < n; i++) {
        snprintf(s.sentinel.addrs[i].host, sizeof s.sentinel.addrs[i].host, "10.0.0.%d", i + 1);
        s.sentinel.addrs[i].port = 26379;
    }
    s.sentinel.naddrs = n;
    return s;
}

static void test_search_order_and_message(void **state)
{
    (void)state;
    relock__settings s = sentinel_settings(3);
    relock__sentinel_search q;
    /* From the one that helped last, each once, then -1. */
    relock__sentinel_begin(&q, &s, 4);
    assert_int_equal(relock__sentinel_next(&q), 1);
    relock__sentinel_unreachable(&q, &s, "connect to 10.0.0.2:26379: Connection refused");
    assert_int_equal(relock__sentinel_next(&q), 2);
    relock__addr m;
    assert_int_equal(relock__sentinel_answer(&q, &s, fr_nil(), &m), -1);
    assert_int_equal(relock__sentinel_next(&q), 0);
    redisReply *ok = fr_arr(2, fr_str("127.0.0.1"), fr_str("6390"));
    assert_int_equal(relock__sentinel_answer(&q, &s, ok, &m), 0);
    assert_string_equal(m.host, "127.0.0.1");
    assert_int_equal(m.port, 6390);
    relock__sentinel_bad_master(&q, &s, &m, RELOCK_EIO, "not a master (role slave)");
    assert_int_equal(relock__sentinel_next(&q), -1);
    relock__err err;
    relock__err_clear(&err);
    assert_int_equal(relock__sentinel_end(&q, &s, &err), RELOCK_EIO);
    assert_string_equal(err.msg,
                        "no usable master \"m\" from 3 sentinels: sentinel 10.0.0.2:26379: "
                        "Connection refused; sentinel 10.0.0.3:26379 does not know master "
                        "\"m\"; sentinel 10.0.0.1:26379: master at 127.0.0.1:6390: not a "
                        "master (role slave)");
    fr_free_all();
}

static void test_search_replies(void **state)
{
    (void)state;
    relock__settings s = sentinel_settings(1);
    relock__sentinel_search q;
    relock__addr m;
    const struct {
        redisReply *r;
        const char *said;
    } bad[] = {
        {fr_err("ERR unknown command"), "sentinel 10.0.0.1:26379: ERR unknown command"},
        {fr_arr(1, fr_str("h")), "sentinel 10.0.0.1:26379: unexpected reply"},
        {fr_arr(2, fr_str(""), fr_str("1")), "sentinel 10.0.0.1:26379: unexpected reply"},
        {fr_arr(2, fr_str("h"), fr_str("0")), "sentinel 10.0.0.1:26379: bad port \"0\""},
        {fr_arr(2, fr_str("h"), fr_str("7x")), "sentinel 10.0.0.1:26379: bad port \"7x\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        relock__sentinel_begin(&q, &s, 0);
        assert_int_equal(relock__sentinel_next(&q), 0);
        assert_int_equal(relock__sentinel_answer(&q, &s, bad[i].r, &m), -1);
        assert_string_equal(q.tried, bad[i].said);
    }
    /* Credentials the master refuses: the search ends with ECONFIG. */
    relock__sentinel_begin(&q, &s, 0);
    relock__sentinel_next(&q);
    m.port = 1;
    snprintf(m.host, sizeof m.host, "h");
    relock__sentinel_bad_master(&q, &s, &m, RELOCK_ECONFIG, "AUTH refused");
    relock__err err;
    relock__err_clear(&err);
    assert_int_equal(relock__sentinel_end(&q, &s, &err), RELOCK_ECONFIG);
    assert_non_null(strstr(err.msg, "from 1 sentinel: sentinel"));
    /* No sentinel at all. */
    relock__settings none = sentinel_settings(0);
    relock__sentinel_begin(&q, &none, 0);
    assert_int_equal(relock__sentinel_next(&q), -1);
    relock__err_clear(&err);
    assert_int_equal(relock__sentinel_end(&q, &none, &err), RELOCK_ECONFIG);
    assert_string_equal(err.msg, "sentinel.master is \"m\" but sentinel.addrs lists no sentinel");
    assert_int_equal(relock__sentinel_timeout(2000), 500);
    assert_int_equal(relock__sentinel_timeout(100), 100);
    fr_free_all();
}

static void test_role(void **state)
{
    (void)state;
    char role[32];
    assert_false(relock__sentinel_role_by_info(2, 8, 12));
    assert_true(relock__sentinel_role_by_info(2, 8, 11));
    assert_false(relock__sentinel_role_by_info(7, 0, 0));
    assert_int_equal(relock__sentinel_role(fr_arr(3, fr_str("master"), fr_int(0), fr_arr(0)), 0,
                                           role, sizeof role),
                     0);
    assert_int_equal(relock__sentinel_role(fr_arr(2, fr_str("slave"), fr_str("h")), 0, role,
                                           sizeof role),
                     1);
    assert_string_equal(role, "slave");
    assert_int_equal(relock__sentinel_role(fr_err("ERR"), 0, role, sizeof role), -1);
    assert_string_equal(role, "unknown");
    assert_int_equal(relock__sentinel_role(fr_str("# Replication\r\nrole:master\r\n"), 1, role,
                                           sizeof role),
                     0);
    assert_int_equal(relock__sentinel_role(fr_str("# Replication\r\nrole:slave\r\n"), 1, role,
                                           sizeof role),
                     1);
    assert_string_equal(role, "slave");
    fr_free_all();
}

static void test_route(void **state)
{
    (void)state;
    relock__settings plain;
    memset(&plain, 0, sizeof plain);
    relock__settings sent = sentinel_settings(1);
    relock__redirect to;
    redisReply *moved = fr_err("MOVED 12 10.0.0.9:7001");
    redisReply *ask = fr_err("ASK 12 :7002");
    redisReply *again = fr_err("TRYAGAIN Multiple keys request during rehashing of slot");
    redisReply *ro = fr_err("READONLY You can't write against a read only replica.");
    redisReply *other = fr_err("ERR something");
    assert_int_equal(relock__route_reply(&plain, 0, 0, "h", fr_int(1), &to), RELOCK__ROUTE_REPLY);
    assert_int_equal(relock__route_reply(&plain, 0, 0, "h", other, &to), RELOCK__ROUTE_REPLY);
    assert_int_equal(relock__route_reply(&plain, 0, 0, "h", moved, &to), RELOCK__ROUTE_MOVED);
    assert_string_equal(to.host, "10.0.0.9");
    assert_int_equal(to.slot, 12);
    assert_int_equal(relock__route_reply(&plain, 0, 1, "h", ask, &to), RELOCK__ROUTE_ASK);
    assert_string_equal(to.host, "h");
    assert_int_equal(to.port, 7002);
    assert_int_equal(relock__route_reply(&plain, 0, 0, "h", again, &to), RELOCK__ROUTE_TRYAGAIN);
    assert_int_equal(relock__route_reply(&plain, 0, RELOCK__CLUSTER_MAX_REDIRECTS, "h", moved,
                                         &to),
                     RELOCK__ROUTE_TOO_MANY);
    /* Inside a transaction nothing is followed; READONLY without Sentinel
     * is the caller's. */
    assert_int_equal(relock__route_reply(&plain, 1, 0, "h", moved, &to), RELOCK__ROUTE_REPLY);
    assert_int_equal(relock__route_reply(&plain, 0, 0, "h", ro, &to), RELOCK__ROUTE_REPLY);
    /* With Sentinel: READONLY, also inside a transaction; no redirection. */
    assert_int_equal(relock__route_reply(&sent, 0, 0, "h", ro, &to), RELOCK__ROUTE_READONLY);
    assert_int_equal(relock__route_reply(&sent, 1, 0, "h", ro, &to), RELOCK__ROUTE_READONLY);
    assert_int_equal(relock__route_reply(&sent, 0, 0, "h", moved, &to), RELOCK__ROUTE_REPLY);
    assert_int_equal(relock__route_tryagain_ms(0), 10);
    assert_int_equal(relock__route_tryagain_ms(2), 40);
    relock__err err;
    relock__err_clear(&err);
    assert_int_equal(relock__route_too_many(&err, "EVALSHA", 5, moved->str), RELOCK_EIO);
    assert_string_equal(err.msg, "EVALSHA: still redirected after 5 redirections (last: MOVED 12 "
                                 "10.0.0.9:7001): is the cluster being resharded?");
    relock__server srv;
    memset(&srv, 0, sizeof srv);
    snprintf(srv.host, sizeof srv.host, "10.0.0.5");
    srv.port = 6379;
    relock__err_clear(&err);
    assert_int_equal(relock__sentinel_readonly_fail(&err, &sent, "SET", &srv, ro->str), RELOCK_EIO);
    assert_string_equal(err.msg, "SET on 10.0.0.5:6379: the server is now a read-only replica: a "
                                 "failover of \"m\" is under way; the next call asks the "
                                 "sentinels again");
    fr_free_all();
}

typedef struct ranges {
    int n;
    int from[8], to[8], port[8];
    char host[8][64];
} ranges;

static void on_range(void *arg, int from, int to, const char *host, int port)
{
    ranges *r = arg;
    assert_true(r->n < 8);
    r->from[r->n] = from;
    r->to[r->n] = to;
    r->port[r->n] = port;
    snprintf(r->host[r->n], sizeof r->host[r->n], "%s", host);
    r->n++;
}

static void test_slots_parse(void **state)
{
    (void)state;
    ranges got;
    memset(&got, 0, sizeof got);
    redisReply *r = fr_arr(
        5,
        fr_arr(4, fr_int(0), fr_int(5460), fr_arr(3, fr_str("10.0.0.1"), fr_int(7000), fr_str("id")),
               fr_arr(2, fr_str("10.0.0.4"), fr_int(7003))),
        fr_arr(3, fr_int(5461), fr_int(10922), fr_arr(2, fr_str(""), fr_int(7001))),
        fr_arr(3, fr_int(10923), fr_int(16383), fr_arr(2, fr_str("?"), fr_int(7002))),
        fr_arr(3, fr_int(1), fr_int(16384), fr_arr(2, fr_str("x"), fr_int(7009))),
        fr_arr(2, fr_int(1), fr_int(2)));
    assert_int_equal(relock__cluster_slots_parse(r, "via", on_range, &got), 0);
    assert_int_equal(got.n, 2);
    assert_int_equal(got.from[0], 0);
    assert_int_equal(got.to[0], 5460);
    assert_string_equal(got.host[0], "10.0.0.1");
    assert_int_equal(got.port[0], 7000);
    assert_string_equal(got.host[1], "via");
    assert_int_equal(got.port[1], 7001);
    assert_int_equal(relock__cluster_slots_parse(fr_err("ERR cluster support disabled"), "via",
                                                 on_range, &got),
                     -1);
    fr_free_all();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_order_and_message),
        cmocka_unit_test(test_search_replies),
        cmocka_unit_test(test_role),
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_slots_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
