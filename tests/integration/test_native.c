/*
 * Modern mode on the paths of newer servers, through the compat proxy's
 * personalities in front of a real redis-server: native compare-and-delete
 * (DELIFEQ on valkey-9.0, DELEX IFEQ on redis-8.4) and compare-and-set
 * (SET IFEQ PX on valkey-8.1, valkey-9.0, redis-8.4), each with Lua and
 * without it (the proxy's LUA switch, as a Valkey 9.1 without its Lua
 * engine), and personality 7 (scripts, or WATCH/MULTI without Lua).
 *
 * Where a real valkey-server or redis-server on PATH has native commands
 * (found by COMMAND DOCS, not by version), the same cases run against it
 * too (find_real_servers below); otherwise one SKIPPED line says so.
 *
 * Per case: acquire, extend, release and the fence; a lock taken by
 * another holder or deleted (LOST, nothing written); a key of another type
 * (EFOREIGN, untouched); the commands a cycle sends, counted by the proxy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "testclient.h"
#include "testutil.h"


typedef struct pcase {
    const char *pers; /* the proxy's personality, or the real server's name */
    int lua;
    const char *release; /* the path the mode reason must name */
    const char *extend;
    const char *acquire;
    const char *release_cmd; /* what a release sends, as the proxy counts it */
    const char *extend_cmd;
    /* The native commands the probe must find. */
    int delifeq, delex, set_ifeq;
    /* The server the keys live on: a real one found on PATH, or NULL for
     * the default server behind the proxy. */
    testsrv *real;
} pcase;

static const pcase proxied[] = {
    {"7", 1, "release: script", "extend: script", "acquire: script", "EVALSHA", "EVALSHA", 0, 0,
     0, NULL},
    {"7", 0, "release: WATCH/MULTI", "extend: WATCH/MULTI", "acquire: WATCH/MULTI", NULL, NULL, 0,
     0, 0, NULL},
    {"valkey-8.1", 1, "release: script", "extend: SET IFEQ PX", "acquire: script", "EVALSHA",
     "SET", 0, 0, 1, NULL},
    {"valkey-8.1", 0, "release: WATCH/MULTI", "extend: SET IFEQ PX", "acquire: WATCH/MULTI",
     NULL, "SET", 0, 0, 1, NULL},
    {"valkey-9.0", 1, "release: DELIFEQ", "extend: SET IFEQ PX", "acquire: script", "DELIFEQ",
     "SET", 1, 0, 1, NULL},
    {"valkey-9.0", 0, "release: DELIFEQ", "extend: SET IFEQ PX", "acquire: WATCH/MULTI",
     "DELIFEQ", "SET", 1, 0, 1, NULL},
    {"redis-8.4", 1, "release: DELEX IFEQ", "extend: SET IFEQ PX", "acquire: script", "DELEX",
     "SET", 0, 1, 1, NULL},
    {"redis-8.4", 0, "release: DELEX IFEQ", "extend: SET IFEQ PX", "acquire: WATCH/MULTI", "DELEX",
     "SET", 0, 1, 1, NULL},
};
#define NPROXIED (sizeof proxied / sizeof proxied[0])

/*
 * Real servers with the native commands: valkey-server and redis-server
 * from PATH (or the binaries RELOCK_NATIVE_SERVERS names, separated by
 * spaces), started here and kept when COMMAND DOCS shows SET IFEQ, DELIFEQ
 * or DELEX, whatever their version says.  Each runs the same cases through
 * a personality-7 proxy, which imitates nothing and forwards the server's
 * own replies (it counts the commands): once with Lua, once with the
 * proxy's --no-lua.  RELOCK_NATIVE_ANY=1 keeps a server without them too,
 * so that the cases' plumbing can be checked where no such server exists
 * (the expected paths are then the scripts).
 */
#define MAXREAL 2
static testsrv reals[MAXREAL];
static char real_names[MAXREAL][72];
static size_t nreal;

static pcase cases[NPROXIED + 2 * MAXREAL];
static size_t ncases;
static testsrv proxies[NPROXIED + 2 * MAXREAL];

