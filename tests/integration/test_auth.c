/*
 * Authentication against real servers: one started with --requirepass,
 * one with ACL users (Redis 6 and later).  Credentials from URLs (password
 * alone, user and password, percent-encoded) and from configuration files,
 * in single-server and quorum configurations; a missing or wrong password
 * is a configuration error that says AUTH was refused; and no message of
 * any failing call ever contains a password.
 *
 * The ACL user alice is created exactly as operators commonly write it,
 * `~* +@all`: on Redis 7 (acl-pubsub-default resetchannels) she may not
 * PUBLISH, so the release notices inside the release scripts are refused,
 * which must not turn a release that happened into a failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "testsrv.h"

#define PASS "Pw-it-7c1f9e2a"        /* requirepass of srv_pass */
#define ALICE_PW "Alice-it-b81d04f7" /* alice on srv_acl: ~* +@all */
#define BOB_PW "p@ss/w:rd-it-55e1"   /* bob on srv_acl: needs percent-encoding */
#define BOB_PW_URL "p%40ss%2Fw%3Ard-it-55e1"
#define WRONG_PW "Wrong-it-3f9a61c0"

static testsrv srv_pass, srv_acl;
/* The configuration files the tests write; removed by teardown, also
 * after a failed test. */
static char path[] = "/tmp/relock-auth-XXXXXX";

static int setup(void **state)
{
    (void)state;
    const char *const pass_args[] = {"--requirepass", PASS, NULL};
    const char *const acl_args[] = {"--user", "alice", "on", ">" ALICE_PW, "~*", "+@all",
                                    "--user", "bob",   "on", ">" BOB_PW,   "~*", "&*",
                                    "+@all",  NULL};
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    if (testsrv_start(&srv_pass, pass_args) != 0) {
        unlink(path);
        return -1;
    }
    if (testsrv_start(&srv_acl, acl_args) != 0) {
        testsrv_stop(&srv_pass);
        unlink(path);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&srv_pass);
    testsrv_stop(&srv_acl);
    unlink(path);
    return 0;
}

/* One command on s as user (NULL: the default user) with password;
 * returns the reply's text (integers in decimal, "(nil)"), to be freed. */
static char *admin(const testsrv *s, const char *user, const char *pw, const char *fmt, ...)
{
    redisContext *rc = redisConnect("127.0.0.1", s->port);
    assert_non_null(rc);
    assert_int_equal(rc->err, 0);
    redisReply *r = user ? redisCommand(rc, "AUTH %s %s", user, pw) : redisCommand(rc, "AUTH %s", pw);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    va_list ap;
    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    char buf[256];
    if (r->type == REDIS_REPLY_INTEGER)
        snprintf(buf, sizeof buf, "%lld", r->integer);
    else if (r->type == REDIS_REPLY_NIL)
        snprintf(buf, sizeof buf, "(nil)");
    else
        snprintf(buf, sizeof buf, "%.*s", (int)r->len, r->str ? r->str : "");
    freeReplyObject(r);
    redisFree(rc);
    return strdup(buf);
}

/* Fails unless the reply of a command equals want. */
static void admin_expect(const testsrv *s, const char *want, const char *fmt, const char *arg)
{
    char *got = s == &srv_pass ? admin(s, NULL, PASS, fmt, arg) : admin(s, "bob", BOB_PW, fmt, arg);
    if (strcmp(got, want) != 0)
        fail_msg("%s %s: \"%s\", expected \"%s\"", fmt, arg, got, want);
    free(got);
}

/* No password of this file in s. */
static void assert_no_secret(const char *s)
{
    const char *const secrets[] = {PASS, ALICE_PW, BOB_PW, BOB_PW_URL, WRONG_PW, "p@ss"};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (strstr(s, secrets[i]))
            fail_msg("a password appears in \"%s\"", s);
}

static void assert_error_clean(const relock_error *e)
{
    assert_no_secret(e->message);
    assert_no_secret(e->server);
}

/* A client for url in mode (NULL: auto), expected to connect with want. */
static relock_client *connect_url(const char *url, const char *mode, relock_status want)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    relock_status st = relock_config_set_url(cfg, url);
    if (st != RELOCK_OK) {
        assert_error_clean(relock_config_error(cfg));
        fail_msg("set_url: %s", relock_config_error(cfg)->message);
    }
    if (mode)
        assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    relock_client *c = NULL;
    st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    assert_non_null(c);
    assert_error_clean(relock_client_error(c));
    if (st != want)
        fail_msg("connect: %s (%s), expected %s", relock_status_name(st),
                 relock_client_error(c)->message, relock_status_name(want));
    return c;
}

