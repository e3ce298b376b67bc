/*
 * The migration audit's step machine (src/algo/scan.h), fed by hand: a
 * Cluster walk asks for each master's node and the markers' slots between
 * its runs, a run ends within RELOCK__SCAN_RUN_STEPS batches and the next
 * goes on where it stopped, servers without SCAN are walked with KEYS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fakereply.h"
#include "scan.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

/* One step; returns the step's answer, the replies freed. */
static relock__step step(fake *f, relock__scan_m *m, relock__feed in, relock__batch *out)
{
    relock__step s = relock__scan_step(m, f->l, &in, out);
    fr_free_all();
    return s;
}

static void test_cluster_runs(void **state)
{
    (void)state;
    fake f = fake_new();
    f.c->conn.major = 7;
    f.c->conn.caps = RELOCK_CAP_SCAN | RELOCK_CAP_PEXPIRE;
    relock_scan_result *r = calloc(1, sizeof *r);
    relock__scan_m m;
    assert_int_equal(relock__scan_init(&m, f.c, "app:*", NULL, NULL, r, 0, 1, 1000, 1), RELOCK_OK);
    relock__batch out;
    assert_int_equal(step(&f, &m, feed_none(1), &out), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "CLUSTER", "SLOTS", NULL));
    /* Two masters, one of them serving two ranges. */
    relock__step s = step(&f, &m,
                          feed_replies(1, 1,
                                       fr_arr(3,
                                              fr_arr(3, fr_int(0), fr_int(99),
                                                     fr_arr(2, fr_str("10.0.0.1"), fr_int(7001))),
                                              fr_arr(3, fr_int(100), fr_int(199),
                                                     fr_arr(2, fr_str("10.0.0.2"), fr_int(7002))),
                                              fr_arr(3, fr_int(200), fr_int(16383),
                                                     fr_arr(2, fr_str("10.0.0.1"), fr_int(7001))))),
                          &out);
    assert_int_equal(s, RELOCK__STEP_DONE);
    assert_int_equal(m.h.st, RELOCK_OK);
    assert_int_equal(m.masters, 2);
    assert_int_equal(relock_scan_result_cluster_masters(r), 2);
    assert_int_equal(m.next, RELOCK__SCAN_NODE);
    assert_int_equal(m.node, 0);
    assert_string_equal(m.addr[0].host, "10.0.0.1");
    assert_int_equal(m.addr[1].port, 7002);
    /* Master 0: one SCAN, its two keys read in one batch. */
    assert_int_equal(step(&f, &m, feed_none(2), &out), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "SCAN", "0", "MATCH", "app:*", "COUNT", "200", NULL));
    step(&f, &m, feed_replies(2, 1, fr_arr(2, fr_str("0"), fr_arr(2, fr_str("app:a"), fr_str("app:b")))),
         &out);
    assert_int_equal(out.n, 4);
    assert_true(batch_is(&out, 0, "GET", "app:a", NULL));
    assert_true(batch_is(&out, 3, "PTTL", "app:b", NULL));
    s = step(&f, &m, feed_replies(3, 4, fr_str(TOKEN), fr_int(5000), fr_str("12"), fr_int(-1)), &out);
    assert_int_equal(s, RELOCK__STEP_DONE);
    assert_int_equal(m.next, RELOCK__SCAN_NODE);
    assert_int_equal(m.node, 1);
    /* Master 1: nothing; then the markers, each where its slot lives. */
    step(&f, &m, feed_none(4), &out);
    assert_true(batch_is(&out, 0, "SCAN", "0", "MATCH", "app:*", "COUNT", "200", NULL));
    s = step(&f, &m, feed_replies(4, 1, fr_arr(2, fr_str("0"), fr_arr(0))), &out);
    assert_int_equal(s, RELOCK__STEP_DONE);
    assert_int_equal(m.next, RELOCK__SCAN_KEY);
    assert_string_equal(m.route, relock_scan_result_marker_key(r));
    step(&f, &m, feed_none(5), &out);
    assert_true(batch_is(&out, 0, "GET", relock_scan_result_marker_key(r), NULL));
    s = step(&f, &m, feed_replies(5, 1, fr_nil()), &out);
    assert_int_equal(s, RELOCK__STEP_DONE);
    assert_int_equal(m.next, RELOCK__SCAN_KEY);
    step(&f, &m, feed_none(6), &out);
    assert_int_equal(out.n, 1);
    s = step(&f, &m, feed_replies(6, 1, fr_nil()), &out);
    assert_int_equal(s, RELOCK__STEP_DONE);
    assert_int_equal(m.next, RELOCK__SCAN_END);
    assert_int_equal(relock__scan_end(&m, f.c, m.h.st), RELOCK_OK);
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_MODERN), 1);
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_UNKNOWN), 1);
    assert_true(relock_scan_result_complete(r));
    /* The clock: the feed's monotonic time after the one of init. */
    assert_int_equal(relock_scan_result_now_ms(r), 1000 + 5);
    relock_scan_result_free(r);
    fake_free(&f);
}

