/*
 * A step of one process's local wall clock, forward and back, after it
 * learned the server's clock (legacy.clock = "server") or with its own
 * (clock = "local"), on a real redis-server and the proxy personalities.
 *
 * The step is made inside a forked child: this program defines
 * clock_gettime, which the library (linked statically) calls, and which
 * adds the child's step to CLOCK_REALTIME only.  The monotonic clock is
 * never stepped, as in an NTP step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h" /* relock__wall_ms: the shim's own check */
#include "clock_step.h"
#include "relock.h"
#include "testclient.h"
#include "testutil.h"

/* ------------------------------------------------------------ the step */

/* clock_step_ms and clock_true_wall_ms: tests/support/clock_step.c, a
 * source of this program. */

/* ------------------------------------------------------------ servers */

enum { NPERS = 5 };
static const char *const pers_name[NPERS] = {"2.0", "2.2", "2.4", "2.6.0", "7"};
enum { P20 = 0, P22, P24, P260, P7 };
static testsrv srv;
static testsrv proxy[NPERS];

static int port_of(int pi)
{
    return pi == P7 ? srv.port : proxy[pi].port;
}

static int group_setup(void **state)
{
    (void)state;
    if (testsrv_start(&srv, NULL) != 0)
        return -1;
    for (int i = 0; i < P7; i++)
        if (testsrv_start_proxy(&proxy[i], srv.port, pers_name[i], NULL) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < P7; i++)
        testsrv_stop(&proxy[i]);
    testsrv_stop(&srv);
    return 0;
}

/* ------------------------------------------------------------ the child */

#define STEP_MS 120000LL

/* In the child: a check that failed is reported on stderr and by exit code. */
#define CHILD_EXPECT(cond, code, ...)                                                          \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "child: " __VA_ARGS__);                                            \
            fprintf(stderr, " (%s)\n", relock_client_error(c)->message);                       \
            _exit(code);                                                                       \
        }                                                                                      \
    } while (0)

typedef struct scenario {
    int pi;           /* personality */
    const char *mode; /* legacy or bridge */
    const char *clock; /* server or local */
    char live[64];    /* a lock a classic client holds for 60 s */
    char mine[64];    /* a free lock the stepped child acquires after a back step */
} scenario;

/*
 * The child: learns the clock (one busy attempt on the live lock), then
 * its wall clock steps forward, then back.  Exit 0 when every decision
 * came out as the clock setting promises; with clock = "local" the
 * forward step takes the live lock (exit 0 too: the negative control
 * reports it by writing "took" on its pipe).
 */
static void child(const scenario *sc, tu_chan *ch)
{
    const char *const kv[] = {"legacy.clock", sc->clock, NULL};
    relock_client *c = tu_client(port_of(sc->pi), sc->mode, kv);
    int server = strcmp(sc->clock, "server") == 0;
    relock_lock *l = NULL;
    CHILD_EXPECT(relock_acquire(c, sc->live, 5000, 0, &l) == RELOCK_BUSY, 10, "held before the step");

    clock_step_ms = STEP_MS;
    long long seen = relock__wall_ms() - clock_true_wall_ms();
    CHILD_EXPECT(seen >= STEP_MS - 50 && seen <= STEP_MS + 50, 11, "the shim steps by %lld", seen);
    relock_status st = relock_acquire(c, sc->live, 5000, 0, &l);
    if (server) {
        CHILD_EXPECT(st == RELOCK_BUSY, 12, "+120 s: took a live lock (%s)", relock_status_name(st));
    } else {
        CHILD_EXPECT(st == RELOCK_OK, 13, "+120 s, clock local: expected to take the live lock");
        tu_chan_send(ch, "took");
        relock_lock_free(l);
        l = NULL;
    }

    clock_step_ms = -STEP_MS;
    st = relock_acquire(c, sc->mine, 10000, 0, &l);
    CHILD_EXPECT(st == RELOCK_OK, 14, "-120 s: acquire of a free lock (%s)", relock_status_name(st));
    /* The value written: the fleet's clock (the server's) or ours, 120 s
     * behind.  Reported for the parent to judge with its own clock. */
    char line[128];
    snprintf(line, sizeof line, "%s %lld", relock_lock_value(l), relock_lock_validity_ms(l));
    tu_chan_send(ch, line);
    relock_lock_free(l); /* not released: it stays held for the parent to meet */
    if (server) {
        /* Back at the true time, and after a new measurement: the live
         * lock is still held. */
        clock_step_ms = 0;
        tu_sleep_ms(RELOCK__CLOCK_REMEASURE_MS + 100);
        clock_step_ms = STEP_MS;
        st = relock_acquire(c, sc->live, 5000, 0, &l);
        CHILD_EXPECT(st == RELOCK_BUSY, 15, "+120 s after re-measuring: took a live lock");
    }
    relock_client_free(c);
    _exit(0);
}