static char *url_for(const testsrv *s, const char *userinfo)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "redis://%s%s127.0.0.1:%d", userinfo, *userinfo ? "@" : "", s->port);
    return buf;
}

/* acquire, check the key on the server, extend, release, check it is gone. */
static void lock_cycle(relock_client *c, const testsrv *s, const char *name)
{
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, name, 10000, 0, &l);
    if (st != RELOCK_OK)
        fail_msg("acquire %s: %s: %s", name, relock_status_name(st),
                 relock_client_error(c)->message);
    admin_expect(s, relock_lock_value(l), "GET %s", name);
    assert_int_equal(relock_extend(l, 20000), RELOCK_OK);
    st = relock_release(l);
    if (st != RELOCK_OK)
        fail_msg("release %s: %s: %s", name, relock_status_name(st),
                 relock_client_error(c)->message);
    admin_expect(s, "0", "EXISTS %s", name);
    relock_lock_free(l);
}

static void test_requirepass_url(void **state)
{
    (void)state;
    relock_client *c = connect_url(url_for(&srv_pass, ":" PASS), "modern", RELOCK_OK);
    lock_cycle(c, &srv_pass, "rp-modern");
    relock_client_free(c);
    /* A password alone before the @, as redis-cli reads it. */
    c = connect_url(url_for(&srv_pass, PASS), "modern", RELOCK_OK);
    lock_cycle(c, &srv_pass, "rp-bare");
    relock_client_free(c);
    /* Bridge mode releases by the compare-and-set script. */
    c = connect_url(url_for(&srv_pass, ":" PASS), "bridge", RELOCK_OK);
    lock_cycle(c, &srv_pass, "rp-bridge");
    relock_client_free(c);
}

static void test_requirepass_missing(void **state)
{
    (void)state;
    /* Without a password the server answers NOAUTH to everything: that
     * must not read as an old server that lacks the commands. */
    relock_client *c = connect_url(url_for(&srv_pass, ""), NULL, RELOCK_ECONFIG);
    const relock_error *e = relock_client_error(c);
    assert_non_null(strstr(e->message, "NOAUTH"));
    assert_null(strstr(e->message, "2.0"));
    relock_client_free(c);
}

static void test_wrong_password(void **state)
{
    (void)state;
    char want[128];
    snprintf(want, sizeof want, "AUTH to 127.0.0.1:%d refused: WRONGPASS", srv_pass.port);
    relock_client *c = connect_url(url_for(&srv_pass, ":" WRONG_PW), "modern", RELOCK_ECONFIG);
    assert_non_null(strstr(relock_client_error(c)->message, want));
    relock_client_free(c);

    snprintf(want, sizeof want, "AUTH to 127.0.0.1:%d refused: WRONGPASS", srv_acl.port);
    c = connect_url(url_for(&srv_acl, "alice:" WRONG_PW), "modern", RELOCK_ECONFIG);
    assert_non_null(strstr(relock_client_error(c)->message, want));
    relock_client_free(c);
    /* The right password of another user. */
    c = connect_url(url_for(&srv_acl, "alice:" BOB_PW_URL), "modern", RELOCK_ECONFIG);
    assert_non_null(strstr(relock_client_error(c)->message, "refused"));
    relock_client_free(c);
    /* A password for a server that has none: Redis 6+ echoes "<password>"
     * literally, never the password itself. */
    testsrv plain;
    assert_int_equal(testsrv_start(&plain, NULL), 0);
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    assert_int_equal(relock_config_set_url(cfg, url_for(&plain, ":" WRONG_PW)), RELOCK_OK);
    relock_status st = relock_connect(cfg, &c);
    testsrv_stop(&plain); /* before any assertion can end the test */
    relock_config_free(cfg);
    assert_int_equal(st, RELOCK_ECONFIG);
    assert_non_null(strstr(relock_client_error(c)->message, "refused"));
    assert_error_clean(relock_client_error(c));
    relock_client_free(c);
}

