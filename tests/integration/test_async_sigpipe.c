/*
 * The asynchronous client cannot be killed by SIGPIPE (decision 241), on
 * libevent (it_async_sigpipe_libevent) or libuv (it_async_sigpipe_libuv,
 * built with TEST_LIBUV).
 *
 * A program with SIGPIPE at its default action keeps a thousand acquires
 * in flight through a forwarder in front of a real redis-server, each
 * completion starting the next, while the forwarder half-closes and then
 * resets every connection, round after round: the client's kernel records
 * EPIPE, and the pipelined writes queued behind meet it.  The program must
 * live, end with SIGPIPE still at SIG_DFL, unblocked and not pending, and
 * some operation must have ended with the write's "Broken pipe" (a write()
 * that failed with EPIPE, which raised SIGPIPE): the test tested
 * something.  Built with TEST_UNGUARDED, the library writes without
 * blocking SIGPIPE, and the same program dies by SIGPIPE.
 *
 * The same forwarder's reset, with replies still unread, must be noticed
 * when the loop turns rather than at the command timeout
 * (test_reset_with_replies_queued).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#ifdef TEST_LIBUV
#include "relock_async_libuv.h"
#else
#include "relock_async_libevent.h"
#endif
#include "forwarder.h"
#include "relock.h"
#include "relock_async.h"
#include "testsrv.h"
#include "testutil.h"

#ifdef TEST_UNGUARDED
/* The mechanism taken away, to see the test fail without it: the library
 * is linked statically, and this definition replaces its own. */
void relock__write_nopipe(void (*fn)(void *), void *arg);
void relock__write_nopipe(void (*fn)(void *), void *arg)
{
    fn(arg);
}
#endif

static testsrv srv;

/* ------------------------------------------------------------ the loop */

#ifdef TEST_LIBUV
static uv_loop_t uvl;
static void loop_init(relock_async_loop *lp)
{
    if (uv_loop_init(&uvl) != 0)
        _exit(30);
    relock_async_libuv(lp, &uvl);
}
static void loop_once(void)
{
    uv_run(&uvl, UV_RUN_NOWAIT);
    usleep(200);
}
static void loop_fini(void)
{
    for (int i = 0; i < 200 && uv_loop_close(&uvl) != 0; i++)
        uv_run(&uvl, UV_RUN_NOWAIT);
}
#else
static struct event_base *base;
static void loop_init(relock_async_loop *lp)
{
    base = event_base_new();
    if (!base)
        _exit(30);
    relock_async_libevent(lp, base);
}
static void loop_once(void)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
    usleep(200);
}
static void loop_fini(void)
{
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
}
#endif

/* ------------------------------------------------------------ the forwarder */

/* Between the client and the server: tests/support/forwarder.c, which
 * resets each connection at once after its FIN. */

/* ------------------------------------------------------------ the program */

enum { IN_FLIGHT = 1000, ROUNDS = 40 };

static relock_async *client;
static long started, done_ops, broken, refused;
static int stopping;

static void start_one(void);

static void op_done(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                    void *arg)
{
    (void)a;
    (void)st;
    (void)arg;
    done_ops++;
    if (strstr(e->message, "Broken pipe"))
        broken++;
    relock_lock_free(l); /* unreleased: the key's TTL ends it */
    if (!stopping)
        start_one();
}

static void start_one(void)
{
    char name[32];
    snprintf(name, sizeof name, "sp%ld", started++ % 4096);
    if (relock_async_try_acquire(client, name, 2000, op_done, NULL, NULL) != RELOCK_OK)
        refused++;
}

/*
 * SIGPIPE at its default action and unblocked; the forwarder on lfd.
 * Reports "broken B done D rounds R" and exits 0 when SIGPIPE is still at
 * SIG_DFL, unblocked and not pending at the end.
 */
static void sigpipe_child(int lfd, int fport, tu_chan *ch)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &pipe_only, NULL);
    pid_t fwd = forwarder_start(lfd, srv.port, 0);

    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", fport);
    if (!cfg || relock_config_set_url(cfg, url) != RELOCK_OK ||
        relock_config_set(cfg, "mode", "modern") != RELOCK_OK ||
        relock_config_set(cfg, "key_prefix", "sigpipe:") != RELOCK_OK ||
        relock_config_set(cfg, "command_timeout_ms", "3000") != RELOCK_OK)
        _exit(31);
    if (relock_async_new(cfg, &lp, &client) != RELOCK_OK)
        _exit(32);
    relock_config_free(cfg);
    for (int i = 0; i < IN_FLIGHT; i++)
        start_one();

    /* Each round: a few hundred operations complete, then every connection
     * is reset under the writes queued behind them.  Bounded in rounds and
     * in time; a handful of broken writes is enough. */
    int rounds = 0;
    uint64_t deadline = tu_now_ms() + 40000;
    for (; rounds < ROUNDS && broken < 20 && tu_now_ms() < deadline; rounds++) {
        long want = done_ops + 300;
        uint64_t end = tu_now_ms() + 2000;
        while (done_ops < want && tu_now_ms() < end)
            loop_once();
        kill(fwd, SIGUSR1);
        end = tu_now_ms() + 100;
        while (tu_now_ms() < end)
            loop_once();
    }
    stopping = 1;
    relock_async_free(client);
    loop_fini();

    struct sigaction sa;
    sigset_t mask, pending;
    int dfl = sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL;
    int blocked = pthread_sigmask(SIG_BLOCK, NULL, &mask) != 0 || sigismember(&mask, SIGPIPE);
    int pend = sigpending(&pending) != 0 || sigismember(&pending, SIGPIPE);
    char line[160];
    snprintf(line, sizeof line, "broken %ld done %ld rounds %d refused %ld dfl %d blocked %d pending %d",
             broken, done_ops, rounds, refused, dfl, blocked, pend);
    tu_chan_send(ch, line);
    kill(fwd, SIGKILL);
    waitpid(fwd, NULL, 0);
    _exit(dfl && !blocked && !pend && refused == 0 ? 0 : 21);
}

