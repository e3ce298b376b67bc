/*
 * Reading Redis Cluster redirections and the READONLY reply of a demoted
 * master (src/core/cluster.c, sentinel.c), and the operation core's
 * connection to a node a redirection names (src/core/routing.c), without
 * a server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "internal.h"

static redisReply reply_of(int type, const char *text)
{
    redisReply r;
    memset(&r, 0, sizeof r);
    r.type = type;
    r.str = (char *)text;
    r.len = strlen(text);
    return r;
}

/* The host of the node that answered: an empty host in a redirection
 * means this one. */
static const char cur_host[] = "10.1.2.3";

static void redirect(const char *text, enum relock__redir_kind kind, const char *host, int port)
{
    redisReply r = reply_of(REDIS_REPLY_ERROR, text);
    relock__redirect to;
    enum relock__redir_kind got = relock__redirect_parse(cur_host, &r, &to);
    if (got != kind)
        fail_msg("\"%s\": kind %d, expected %d", text, (int)got, (int)kind);
    assert_int_equal(to.kind, kind);
    if (kind == RELOCK__REDIR_MOVED || kind == RELOCK__REDIR_ASK) {
        assert_string_equal(to.host, host);
        assert_int_equal(to.port, port);
    }
}

static void test_redirections(void **state)
{
    (void)state;
    redirect("MOVED 3999 127.0.0.1:6381", RELOCK__REDIR_MOVED, "127.0.0.1", 6381);
    {
        redisReply r = reply_of(REDIS_REPLY_ERROR, "MOVED 3999 127.0.0.1:6381");
        relock__redirect to;
        relock__redirect_parse(cur_host, &r, &to);
        assert_int_equal(to.slot, 3999);
    }
    redirect("MOVED 16384 127.0.0.1:6381", RELOCK__REDIR_NONE, NULL, 0);
    redirect("ASK 3999 127.0.0.1:6381", RELOCK__REDIR_ASK, "127.0.0.1", 6381);
    redirect("MOVED 0 node-2.example:65535", RELOCK__REDIR_MOVED, "node-2.example", 65535);
    /* IPv6 addresses come without brackets: the port follows the last colon. */
    redirect("MOVED 16383 ::1:7001", RELOCK__REDIR_MOVED, "::1", 7001);
    /* 7.0 with an unknown endpoint: the host we are talking to. */
    redirect("MOVED 12 :7002", RELOCK__REDIR_MOVED, "10.1.2.3", 7002);
    redirect("ASK 12 :7003", RELOCK__REDIR_ASK, "10.1.2.3", 7003);
    redirect("TRYAGAIN Multiple keys request during rehashing of slot", RELOCK__REDIR_TRYAGAIN,
             NULL, 0);
    /* Anything else is the caller's to see. */
    redirect("MOVED", RELOCK__REDIR_NONE, NULL, 0);
    redirect("MOVED x 127.0.0.1:1", RELOCK__REDIR_NONE, NULL, 0);
    redirect("MOVED 1 127.0.0.1", RELOCK__REDIR_NONE, NULL, 0);
    redirect("MOVED 1 127.0.0.1:0", RELOCK__REDIR_NONE, NULL, 0);
    redirect("MOVED 1 127.0.0.1:70000", RELOCK__REDIR_NONE, NULL, 0);
    redirect("MOVED 1 127.0.0.1:12x", RELOCK__REDIR_NONE, NULL, 0);
    redirect("ASKING is not a redirection", RELOCK__REDIR_NONE, NULL, 0);
    redirect("CLUSTERDOWN The cluster is down", RELOCK__REDIR_NONE, NULL, 0);
    redirect("ERR unknown command", RELOCK__REDIR_NONE, NULL, 0);
    redisReply st = reply_of(REDIS_REPLY_STATUS, "MOVED 1 h:1");
    relock__redirect to;
    assert_int_equal(relock__redirect_parse(cur_host, &st, &to), RELOCK__REDIR_NONE);
    assert_int_equal(relock__redirect_parse(cur_host, NULL, &to), RELOCK__REDIR_NONE);
}

/* A node a redirection names gets a connection of its own with the
 * configured server's login (its password), the configured server left
 * as it is: a new start goes there.  The core's client is built by hand,
 * with no loop: finding or adding a node's connection does no I/O. */