static void test_acl_user(void **state)
{
    (void)state;
    relock_client *c = connect_url(url_for(&srv_acl, "alice:" ALICE_PW), "modern", RELOCK_OK);
    lock_cycle(c, &srv_acl, "acl-modern");
    relock_client_free(c);
    c = connect_url(url_for(&srv_acl, "alice:" ALICE_PW), "bridge", RELOCK_OK);
    lock_cycle(c, &srv_acl, "acl-bridge");
    relock_client_free(c);
    c = connect_url(url_for(&srv_acl, "alice:" ALICE_PW), "legacy", RELOCK_OK);
    lock_cycle(c, &srv_acl, "acl-legacy");
    relock_client_free(c);
    /* Percent-encoded @, / and : in the password. */
    c = connect_url(url_for(&srv_acl, "bob:" BOB_PW_URL), "modern", RELOCK_OK);
    lock_cycle(c, &srv_acl, "acl-bob");
    relock_client_free(c);
}

/* A waiter of a user who may not SUBSCRIBE still gets the lock once it is
 * released (by polling), and one who may is woken. */
static void test_acl_waiter(void **state)
{
    (void)state;
    const char *users[] = {"alice:" ALICE_PW, "bob:" BOB_PW_URL};
    for (int u = 0; u < 2; u++) {
        relock_client *holder = connect_url(url_for(&srv_acl, users[u]), "modern", RELOCK_OK);
        relock_client *waiter = connect_url(url_for(&srv_acl, users[u]), "modern", RELOCK_OK);
        relock_lock *l = NULL, *w = NULL;
        assert_int_equal(relock_acquire(holder, "acl-wait", 20000, 0, &l), RELOCK_OK);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            usleep(300 * 1000);
            _exit(relock_release(l) == RELOCK_OK ? 0 : 1);
        }
        relock_status st = relock_acquire(waiter, "acl-wait", 5000, 10000, &w);
        int status = 0;
        waitpid(pid, &status, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (st != RELOCK_OK)
            fail_msg("waiter (%s): %s: %s", users[u], relock_status_name(st),
                     relock_client_error(waiter)->message);
        assert_int_equal(relock_release(w), RELOCK_OK);
        relock_lock_free(w);
        relock_lock_free(l);
        relock_client_free(waiter);
        relock_client_free(holder);
    }
}

static void write_file(const char *file, const char *text)
{
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_config_file(void **state)
{
    (void)state;
    char text[1024];
    relock_client *c = NULL;

    snprintf(text, sizeof text,
             "relock = { mode = \"modern\"; servers = ( { host = \"127.0.0.1\"; port = %d; "
             "username = \"alice\"; password = \"%s\"; } ); };\n",
             srv_acl.port, ALICE_PW);
    write_file(path, text);
    assert_int_equal(relock_connect_file(path, &c), RELOCK_OK);
    lock_cycle(c, &srv_acl, "file-acl");
    relock_client_free(c);

    snprintf(text, sizeof text,
             "relock = { mode = \"modern\"; servers = ( { host = \"127.0.0.1\"; port = %d; "
             "password = \"%s\"; db = 3; } ); };\n",
             srv_pass.port, PASS);
    write_file(path, text);
    assert_int_equal(relock_connect_file(path, &c), RELOCK_OK);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "file-db3", 10000, 0, &l), RELOCK_OK);
    char *v = admin(&srv_pass, NULL, PASS, "EXISTS %s", "file-db3");
    assert_string_equal(v, "0"); /* in db 3, not 0 */
    free(v);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);

    snprintf(text, sizeof text,
             "relock = { mode = \"modern\"; servers = ( { host = \"127.0.0.1\"; port = %d; "
             "username = \"alice\"; password = \"%s\"; } ); };\n",
             srv_acl.port, WRONG_PW);
    write_file(path, text);
    assert_int_equal(relock_connect_file(path, &c), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_client_error(c)->message, "refused"));
    assert_error_clean(relock_client_error(c));
    relock_client_free(c);

    /* A bad file mentioning a password: the loader's messages stay clean. */
    snprintf(text, sizeof text,
             "relock = { servers = ( { host = \"127.0.0.1\"; password = \"%s\"; tls = true; } ); };\n",
             PASS);
    write_file(path, text);
    assert_int_equal(relock_connect_file(path, &c), RELOCK_ECONFIG);
    assert_error_clean(relock_client_error(c));
    relock_client_free(c);
    snprintf(text, sizeof text, "relock = { servers = ( { password = \"%s ; } ); };\n", PASS);
    write_file(path, text);
    assert_int_equal(relock_connect_file(path, &c), RELOCK_ECONFIG);
    assert_error_clean(relock_client_error(c));
    relock_client_free(c);
}