/* The server the keys of case i live on. */
static const testsrv *back(size_t i)
{
    return cases[i].real ? cases[i].real : &tu_srv;
}

/* Whether a COMMAND DOCS reply names word at any depth. */
static int docs_mention(const redisReply *r, const char *word, int depth)
{
    if (depth > 8)
        return 0;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strcasecmp(r->str, word) == 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < r->elements; i++)
        if (docs_mention(r->element[i], word, depth + 1))
            return 1;
    return 0;
}

/* The native commands of the server on port, by COMMAND DOCS. */
static void natives_of(int port, int *delifeq, int *delex, int *set_ifeq)
{
    *delifeq = *delex = *set_ifeq = 0;
    redisContext *ctx = redisConnect("127.0.0.1", port);
    if (!ctx || ctx->err) {
        redisFree(ctx);
        return;
    }
    redisReply *r = redisCommand(ctx, "COMMAND DOCS SET DELIFEQ DELEX");
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *name = r->element[i];
            if (name->type != REDIS_REPLY_STRING && name->type != REDIS_REPLY_STATUS)
                continue;
            if (strcasecmp(name->str, "delifeq") == 0)
                *delifeq = 1;
            else if (strcasecmp(name->str, "delex") == 0)
                *delex = 1;
            else if (strcasecmp(name->str, "set") == 0 &&
                     docs_mention(r->element[i + 1], "IFEQ", 0))
                *set_ifeq = 1;
        }
    }
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
}

/* Whether bin is a path to an executable or a name found on PATH. */
static int on_path(const char *bin)
{
    if (strchr(bin, '/'))
        return access(bin, X_OK) == 0;
    const char *path = getenv("PATH");
    char dir[1024];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, path, bin);
        if (n > 0 && access(dir, X_OK) == 0)
            return 1;
        path += n;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* Adds the two cases (with Lua, without) of a real server. */
static void add_real_cases(testsrv *srv, const char *name, int delifeq, int delex, int set_ifeq)
{
    for (int lua = 1; lua >= 0; lua--) {
        pcase *k = &cases[ncases++];
        memset(k, 0, sizeof *k);
        k->pers = name;
        k->lua = lua;
        k->delifeq = delifeq;
        k->delex = delex;
        k->set_ifeq = set_ifeq;
        k->real = srv;
        k->release = delifeq ? "release: DELIFEQ"
                     : delex ? "release: DELEX IFEQ"
                     : lua   ? "release: script"
                             : "release: WATCH/MULTI";
        k->release_cmd = delifeq ? "DELIFEQ" : delex ? "DELEX" : lua ? "EVALSHA" : NULL;
        k->extend = set_ifeq ? "extend: SET IFEQ PX"
                    : lua    ? "extend: script"
                             : "extend: WATCH/MULTI";
        k->extend_cmd = set_ifeq ? "SET" : lua ? "EVALSHA" : NULL;
        k->acquire = lua ? "acquire: script" : "acquire: WATCH/MULTI";
    }
}

/* Starts the real servers to look at, keeps those with native commands. */
static void find_real_servers(void)
{
    const char *list = getenv("RELOCK_NATIVE_SERVERS");
    if (!list || !*list)
        list = "valkey-server redis-server";
    const char *any = getenv("RELOCK_NATIVE_ANY");
    int keep_any = any && strcmp(any, "1") == 0;
    char looked[256] = "";
    while (*list && nreal < MAXREAL) {
        size_t n = strcspn(list, " ");
        char bin[64];
        snprintf(bin, sizeof bin, "%.*s", (int)(n < 63 ? n : 63), list);
        list += n;
        while (*list == ' ')
            list++;
        if (!bin[0] || !on_path(bin))
            continue;
        size_t used = strlen(looked);
        snprintf(looked + used, sizeof looked - used, "%s%s", used ? ", " : "", bin);
        testsrv *srv = &reals[nreal];
        if (testsrv_start_bin(srv, bin, NULL) != 0)
            continue;
        int delifeq, delex, set_ifeq;
        natives_of(srv->port, &delifeq, &delex, &set_ifeq);
        if (!delifeq && !delex && !set_ifeq && !keep_any) {
            testsrv_stop(srv);
            continue;
        }
        snprintf(real_names[nreal], sizeof real_names[nreal], "real %s", bin);
        add_real_cases(srv, real_names[nreal], delifeq, delex, set_ifeq);
        fprintf(stderr, "it_native: also against %s on port %d (COMMAND DOCS:%s%s%s)\n", bin,
                srv->port, set_ifeq ? " SET IFEQ" : "", delifeq ? " DELIFEQ" : "",
                delex ? " DELEX" : "");
        nreal++;
    }
    if (nreal == 0)
        fprintf(stderr,
                "SKIPPED: real servers: none with SET IFEQ, DELIFEQ or DELEX in COMMAND DOCS "
                "(looked at: %s); the native paths ran through the proxy only\n",
                looked[0] ? looked : "no valkey-server or redis-server on PATH");
}