static void run_scenario(scenario *sc)
{
    const char *tag = pers_name[sc->pi];
    snprintf(sc->live, sizeof sc->live, "clk-live-%s-%s-%s", tag, sc->mode, sc->clock);
    snprintf(sc->mine, sizeof sc->mine, "clk-mine-%s-%s-%s", tag, sc->mode, sc->clock);
    char v[32];
    /* A classic holder, live for 60 s by every true clock. */
    snprintf(v, sizeof v, "%lld", clock_true_wall_ms() / 1000 + 60);
    char *r = testsrv_cmd(&srv, "SET %s %s", sc->live, v);
    free(r);
    r = testsrv_cmd(&srv, "DEL %s", sc->mine);
    free(r);
    tu_chan ch;
    assert_int_equal(tu_chan_open(&ch), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ch.rd);
        child(sc, &ch);
    }
    close(ch.wr);
    ch.wr = -1;
    int server = strcmp(sc->clock, "server") == 0;
    char line[128];
    if (!server) {
        assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 20000), 0);
        assert_string_equal(line, "took");
    }
    assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 20000), 0);
    long long ts = atoll(line);
    const char *sp = strchr(line, ' ');
    long validity = sp ? atol(sp + 1) : 0;
    assert_true(validity > 8000);
    /* An unstepped client meets the lock the stepped child holds. */
    relock_client *c = tu_client(port_of(sc->pi), sc->mode, NULL);
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, sc->mine, 5000, 0, &l);
    long long now_s = clock_true_wall_ms() / 1000;
    if (server) {
        /* Written by the server's clock: about now + 10 s + 1. */
        assert_true(ts >= now_s + 9 && ts <= now_s + 12);
        assert_int_equal(st, RELOCK_BUSY);
    } else {
        /* Written 110 s in the past: expired for everybody else at once,
         * while its holder was told it has 10 s: the hazard of local
         * clocks that clock = "server" removes. */
        assert_true(ts <= now_s - 100);
        assert_int_equal(st, RELOCK_OK);
        relock_lock_free(l);
    }
    relock_client_free(c);
    int status = tu_wait_child(pid, 30000);
    tu_chan_close(&ch);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s %s clock=%s: child status %d", tag, sc->mode, sc->clock, status);
}

/* clock = "server": no step changes a decision (2.6.0 and 7, which have
 * TIME; bridge too). */
static void test_server_clock_ignores_steps(void **state)
{
    (void)state;
    scenario s[] = {{P260, "legacy", "server", "", ""},
                    {P7, "legacy", "server", "", ""},
                    {P260, "bridge", "server", "", ""},
                    {P7, "bridge", "server", "", ""}};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        run_scenario(&s[i]);
}

/* clock = "local" (the negative control): a forward step takes a live
 * lock, a back step writes a lock others take at once; on every
 * personality. */
static void test_local_clock_follows_steps(void **state)
{
    (void)state;
    scenario s[] = {{P20, "legacy", "local", "", ""},
                    {P22, "legacy", "local", "", ""},
                    {P24, "legacy", "local", "", ""},
                    {P260, "legacy", "local", "", ""},
                    {P7, "bridge", "local", "", ""}};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        run_scenario(&s[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_clock_ignores_steps),
        cmocka_unit_test(test_local_clock_follows_steps),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