/* A cursor that keeps the walk going: each run ends within its bound, and
 * the next one goes on with the same cursor. */
static void test_run_bound(void **state)
{
    (void)state;
    fake f = fake_new();
    f.c->conn.caps = RELOCK_CAP_SCAN | RELOCK_CAP_PEXPIRE;
    relock_scan_result *r = calloc(1, sizeof *r);
    relock__scan_m m;
    assert_int_equal(relock__scan_init(&m, f.c, NULL, NULL, NULL, r, 0, 0, 0, 0), RELOCK_OK);
    relock__batch out;
    relock__feed in = feed_none(0);
    int sent = 0;
    relock__step s;
    while ((s = step(&f, &m, in, &out)) == RELOCK__STEP_SEND && sent < 1000) {
        sent++;
        in = feed_replies(0, 1, fr_arr(2, fr_str("17"), fr_arr(0)));
    }
    assert_int_equal(s, RELOCK__STEP_DONE);
    assert_true(sent <= RELOCK__SCAN_RUN_STEPS + 1 && sent < RELOCK__DRIVE_MAX_STEPS);
    assert_int_equal(m.next, RELOCK__SCAN_MORE);
    assert_int_equal(step(&f, &m, feed_none(0), &out), RELOCK__STEP_SEND);
    assert_true(batch_is(&out, 0, "SCAN", "17", "MATCH", "app:*", "COUNT", "200", NULL) ||
                batch_is(&out, 0, "SCAN", "17", "MATCH", "*", "COUNT", "200", NULL));
    relock__scan_end(&m, f.c, RELOCK_OK);
    relock_scan_result_free(r);
    fake_free(&f);
}

/* Before 2.8: DBSIZE, then KEYS; TTL in seconds; a wrong type's TYPE. */
static void test_keys_fallback(void **state)
{
    (void)state;
    fake f = fake_new();
    f.c->conn.caps = 0;
    relock_scan_result *r = calloc(1, sizeof *r);
    relock__scan_m m;
    assert_int_equal(relock__scan_init(&m, f.c, "*", NULL, NULL, r, 0, 0, 0, 0), RELOCK_OK);
    relock__batch out;
    step(&f, &m, feed_none(0), &out);
    assert_true(batch_is(&out, 0, "DBSIZE", NULL));
    step(&f, &m, feed_replies(0, 1, fr_int(2)), &out);
    assert_true(batch_is(&out, 0, "KEYS", "*", NULL));
    step(&f, &m, feed_replies(0, 1, fr_arr(2, fr_str("a"), fr_str("z"))), &out);
    assert_true(batch_is(&out, 1, "TTL", "a", NULL));
    step(&f, &m,
         feed_replies(0, 4, fr_str("1000000000"), fr_int(5),
                      fr_err("ERR Operation against a key holding the wrong kind of value"),
                      fr_int(-1)),
         &out);
    assert_true(batch_is(&out, 0, "TYPE", "z", NULL));
    step(&f, &m, feed_replies(0, 1, fr_status("zset")), &out);
    assert_true(batch_is(&out, 0, "GET", relock_scan_result_marker_key(r), NULL));
    assert_true(relock_scan_result_keys_fallback(r));
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_BRIDGE), 1);
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_OTHER_TYPES), 1);
    assert_int_equal(relock_scan_result_signature(r, RELOCK_SIG_ZSET), 1);
    relock__scan_end(&m, f.c, RELOCK_OK);
    relock_scan_result_free(r);
    fake_free(&f);
}