static int setup(void **state)
{
    if (tu_setup_server(state) != 0)
        return -1;
    for (size_t i = 0; i < NPROXIED; i++)
        cases[ncases++] = proxied[i];
    find_real_servers();
    for (size_t i = 0; i < ncases; i++) {
        static const char *const nolua[] = {"--no-lua", NULL};
        const char *pers = cases[i].real ? "7" : cases[i].pers;
        if (testsrv_start_proxy(&proxies[i], back(i)->port, pers, cases[i].lua ? NULL : nolua) !=
            0)
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    for (size_t i = 0; i < ncases; i++)
        testsrv_stop(&proxies[i]);
    for (size_t i = 0; i < nreal; i++)
        testsrv_stop(&reals[i]);
    return tu_teardown_server(state);
}

static char *real(size_t i, const char *fmt, const char *a)
{
    return testsrv_cmd(back(i), fmt, a);
}

static void want_real(size_t i, const char *fmt, const char *a, const char *want)
{
    char *v = real(i, fmt, a);
    assert_non_null(v);
    if (strcmp(v, want) != 0)
        fail_msg("%s lua=%d: %s (%s): wanted %s, got %s", cases[i].pers, cases[i].lua, fmt, a,
                 want, v);
    free(v);
}

static long long real_int(size_t i, const char *fmt, const char *a)
{
    char *v = real(i, fmt, a);
    assert_non_null(v);
    long long n = atoll(v);
    free(v);
    return n;
}

static relock_client *client(size_t i, const char *const *settings)
{
    relock_client *c = tu_client(proxies[i].port, "modern", settings);
    assert_int_equal(relock_client_mode(c), RELOCK_MODE_MODERN);
    return c;
}

/* The probe found what the personality has, and the mode reason names the
 * paths (`relock probe` prints it). */
static void test_paths(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        const pcase *k = &cases[i];
        relock_client *c = client(i, NULL);
        relock_server_info *info = NULL;
        assert_int_equal(relock_client_server(c, &info), RELOCK_OK);
        unsigned caps = relock_server_info_caps(info);
        relock_server_info_free(info);
        assert_int_equal((caps & RELOCK_CAP_EVAL) != 0, k->lua);
        assert_int_equal((caps & RELOCK_CAP_DELIFEQ) != 0, k->delifeq);
        assert_int_equal((caps & RELOCK_CAP_DELEX) != 0, k->delex);
        assert_int_equal((caps & RELOCK_CAP_SET_IFEQ) != 0, k->set_ifeq);
        const char *why = relock_client_mode_reason(c);
        if (!strstr(why, k->release) || !strstr(why, k->extend) || !strstr(why, k->acquire))
            fail_msg("%s lua=%d: reason \"%s\"", k->pers, k->lua, why);
        if (!k->lua && !strstr(why, "scripts: none"))
            fail_msg("%s without Lua: reason \"%s\"", k->pers, why);
        /* The same paths as fields: each the word after "release: " etc. */
        relock_paths *p = NULL;
        assert_int_equal(relock_client_paths(c, &p), RELOCK_OK);
        const char *release = relock_paths_get(p, RELOCK_PATH_RELEASE);
        const char *extend = relock_paths_get(p, RELOCK_PATH_EXTEND);
        const char *acquire = relock_paths_get(p, RELOCK_PATH_ACQUIRE);
        char want[96];
        snprintf(want, sizeof want, "release: %s,", release);
        if (!strstr(k->release, release) || !strstr(why, want))
            fail_msg("%s lua=%d: release path \"%s\", reason \"%s\"", k->pers, k->lua,
                     release, why);
        snprintf(want, sizeof want, "extend: %s,", extend);
        if (!strstr(k->extend, extend) || !strstr(why, want))
            fail_msg("%s lua=%d: extend path \"%s\", reason \"%s\"", k->pers, k->lua,
                     extend, why);
        snprintf(want, sizeof want, "acquire: %s,", acquire);
        if (strncmp(acquire, k->acquire + 9, strlen(k->acquire + 9)) != 0 ||
            !strstr(why, want))
            fail_msg("%s lua=%d: acquire path \"%s\", reason \"%s\"", k->pers, k->lua,
                     acquire, why);
        assert_string_equal(relock_paths_get(p, RELOCK_PATH_SCRIPTS),
                            k->lua ? "used" : "none (the server runs without Lua)");
        /* A path this library does not know reads as "". */
        assert_string_equal(relock_paths_get(p, (relock_path)99), "");
        relock_paths_free(p);
        relock_client_free(c);
        /* Without fencing the acquire is the plain SET NX PX. */
        static const char *const unfenced[] = {"fencing", "false", NULL};
        c = client(i, unfenced);
        assert_int_equal(relock_client_paths(c, &p), RELOCK_OK);
        assert_string_equal(relock_paths_get(p, RELOCK_PATH_ACQUIRE), "SET NX PX");
        relock_paths_free(p);
        relock_client_free(c);
        /* Legacy mode has no such paths: refused, no object. */
        c = tu_client(proxies[i].port, "legacy", NULL);
        p = (relock_paths *)1;
        assert_int_equal(relock_client_paths(c, &p), RELOCK_EUNSUPPORTED);
        assert_null(p);
        assert_non_null(strstr(relock_client_error(c)->message, "only for modern mode"));
        relock_client_free(c);
    }
}