static void test_node_keeps_credentials(void **state)
{
    (void)state;
    static relock_client client;
    memset(&client, 0, sizeof client);
    snprintf(client.s.servers[0].host, sizeof client.s.servers[0].host, "seed");
    snprintf(client.s.servers[0].password, sizeof client.s.servers[0].password, "pw");
    client.s.servers[0].port = 7000;
    client.s.nservers = 1;
    relock_async a;
    memset(&a, 0, sizeof a);
    aconn conns[3];
    memset(conns, 0, sizeof conns);
    a.c = &client;
    a.conns = conns;
    a.ncap = 3;
    a.nconns = 1;
    conns[0].a = &a;
    conns[0].srv = &client.s.servers[0];
    a.home = &conns[0];

    aconn *other = relock__a_node_conn(&a, "other", 7001);
    assert_ptr_equal(other, &conns[1]);
    assert_ptr_equal(other->srv, &other->node);
    assert_string_equal(other->srv->host, "other");
    assert_int_equal(other->srv->port, 7001);
    assert_string_equal(other->srv->password, "pw");
    /* The configured server is unchanged: a new start goes there. */
    assert_string_equal(client.s.servers[0].host, "seed");
    assert_ptr_equal(conns[0].srv, &client.s.servers[0]);
    aconn *third = relock__a_node_conn(&a, "third", 7002);
    assert_ptr_equal(third, &conns[2]);
    assert_string_equal(third->srv->host, "third");
    assert_string_equal(third->srv->password, "pw");
    /* A node met again: its connection, not a new one. */
    assert_ptr_equal(relock__a_node_conn(&a, "other", 7001), other);
    assert_int_equal(a.nconns, 3);
}

/* The slot of a key, as CLUSTER KEYSLOT answers (values from Redis's
 * documentation and its cluster tests; 12739 is CRC16/XMODEM's check
 * value 0x31C3 of "123456789"). */
static unsigned slot_of(const char *key)
{
    return relock__cluster_slot(key, strlen(key));
}

static void test_slots(void **state)
{
    (void)state;
    assert_int_equal(slot_of("123456789"), 12739);
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("hello"), 866);
    assert_int_equal(slot_of(""), 0);
    /* A hash tag: only what lies between the first '{' and the next '}'. */
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    assert_int_equal(slot_of("{user1000}.followers"), slot_of("user1000"));
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    /* An empty tag does not count: the whole key is hashed. */
    assert_int_not_equal(slot_of("foo{}{bar}"), slot_of("bar"));
    assert_int_equal(slot_of("foo{}{bar}"), relock__cluster_slot("foo{}{bar}", 10));
    /* A lock key and its side keys share a slot (keys.c). */
    char fence[128];
    assert_int_equal(relock__fence_key("nightly", fence, sizeof fence), 0);
    assert_int_equal(slot_of(fence), slot_of("nightly"));
    assert_int_equal(relock__fence_key("{a}", fence, sizeof fence), 0);
    assert_int_equal(slot_of(fence), slot_of("{a}"));
    /* The length is the caller's: bytes after it are not hashed. */
    assert_int_equal(relock__cluster_slot("foobar", 3), 12182);
}

static void test_readonly(void **state)
{
    (void)state;
    redisReply r = reply_of(REDIS_REPLY_ERROR, "READONLY You can't write against a read only "
                                               "replica.");
    assert_true(relock__sentinel_readonly(&r));
    r = reply_of(REDIS_REPLY_ERROR, "ERR Error running script (call to f_0): @user_script:1: "
                                    "@user_script: 1: -READONLY You can't write against a read "
                                    "only slave.");
    assert_true(relock__sentinel_readonly(&r));
    r = reply_of(REDIS_REPLY_ERROR, "ERR wrong number of arguments");
    assert_false(relock__sentinel_readonly(&r));
    r = reply_of(REDIS_REPLY_STATUS, "READONLY");
    assert_false(relock__sentinel_readonly(&r));
    assert_false(relock__sentinel_readonly(NULL));
}

/* A command's text is hiredis's, for words of every length of one to
 * five digits and every word count a batch allows. */
static void test_command_text(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 12345};
    static char word[12345];
    memset(word, 'x', sizeof word);
    const char *argv[RELOCK__CMD_ARGS];
    size_t len[RELOCK__CMD_ARGS];
    for (int argc = 1; argc <= RELOCK__CMD_ARGS; argc++) {
        for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
            for (int i = 0; i < argc; i++) {
                argv[i] = word;
                len[i] = lens[(k + (size_t)i) % (sizeof lens / sizeof *lens)];
            }
            char *ours = NULL, *theirs = NULL;
            int n = relock__a_fmt_cmd(&ours, argc, argv, len);
            int m = redisFormatCommandArgv(&theirs, argc, argv, len);
            assert_int_equal(n, m);
            assert_memory_equal(ours, theirs, (size_t)m);
            free(ours);
            redisFreeCommand(theirs);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redirections),
        cmocka_unit_test(test_node_keeps_credentials),
        cmocka_unit_test(test_readonly),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_command_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