/* A key list of n keys, prefix%d, as SCAN and KEYS give it. */
static redisReply *key_list(int n, const char *prefix)
{
    redisReply *a = fr_arr(0);
    free(a->element);
    a->element = calloc((size_t)n, sizeof *a->element);
    a->elements = (size_t)n;
    for (int i = 0; i < n; i++) {
        redisReply *e = calloc(1, sizeof *e);
        char k[64];
        e->type = REDIS_REPLY_STRING;
        e->len = (size_t)snprintf(k, sizeof k, "%s%d", prefix, i);
        e->str = strdup(k);
        a->element[i] = e;
    }
    return a;
}

/* The replies to a read batch: GET gives a modern token, or for every
 * other key with wrong the error of a key that is not a string; TTL 5. */
static relock__feed read_replies(redisReply **rep, int n, const char *wrong)
{
    relock__feed in = feed_none(0);
    for (int i = 0; i + 1 < n; i += 2) {
        rep[i] = wrong && i % 4 == 2 ? fr_err(wrong) : fr_str(TOKEN);
        rep[i + 1] = fr_int(5000);
    }
    in.reply = rep;
    in.nreply = n;
    return in;
}

/* Whether batch b reads keys from..from + n - 1 of prefix%d: GET, and
 * ttl, for each. */
static int reads_keys(const relock__batch *b, const char *prefix, int from, int n,
                      const char *ttl)
{
    if (b->n != 2 * n || !relock__batch_ok(b))
        return 0;
    for (int i = 0; i < n; i++) {
        char k[64];
        snprintf(k, sizeof k, "%s%d", prefix, from + i);
        if (!batch_is(b, 2 * i, "GET", k, NULL) || !batch_is(b, 2 * i + 1, ttl, k, NULL))
            return 0;
    }
    return 1;
}

/* A round trip carries the reads of a whole SCAN page (COUNT 200), and on
 * servers without SCAN of a couple of hundred keys of the KEYS list; the
 * TYPE of the keys that are not strings goes in one batch too. */
static void test_wide_reads(void **state)
{
    (void)state;
    static redisReply *rep[1024];
    fake f = fake_new();
    f.c->conn.caps = RELOCK_CAP_SCAN | RELOCK_CAP_PEXPIRE;
    relock_scan_result *r = calloc(1, sizeof *r);
    relock__scan_m m;
    assert_int_equal(relock__scan_init(&m, f.c, "app:*", NULL, NULL, r, 0, 0, 0, 0), RELOCK_OK);
    relock__batch out;
    step(&f, &m, feed_none(0), &out);
    assert_true(batch_is(&out, 0, "SCAN", "0", "MATCH", "app:*", "COUNT", "200", NULL));
    step(&f, &m, feed_replies(0, 1, fr_arr(2, fr_str("0"), key_list(230, "app:"))), &out);
    assert_true(reads_keys(&out, "app:", 0, 230, "PTTL"));
    step(&f, &m, read_replies(rep, out.n, NULL), &out);
    assert_true(batch_is(&out, 0, "GET", relock_scan_result_marker_key(r), NULL));
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_MODERN), 230);
    relock__scan_end(&m, f.c, RELOCK_OK);
    relock_scan_result_free(r);

    /* Before 2.8: a KEYS list of 1000, read a couple of hundred keys at a
     * time; every other key of a batch is not a string, and their TYPEs
     * follow. */
    f.c->conn.caps = 0;
    r = calloc(1, sizeof *r);
    assert_int_equal(relock__scan_init(&m, f.c, "*", NULL, NULL, r, 0, 0, 0, 0), RELOCK_OK);
    step(&f, &m, feed_none(0), &out);
    step(&f, &m, feed_replies(0, 1, fr_int(1000)), &out);
    assert_true(batch_is(&out, 0, "KEYS", "*", NULL));
    step(&f, &m, feed_replies(0, 1, key_list(1000, "k")), &out);
    int batches = 0, hashes = 0;
    const char *wrong = "ERR Operation against a key holding the wrong kind of value";
    for (int at = 0; at < 1000 && batches < 100; batches++) {
        int n = out.n / 2;
        assert_true(n >= 100);
        assert_true(reads_keys(&out, "k", at, n, "TTL"));
        step(&f, &m, read_replies(rep, out.n, wrong), &out);
        assert_int_equal(out.n, n / 2);
        for (int i = 0; i < n / 2; i++) {
            char k[64];
            snprintf(k, sizeof k, "k%d", at + 2 * i + 1);
            assert_true(batch_is(&out, i, "TYPE", k, NULL));
            rep[i] = fr_status("hash");
        }
        relock__feed in = feed_none(0);
        in.reply = rep;
        in.nreply = out.n;
        hashes += out.n;
        step(&f, &m, in, &out);
        at += n;
    }
    assert_true(batches <= 1000 / 100);
    assert_true(batch_is(&out, 0, "GET", relock_scan_result_marker_key(r), NULL));
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_EXAMINED), 1000);
    assert_int_equal(relock_scan_result_signature(r, RELOCK_SIG_HASH), hashes);
    assert_true(hashes >= 450);
    relock__scan_end(&m, f.c, RELOCK_OK);
    relock_scan_result_free(r);
    fake_free(&f);
}