/* Acquire, extend, release; the fence grows by one per acquisition and not
 * with a busy attempt in between. */
static void test_cycle(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        const pcase *k = &cases[i];
        char name[64];
        snprintf(name, sizeof name, "cycle-%zu", i);
        relock_client *a = client(i, NULL), *b = client(i, NULL);
        relock_lock *l = NULL, *lb = NULL;
        assert_int_equal(relock_try_acquire(a, name, 5000, &l), RELOCK_OK);
        long long f1 = relock_lock_fence(l);
        assert_true(f1 >= 1);
        want_real(i, "GET %s", name, relock_lock_value(l));
        assert_int_equal(relock_try_acquire(b, name, 5000, &lb), RELOCK_BUSY);
        assert_int_equal(relock_extend(l, 60000), RELOCK_OK);
        long long pttl = real_int(i, "PTTL %s", name);
        if (pttl <= 55000 || pttl > 60000)
            fail_msg("%s lua=%d: PTTL %lld after extend to 60 s", k->pers, k->lua, pttl);
        assert_true(relock_lock_validity_ms(l) > 55000);
        assert_int_equal(relock_release(l), RELOCK_OK);
        want_real(i, "EXISTS %s", name, "0");
        relock_lock_free(l);
        assert_int_equal(relock_try_acquire(b, name, 5000, &lb), RELOCK_OK);
        if (relock_lock_fence(lb) != f1 + 1)
            fail_msg("%s lua=%d: fence %lld after %lld", k->pers, k->lua, relock_lock_fence(lb), f1);
        assert_int_equal(relock_release(lb), RELOCK_OK);
        relock_lock_free(lb);
        relock_client_free(a);
        relock_client_free(b);
    }
}

/* After another holder took the key, or it was deleted: release and extend
 * say LOST and write nothing. */