/* Several servers: three databases of srv_pass stand in for three masters. */
static void test_quorum(void **state)
{
    (void)state;
    const char *pws[] = {PASS, WRONG_PW};
    for (int i = 0; i < 2; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "relock = { mode = \"modern\"; servers = (\n"
                 "  { host = \"127.0.0.1\"; port = %d; db = 5; password = \"%s\"; },\n"
                 "  { host = \"127.0.0.1\"; port = %d; db = 6; password = \"%s\"; },\n"
                 "  { host = \"127.0.0.1\"; port = %d; db = 7; password = \"%s\"; } ); };\n",
                 srv_pass.port, pws[i], srv_pass.port, pws[i], srv_pass.port, pws[i]);
        write_file(path, text);
        relock_client *c = NULL;
        relock_status st = relock_connect_file(path, &c);
        assert_error_clean(relock_client_error(c));
        relock_lock *l = NULL;
        if (st == RELOCK_OK)
            st = relock_acquire(c, "q-auth", 10000, 0, &l);
        assert_error_clean(relock_client_error(c));
        if (i == 0) {
            if (st != RELOCK_OK)
                fail_msg("quorum acquire: %s: %s", relock_status_name(st),
                         relock_client_error(c)->message);
            assert_int_equal(relock_release(l), RELOCK_OK);
            relock_lock_free(l);
        } else {
            assert_int_not_equal(st, RELOCK_OK);
        }
        relock_client_free(c);
    }
}

static void test_break(void **state)
{
    (void)state;
    relock_client *c = connect_url(url_for(&srv_acl, "alice:" ALICE_PW), "modern", RELOCK_OK);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "brk-auth", 10000, 0, &l), RELOCK_OK);
    assert_int_equal(relock_break(c, "brk-auth", "0123456789abcdef0123456789abcdef"), RELOCK_BUSY);
    assert_int_equal(relock_break(c, "brk-auth", relock_lock_value(l)), RELOCK_OK);
    admin_expect(&srv_acl, "0", "EXISTS %s", "brk-auth");
    assert_int_equal(relock_break(c, "brk-auth", NULL), RELOCK_LOST);
    assert_int_equal(relock_release(l), RELOCK_LOST);
    relock_lock_free(l);
    relock_client_free(c);
}

/* Every failure a password could leak into: bad URLs, refused AUTH,
 * unreachable servers. */
static void test_no_password_in_messages(void **state)
{
    (void)state;
    const char *bad[] = {
        "redis://:" PASS "@127.0.0.1:99999",  "redis://:" PASS "@",
        "rediss://:" PASS "@127.0.0.1:6379",  "redis://alice:" PASS "@[::1:6379",
        "redis://:" PASS "@127.0.0.1:6379/x", "http://:" PASS "@127.0.0.1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        relock_config *cfg = relock_config_new();
        assert_non_null(cfg);
        assert_int_equal(relock_config_set_url(cfg, bad[i]), RELOCK_ECONFIG);
        assert_error_clean(relock_config_error(cfg));
        relock_config_free(cfg);
        relock_client *c = NULL;
        assert_int_equal(relock_connect_url(bad[i], &c), RELOCK_ECONFIG);
        assert_error_clean(relock_client_error(c));
        relock_client_free(c);
    }
    /* TLS is refused with a clear reason. */
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set_url(cfg, "rediss://127.0.0.1:6379"), RELOCK_ECONFIG);
    assert_non_null(strstr(relock_config_error(cfg)->message, "TLS"));
    relock_config_free(cfg);
    /* Unreachable, with a password in the URL. */
    char url[128];
    snprintf(url, sizeof url, "redis://alice:%s@127.0.0.1:%d", PASS, testsrv_free_port());
    relock_client *c = connect_url(url, NULL, RELOCK_EIO);
    relock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requirepass_url),
        cmocka_unit_test(test_requirepass_missing),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_acl_user),
        cmocka_unit_test(test_acl_waiter),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_quorum),
        cmocka_unit_test(test_break),
        cmocka_unit_test(test_no_password_in_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