/* The next page's SCAN goes with the reads of the page before it: one
 * round trip a page; a key of the first page that is not a string gets
 * its TYPE after the next page came. */
static void test_scan_ahead(void **state)
{
    (void)state;
    static redisReply *rep[1024];
    fake f = fake_new();
    f.c->conn.caps = RELOCK_CAP_SCAN | RELOCK_CAP_PEXPIRE;
    relock_scan_result *r = calloc(1, sizeof *r);
    relock__scan_m m;
    assert_int_equal(relock__scan_init(&m, f.c, "app:*", NULL, NULL, r, 0, 0, 0, 0), RELOCK_OK);
    relock__batch out;
    step(&f, &m, feed_none(0), &out);
    step(&f, &m, feed_replies(0, 1, fr_arr(2, fr_str("17"), key_list(200, "app:a"))), &out);
    assert_int_equal(out.n, 401);
    assert_true(relock__batch_ok(&out));
    assert_true(batch_is(&out, 399, "PTTL", "app:a199", NULL));
    assert_true(batch_is(&out, 400, "SCAN", "17", "MATCH", "app:*", "COUNT", "200", NULL));
    relock__feed in = read_replies(rep, 400, "WRONGTYPE Operation against a key holding the "
                                             "wrong kind of value");
    rep[400] = fr_arr(2, fr_str("0"), key_list(3, "app:b"));
    in.nreply = 401;
    step(&f, &m, in, &out);
    assert_int_equal(out.n, 100);
    assert_true(batch_is(&out, 0, "TYPE", "app:a1", NULL));
    assert_true(batch_is(&out, 99, "TYPE", "app:a199", NULL));
    for (int i = 0; i < 100; i++)
        rep[i] = fr_status("zset");
    in = feed_none(0);
    in.reply = rep;
    in.nreply = 100;
    step(&f, &m, in, &out);
    /* The last page: no SCAN after it. */
    assert_true(reads_keys(&out, "app:b", 0, 3, "PTTL"));
    step(&f, &m, read_replies(rep, 6, NULL), &out);
    assert_true(batch_is(&out, 0, "GET", relock_scan_result_marker_key(r), NULL));
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_EXAMINED), 203);
    assert_int_equal(relock_scan_result_count(r, RELOCK_SCAN_MODERN), 103);
    assert_int_equal(relock_scan_result_signature(r, RELOCK_SIG_ZSET), 100);
    relock__scan_end(&m, f.c, RELOCK_OK);
    relock_scan_result_free(r);
    fake_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_runs),
        cmocka_unit_test(test_run_bound),
        cmocka_unit_test(test_keys_fallback),
        cmocka_unit_test(test_wide_reads),
        cmocka_unit_test(test_scan_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