static void test_lost(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        const pcase *k = &cases[i];
        char name[64];
        snprintf(name, sizeof name, "lost-%zu", i);
        relock_client *a = client(i, NULL);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(a, name, 5000, &l), RELOCK_OK);
        /* Another holder's token, with a TTL of its own. */
        char *r = testsrv_cmd(back(i), "SET %s 0123456789abcdef0123456789abcdef PX 20000", name);
        free(r);
        if (relock_release(l) != RELOCK_LOST)
            fail_msg("%s lua=%d: release of a taken lock: %s", k->pers, k->lua,
                     relock_client_error(a)->message);
        want_real(i, "GET %s", name, "0123456789abcdef0123456789abcdef");
        assert_int_equal(relock_extend(l, 60000), RELOCK_LOST);
        want_real(i, "GET %s", name, "0123456789abcdef0123456789abcdef");
        assert_true(real_int(i, "PTTL %s", name) <= 20000);
        /* Deleted. */
        r = testsrv_cmd(back(i), "DEL %s", name);
        free(r);
        assert_int_equal(relock_extend(l, 60000), RELOCK_LOST);
        want_real(i, "EXISTS %s", name, "0");
        assert_int_equal(relock_release(l), RELOCK_LOST);
        want_real(i, "EXISTS %s", name, "0");
        relock_lock_free(l);
        relock_client_free(a);
    }
}

/* A key of another type: never changed, reported as foreign. */
static void test_other_type(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        const pcase *k = &cases[i];
        char name[64];
        snprintf(name, sizeof name, "typed-%zu", i);
        relock_client *a = client(i, NULL);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(a, name, 5000, &l), RELOCK_OK);
        char *r = testsrv_cmd(back(i), "DEL %s", name);
        free(r);
        r = testsrv_cmd(back(i), "RPUSH %s x", name);
        free(r);
        relock_status st = relock_release(l);
        if (st != RELOCK_EFOREIGN)
            fail_msg("%s lua=%d: release over a list: %s (%s)", k->pers, k->lua,
                     relock_strerror(st), relock_client_error(a)->message);
        assert_int_equal(relock_extend(l, 60000), RELOCK_EFOREIGN);
        want_real(i, "LLEN %s", name, "1");
        want_real(i, "PTTL %s", name, "-1");
        relock_lock *l2 = NULL;
        assert_int_equal(relock_try_acquire(a, name, 5000, &l2), RELOCK_EFOREIGN);
        want_real(i, "LLEN %s", name, "1");
        /* A string no lock writes, without a TTL: never taken over; with
         * one, waited for. */
        r = testsrv_cmd(back(i), "DEL %s", name);
        free(r);
        r = testsrv_cmd(back(i), "SET %s %s", name, "");
        free(r);
        assert_int_equal(relock_try_acquire(a, name, 5000, &l2), RELOCK_EFOREIGN);
        r = testsrv_cmd(back(i), "SET %s %s PX 20000", name, "");
        free(r);
        assert_int_equal(relock_try_acquire(a, name, 5000, &l2), RELOCK_BUSY);
        want_real(i, "GET %s", name, "");
        relock_lock_free(l);
        relock_client_free(a);
    }
}

/* The commands one operation sends, as the proxy counts them: on the
 * native path release is one command (two with its notice, in one round
 * trip), and extend one. */
static void count_op(size_t i, const char *const *settings, int release, const char *want_cmd,
                     long long want_total)
{
    const pcase *k = &cases[i];
    char name[64];
    snprintf(name, sizeof name, "count-%zu-%d", i, release);
    relock_client *a = client(i, settings);
    relock_lock *l = NULL;
    assert_int_equal(relock_try_acquire(a, name, 5000, &l), RELOCK_OK);
    char *r = testsrv_cmd_port(proxies[i].port, "RELOCK-PROXY RESET");
    free(r);
    assert_int_equal(release ? relock_release(l) : relock_extend(l, 9000), RELOCK_OK);
    char *total = testsrv_cmd_port(proxies[i].port, "RELOCK-PROXY COMMANDS");
    assert_non_null(total);
    if (atoll(total) != want_total)
        fail_msg("%s lua=%d: %s sent %s commands, wanted %lld", k->pers, k->lua,
                 release ? "release" : "extend", total, want_total);
    free(total);
    if (want_cmd) {
        redisContext *rc = redisConnect("127.0.0.1", proxies[i].port);
        assert_true(rc && !rc->err);
        redisReply *list = redisCommand(rc, "RELOCK-PROXY COMMANDS-LIST");
        assert_non_null(list);
        char first[64];
        snprintf(first, sizeof first, "%s 1", want_cmd);
        assert_true(list->elements >= 1);
        assert_string_equal(list->element[0]->str, first);
        freeReplyObject(list);
        redisFree(rc);
    }
    relock_lock_free(l);
    relock_client_free(a);
}

