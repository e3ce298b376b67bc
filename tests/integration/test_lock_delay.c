/*
 * lock_delay_ms against a real redis-server: a holder that stops without
 * releasing (a forked child that SIGSTOPs itself) keeps others out for its
 * ttl plus the delay; a clean release frees the lock at once; the validity
 * reported is the lease's alone.  The timestamp modes and several servers
 * refuse the setting.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "relock.h"
#include "testclient.h"
#include "testutil.h"

#define TTL_MS 1000
#define DELAY_MS 1500

static long long pttl(const char *key)
{
    char *v = testsrv_cmd(&tu_srv, "PTTL %s", key);
    long long t = v ? atoll(v) : -3;
    free(v);
    return t;
}

/* The child: acquires name with the delay, says so, and stops itself
 * without releasing, as a paused or dying holder would. */
static void stopped_holder(tu_chan *ch, const char *name, const char *fencing)
{
    const char *set[] = {"lock_delay_ms", "1500", "fencing", fencing, NULL};
    relock_client *c = tu_client(tu_srv.port, "modern", set);
    relock_lock *l = NULL;
    if (relock_try_acquire(c, name, TTL_MS, &l) != RELOCK_OK) {
        tu_chan_send(ch, "failed");
        _exit(1);
    }
    tu_chan_send(ch, "held");
    raise(SIGSTOP);
    _exit(0);
}

static void test_stopped_holder_keeps_delay(void **state)
{
    (void)state;
    const char *fencing[] = {"true", "false"};
    for (int f = 0; f < 2; f++) {
        char name[32];
        snprintf(name, sizeof name, "ld-stop-%d", f);
        tu_chan ch;
        assert_int_equal(tu_chan_open(&ch), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            stopped_holder(&ch, name, fencing[f]);
        char line[32];
        assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 10000), 0);
        uint64_t held_at = tu_now_ms(); /* the child held it before this */
        tu_chan_close(&ch);
        assert_string_equal(line, "held");

        relock_client *c = tu_client(tu_srv.port, "modern", NULL);
        relock_lock *l = NULL;
        relock_status st;
        uint64_t got_at = 0;
        for (int i = 0; i < 1000; i++) {
            st = relock_try_acquire(c, name, TTL_MS, &l);
            if (st == RELOCK_OK) {
                got_at = tu_now_ms();
                break;
            }
            assert_int_equal(st, RELOCK_BUSY);
            /* Past the ttl but within the delay: still kept out. */
            tu_sleep_ms(20);
        }
        kill(pid, SIGKILL);
        tu_wait_child(pid, 5000);
        assert_non_null(l);
        /* The child acquired before held_at, so the key ended at most
         * ttl + delay after held_at; it cannot have ended before ttl +
         * delay counted from our first look at it minus the report's
         * travel (a generous 200 ms). */
        long waited = (long)(got_at - held_at);
        if (waited < TTL_MS + DELAY_MS - 200 || waited > TTL_MS + DELAY_MS + 2000)
            fail_msg("acquired %ld ms after the holder stopped (ttl %d + delay %d)", waited,
                     TTL_MS, DELAY_MS);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
        relock_client_free(c);
    }
}

static void test_clean_release_frees_at_once(void **state)
{
    (void)state;
    const char *set[] = {"lock_delay_ms", "60000", NULL};
    relock_client *a = tu_client(tu_srv.port, "modern", set);
    relock_client *b = tu_client(tu_srv.port, "modern", NULL);
    relock_lock *la = NULL, *lb = NULL;
    assert_int_equal(relock_try_acquire(a, "ld-clean", TTL_MS, &la), RELOCK_OK);
    assert_int_equal(relock_try_acquire(b, "ld-clean", TTL_MS, &lb), RELOCK_BUSY);
    assert_int_equal(relock_release(la), RELOCK_OK);
    assert_int_equal(relock_try_acquire(b, "ld-clean", TTL_MS, &lb), RELOCK_OK);
    assert_int_equal(relock_release(lb), RELOCK_OK);
    relock_lock_free(la);
    relock_lock_free(lb);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_validity_unchanged(void **state)
{
    (void)state;
    const char *fencing[] = {"true", "false"};
    for (int f = 0; f < 2; f++) {
        const char *set[] = {"lock_delay_ms", "5000", "fencing", fencing[f], "owner_info", "true",
                             NULL};
        relock_client *c = tu_client(tu_srv.port, "modern", set);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(c, "ld-valid", TTL_MS, &l), RELOCK_OK);
        long long v = relock_lock_validity_ms(l);
        assert_true(v > 0 && v <= TTL_MS);
        long long t = pttl("ld-valid");
        assert_true(t > 5000 && t <= TTL_MS + 5000);
        /* The owner record lives as long as the key. */
        t = pttl("{ld-valid} relock:owner");
        assert_true(t > 5000 && t <= TTL_MS + 5000);
        assert_int_equal(relock_extend(l, 2000), RELOCK_OK);
        v = relock_lock_validity_ms(l);
        assert_true(v > 1000 && v <= 2000);
        t = pttl("ld-valid");
        assert_true(t > 6000 && t <= 7000);
        assert_int_equal(relock_release(l), RELOCK_OK);
        assert_int_equal(pttl("ld-valid"), -2);
        relock_lock_free(l);
        relock_client_free(c);
    }
}

static relock_status connect_set(const char *mode, const char *const *set, relock_client **c)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_srv.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    for (int i = 0; set[i]; i += 2)
        assert_int_equal(relock_config_set(cfg, set[i], set[i + 1]), RELOCK_OK);
    relock_status st = relock_connect(cfg, c);
    relock_config_free(cfg);
    return st;
}

static void test_refused(void **state)
{
    (void)state;
    const char *set[] = {"lock_delay_ms", "100", NULL};
    const char *modes[] = {"legacy", "bridge"};
    for (int i = 0; i < 2; i++) {
        relock_client *c = NULL;
        assert_int_equal(connect_set(modes[i], set, &c), RELOCK_EUNSUPPORTED);
        if (!strstr(relock_client_error(c)->message, "lock_delay_ms: only in modern mode"))
            fail_msg("message: %s", relock_client_error(c)->message);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(c, "ld-refused", TTL_MS, &l), RELOCK_EUNSUPPORTED);
        assert_null(l);
        relock_client_free(c);
    }
    char servers[128];
    snprintf(servers, sizeof servers, "redis://127.0.0.1:%d,redis://127.0.0.1:%d", tu_srv.port,
             tu_srv.port);
    const char *q[] = {"servers", servers, "lock_delay_ms", "100", NULL};
    relock_client *c = NULL;
    assert_int_equal(connect_set("modern", q, &c), RELOCK_EUNSUPPORTED);
    if (!strstr(relock_client_error(c)->message, "lock_delay_ms: not with several servers"))
        fail_msg("message: %s", relock_client_error(c)->message);
    relock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stopped_holder_keeps_delay),
        cmocka_unit_test(test_clean_release_frees_at_once),
        cmocka_unit_test(test_validity_unchanged),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