static void test_sigpipe_default(void **state)
{
    (void)state;
    relock_async_socket_action(NULL, RELOCK_IO_WRITE); /* accepted, does nothing */
    int fport = 0;
    int lfd = forwarder_listen(&fport);

    tu_chan ch;
    assert_int_equal(tu_chan_open(&ch), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        sigpipe_child(lfd, fport, &ch);
    close(lfd);
    /* Only the child writes: its death then ends the read at once. */
    close(ch.wr);
    ch.wr = -1;
    char line[160] = "";
    int got = tu_chan_recv(&ch, line, sizeof line, 90000);
    int status = tu_wait_child(pid, 90000);
    tu_chan_close(&ch);
    if (status != -1 && WIFSIGNALED(status))
        fail_msg("the program was killed by signal %d%s", WTERMSIG(status),
                 WTERMSIG(status) == SIGPIPE ? " (SIGPIPE)" : "");
    assert_int_equal(got, 0);
    printf("sigpipe: %s\n", line);
    assert_true(status != -1 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* Writes did meet the closed connections: EPIPE, which raises SIGPIPE
     * in a thread that does not block it. */
    long broken_n = -1;
    assert_int_equal(sscanf(line, "broken %ld", &broken_n), 1);
    assert_true(broken_n >= 1);
}

/*
 * A connection reset while replies wait unread in the client's socket is
 * noticed when the loop turns, not at the command timeout.  The operations
 * are written, their replies arrive while the loop does not run, and the
 * forwarder then half-closes and resets the connection: the descriptor
 * reports an error with more replies queued ahead of it than one read
 * takes.  On libuv an error stops the poll handle; a handle left stopped
 * heard nothing more, and every operation after the first read waited for
 * its command timeout ("no reply within").
 */
enum { QUEUED_OPS = 4000 };
static long q_done, q_timed_out;

static void queued_done(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                        void *arg)
{
    (void)a;
    (void)st;
    (void)arg;
    q_done++;
    if (strstr(e->message, "command_timeout_ms"))
        q_timed_out++;
    relock_lock_free(l);
}

static void test_reset_with_replies_queued(void **state)
{
    (void)state;
    /* This test is about wake-ups, not SIGPIPE: ignored, it cannot end the
     * TEST_UNGUARDED build's test process. */
    signal(SIGPIPE, SIG_IGN);
    int fport = 0;
    int lfd = forwarder_listen(&fport);
    pid_t fwd = forwarder_start(lfd, srv.port, 0);
    close(lfd);
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", fport);
    assert_non_null(cfg);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", "queued:"), RELOCK_OK);
    /* Far beyond the bounds below: an operation that waits for it is the
     * failure. */
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "60000"), RELOCK_OK);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    for (int i = 0; i < QUEUED_OPS; i++) {
        char name[32];
        snprintf(name, sizeof name, "q%d", i);
        assert_int_equal(relock_async_try_acquire(a, name, 2000, queued_done, NULL, NULL),
                         RELOCK_OK);
    }
    /* Connected and written: the first replies came back. */
    uint64_t end = tu_now_ms() + 10000;
    while (q_done == 0 && tu_now_ms() < end)
        loop_once();
    assert_true(q_done > 0);
    /* The rest of the replies arrive unread, then the reset. */
    usleep(500000);
    kill(fwd, SIGUSR1);
    usleep(300000);
    end = tu_now_ms() + 20000;
    while (q_done < QUEUED_OPS && tu_now_ms() < end)
        loop_once();
    long done_n = q_done, timed_out_n = q_timed_out;
    relock_async_free(a);
    loop_fini();
    kill(fwd, SIGKILL);
    waitpid(fwd, NULL, 0);
    printf("queued: done %ld of %d, timed out %ld\n", done_n, QUEUED_OPS, timed_out_n);
    assert_int_equal(done_n, QUEUED_OPS);
    assert_int_equal(timed_out_n, 0);
}

static int setup(void **state)
{
    (void)state;
    return testsrv_start(&srv, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&srv);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigpipe_default),
        cmocka_unit_test(test_reset_with_replies_queued),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