static void test_command_counts(void **state)
{
    (void)state;
    static const char *const quiet[] = {"wait.notify", "false", NULL};
    for (size_t i = 0; i < ncases; i++) {
        const pcase *k = &cases[i];
        if (!k->release_cmd) {
            /* WATCH, GET, MULTI, DEL, EXEC (UNWATCH only on a mismatch). */
            count_op(i, quiet, 1, "WATCH", 5);
            if (k->extend_cmd)
                count_op(i, quiet, 0, k->extend_cmd, 1);
            else
                count_op(i, quiet, 0, "WATCH", 5);
            continue;
        }
        count_op(i, quiet, 1, k->release_cmd, 1);
        /* With notices, the PUBLISH rides along (natively; the script
         * publishes inside). */
        count_op(i, NULL, 1, k->release_cmd, strcmp(k->release_cmd, "EVALSHA") == 0 ? 1 : 2);
        if (k->extend_cmd)
            count_op(i, quiet, 0, k->extend_cmd, 1);
        else
            count_op(i, quiet, 0, "WATCH", 5);
    }
}

/* The release notice reaches a subscriber on every path (the native one
 * sends it in the same round trip as the delete). */
static void test_notice(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        char name[64], chan[96];
        snprintf(name, sizeof name, "notice-%zu", i);
        snprintf(chan, sizeof chan, "%s relock:released", name);
        redisContext *sub = redisConnect("127.0.0.1", back(i)->port);
        assert_true(sub && !sub->err);
        struct timeval tv = {5, 0};
        redisSetTimeout(sub, tv);
        redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
        assert_non_null(r);
        freeReplyObject(r);
        relock_client *a = client(i, NULL);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(a, name, 5000, &l), RELOCK_OK);
        assert_int_equal(relock_release(l), RELOCK_OK);
        void *msg = NULL;
        if (redisGetReply(sub, &msg) != REDIS_OK || !msg)
            fail_msg("%s lua=%d: no release notice", cases[i].pers, cases[i].lua);
        r = msg;
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 3);
        assert_string_equal(r->element[0]->str, "message");
        assert_string_equal(r->element[1]->str, chan);
        freeReplyObject(r);
        relock_lock_free(l);
        relock_client_free(a);
        redisFree(sub);
    }
}

/* Without Lua, a dead legacy holder's value (an expired timestamp without
 * TTL) is still taken over, under WATCH. */
static void test_takeover_without_lua(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        if (cases[i].lua)
            continue;
        char name[64], ts[32];
        snprintf(name, sizeof name, "leftover-%zu", i);
        snprintf(ts, sizeof ts, "%lld", (long long)time(NULL) - 100);
        char *r = testsrv_cmd(back(i), "SET %s %s", name, ts);
        free(r);
        relock_client *a = client(i, NULL);
        relock_lock *l = NULL;
        if (relock_try_acquire(a, name, 5000, &l) != RELOCK_OK)
            fail_msg("%s without Lua: takeover: %s", cases[i].pers,
                     relock_client_error(a)->message);
        want_real(i, "GET %s", name, relock_lock_value(l));
        assert_true(real_int(i, "PTTL %s", name) > 0);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(a);
    }
}

/* Without Lua, a lock key that is nothing but its hash tag still carries
 * its fence over from the counter's earlier name (decision 82), by
 * WATCH/MULTI; and legacy mode works there by WATCH as on 2.2. */
static void test_fence_carry_and_legacy_without_lua(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        if (cases[i].lua)
            continue;
        char name[64], old[80];
        snprintf(name, sizeof name, "{wt%zu}", i);
        snprintf(old, sizeof old, "%s relock:fence", name);
        char *r = testsrv_cmd(back(i), "SET %s 41", old);
        free(r);
        relock_client *a = client(i, NULL);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(a, name, 5000, &l), RELOCK_OK);
        if (relock_lock_fence(l) != 42)
            fail_msg("%s without Lua: fence %lld after a carried 41", cases[i].pers,
                     relock_lock_fence(l));
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(a);

        relock_client *g = tu_client(proxies[i].port, "legacy", NULL);
        snprintf(name, sizeof name, "legacy-%zu", i);
        assert_int_equal(relock_try_acquire(g, name, 5000, &l), RELOCK_OK);
        assert_int_equal(relock_extend(l, 8000), RELOCK_OK);
        assert_int_equal(relock_release(l), RELOCK_OK);
        want_real(i, "EXISTS %s", name, "0");
        relock_lock_free(l);
        relock_client_free(g);
    }
}

/* Without Lua, a fence carry whose SET the server refuses inside MULTI
 * (an ACL user without write permission on the counter: NOPERM, then
 * EXECABORT) fails at once with the server's words: it is not a race
 * lost to another writer, to be tried again and reported as a key that
 * "kept changing". */
static void test_fence_carry_refused_without_lua(void **state)
{
    (void)state;
    size_t i = 1; /* personality 7 without Lua */
    assert_true(!cases[i].lua && !cases[i].real && strcmp(cases[i].pers, "7") == 0);
    char *r = testsrv_cmd(&tu_srv, "ACL SETUSER carry on >%s +@all resetkeys %%R~* %%W~{ac} &*",
                          "carrypw");
    assert_string_equal(r, "OK");
    free(r);
    r = testsrv_cmd(&tu_srv, "SET %s 41", "{ac} relock:fence");
    free(r);
    relock_config *cfg = relock_config_new();
    char url[96];
    snprintf(url, sizeof url, "redis://carry:carrypw@127.0.0.1:%d", proxies[i].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    relock_client *c = NULL;
    if (relock_connect(cfg, &c) != RELOCK_OK)
        fail_msg("connect as carry: %s", relock_client_error(c)->message);
    relock_config_free(cfg);
    r = testsrv_cmd_port(proxies[i].port, "RELOCK-PROXY RESET");
    free(r);
    relock_lock *l = NULL;
    relock_status st = relock_try_acquire(c, "{ac}", 5000, &l);
    const relock_error *e = relock_client_error(c);
    if (st != RELOCK_EPROTO || !strstr(e->message, "NOPERM") || strstr(e->message, "kept changing"))
        fail_msg("a refused carry: %s: %s", relock_status_name(st), e->message);
    assert_null(l);
    assert_non_null(strstr(e->server, "NOPERM"));
    /* Sent once, not retried. */
    redisContext *rc = redisConnect("127.0.0.1", proxies[i].port);
    assert_true(rc && !rc->err);
    redisReply *list = redisCommand(rc, "RELOCK-PROXY COMMANDS-LIST");
    assert_non_null(list);
    int execs = 0;
    for (size_t j = 0; j < list->elements; j++)
        if (strncmp(list->element[j]->str, "EXEC ", 5) == 0)
            execs = atoi(list->element[j]->str + 5);
    freeReplyObject(list);
    redisFree(rc);
    assert_true(execs <= 1);
    want_real(i, "EXISTS %s", "{ac}", "0");
    want_real(i, "EXISTS %s", "{ac} relock:fence:tag", "0");
    relock_client_free(c);
    r = testsrv_cmd(&tu_srv, "ACL DELUSER %s", "carry");
    free(r);
}

static void test_fence_carry_unreadable_without_lua(void **state)
{
    (void)state;
    size_t i = 1; /* personality 7 without Lua */
    relock_lock *l = NULL;
    /* An error reply to the GET of the earlier counter (the carry's second
     * command; -LOADING from the proxy) is no absent counter: taken for
     * one, the lock was won with fence 1, below the 41 handed out before. */
    char *r = testsrv_cmd(&tu_srv, "SET %s 41", "{gc} relock:fence");
    free(r);
    relock_client *c = client(i, NULL);
    r = testsrv_cmd_port(proxies[i].port, "RELOCK-PROXY FAULT at-reply 2 at-kind error");
    free(r);
    relock_status st = relock_try_acquire(c, "{gc}", 5000, &l);
    r = testsrv_cmd_port(proxies[i].port, "RELOCK-PROXY FAULT off");
    free(r);
    if (st != RELOCK_EPROTO)
        fail_msg("an unreadable earlier counter: %s (fence %lld): %s", relock_status_name(st),
                 l ? relock_lock_fence(l) : 0, relock_client_error(c)->message);
    assert_null(l);
    assert_non_null(strstr(relock_client_error(c)->message, "LOADING"));
    want_real(i, "EXISTS %s", "{gc}", "0");
    assert_int_equal(relock_try_acquire(c, "{gc}", 5000, &l), RELOCK_OK);
    assert_int_equal(relock_lock_fence(l), 42);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

/* Bridge needs scripts: refused with the reason on a server without Lua;
 * auto then chooses legacy, or modern where no legacy client remains. */
static void test_modes_without_lua(void **state)
{
    (void)state;
    for (size_t i = 0; i < ncases; i++) {
        if (cases[i].lua)
            continue;
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", proxies[i].port);
        assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", "bridge"), RELOCK_OK);
        relock_client *c = NULL;
        assert_int_equal(relock_connect(cfg, &c), RELOCK_EUNSUPPORTED);
        assert_non_null(strstr(relock_client_error(c)->message, "without Lua"));
        relock_client_free(c);
        relock_config_free(cfg);
        c = tu_client(proxies[i].port, "auto", NULL);
        assert_int_equal(relock_client_mode(c), RELOCK_MODE_LEGACY);
        relock_client_free(c);
        static const char *const migrated[] = {"migration.legacy_clients", "false", NULL};
        c = tu_client(proxies[i].port, "auto", migrated);
        assert_int_equal(relock_client_mode(c), RELOCK_MODE_MODERN);
        relock_client_free(c);
    }
}

/* A quorum needs scripts on every server: over servers without Lua it is
 * refused with that reason, not reported as servers that did not answer. */
static void test_quorum_without_lua(void **state)
{
    (void)state;
    char urls[256] = "";
    int n = 0;
    for (size_t i = 0; i < ncases && n < 3; i++) {
        if (cases[i].lua)
            continue;
        char one[48];
        snprintf(one, sizeof one, "%sredis://127.0.0.1:%d", n ? "," : "", proxies[i].port);
        strcat(urls, one);
        n++;
    }
    assert_int_equal(n, 3);
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "servers", urls), RELOCK_OK);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
    relock_config_free(cfg);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "q-nolua", 5000, 0, &l), RELOCK_EUNSUPPORTED);
    assert_null(l);
    const char *m = relock_client_error(c)->message;
    if (!strstr(m, "runs without Lua") || !strstr(m, "unknown command"))
        fail_msg("message: %s", m);
    want_real(0, "EXISTS %s", "q-nolua", "0");
    relock_client_free(c);
}

int main(void)
{
    if (testsrv_target_version() != NULL) {
        testsrv_note_skip("the newer-server personalities of the proxy");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_cycle),
        cmocka_unit_test(test_lost),
        cmocka_unit_test(test_other_type),
        cmocka_unit_test(test_command_counts),
        cmocka_unit_test(test_notice),
        cmocka_unit_test(test_takeover_without_lua),
        cmocka_unit_test(test_fence_carry_and_legacy_without_lua),
        cmocka_unit_test(test_fence_carry_refused_without_lua),
        cmocka_unit_test(test_fence_carry_unreadable_without_lua),
        cmocka_unit_test(test_modes_without_lua),
        cmocka_unit_test(test_quorum_without_lua),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
