/*
 * relock run: hold a lock while a command runs, as flock(1) does.
 *
 * The parent blocks the signals it cares about and waits for them with
 * sigtimedwait(), so there are no asynchronous handlers: SIGCHLD ends the
 * wait, SIGINT/SIGTERM/SIGHUP are passed on to the command, and the
 * timeout is the next renewal.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

const char help_run[] =
    "usage: relock run [-t TTL] [-w WAIT | -n] [-E CODE] NAME -- CMD [ARG...]\n"
    "Acquire NAME, run CMD while renewing the lock, release it when CMD ends,\n"
    "and exit with CMD's exit code (128+N if a signal N ended it).\n"
    "  -t TTL   lease, renewed in the background every third of it (default 30s)\n"
    "  -w WAIT  wait at most WAIT for the lock (default: wait.max_ms, forever)\n"
    "  -n       do not wait: fail at once if NAME is held\n"
    "  -E CODE  exit code when the lock is not acquired (default 1)\n"
    "CMD gets RELOCK_NAME, RELOCK_VALUE and RELOCK_FENCE in its environment.\n"
    "SIGINT, SIGTERM and SIGHUP are passed on to CMD. If the lock is lost while\n"
    "CMD runs, CMD gets SIGTERM (SIGKILL 5 s later) and relock exits 3.\n";

/* Time CMD gets between SIGTERM and SIGKILL after the lock is lost. */
#define KILL_GRACE_MS 5000

static int wait_status_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return EXIT_SERVER;
}

static pid_t spawn(char **cmd, const sigset_t *oldmask, relock_lock *l)
{
    char fence[32];
    snprintf(fence, sizeof fence, "%lld", relock_lock_fence(l));
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    signal(SIGPIPE, SIG_DFL); /* ignored dispositions survive exec: restore */
    setenv("RELOCK_NAME", relock_lock_name(l), 1);
    setenv("RELOCK_VALUE", relock_lock_value(l), 1);
    setenv("RELOCK_FENCE", fence, 1);
    execvp(cmd[0], cmd);
    int e = errno;
    fprintf(stderr, "relock: run: cannot run %s: %s\n", cmd[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
}

/* Waits for the child for at most ms; returns 1 when it has ended. */
static int reap_within(pid_t pid, long ms, int *status)
{
    for (long waited = 0; waited <= ms; waited += 10) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Set by the renewal thread before it signals the main thread. */
static volatile relock_status lost_why = RELOCK_LOST;

static void on_lost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    (void)arg;
    lost_why = why;
    kill(getpid(), SIGUSR1);
}

static int lost_while_running(pid_t pid, relock_client *c, relock_status why)
{
    (void)c;
    cli_error("run: lock lost while CMD was running: %s",
              why == RELOCK_LOST ? "it was taken, deleted or expired"
                                 : relock_strerror(why));
    kill(pid, SIGTERM);
    int status;
    if (!reap_within(pid, KILL_GRACE_MS, &status)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    return EXIT_LOST;
}

int cmd_run(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+t:w:nE:h", help_run, &o);
    if (rc)
        return rc - 1000;
    long ttl_ms = o.ttl_ms, wait_ms = o.wait_ms;
    int exit_busy = o.exit_busy;
    if (argc - optind < 2) {
        cli_error("run: expected NAME -- CMD [ARG...] (try relock run --help)");
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    char **cmd = argv + optind + 1;
    if (strcmp(cmd[0], "--") == 0)
        cmd++;
    if (!cmd[0]) {
        cli_error("run: no CMD after --");
        return EXIT_USAGE;
    }
    if (ttl_ms == 0)
        ttl_ms = relock_config_ttl_ms(ctx->cfg);

    int code = 0;
    relock_client *c = cli_connect(ctx, &code);
    if (!c)
        return code;
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, name, ttl_ms, wait_ms, &l);
    if (st != RELOCK_OK) {
        code = cli_fail(c, st, "run");
        relock_client_free(c);
        return (st == RELOCK_BUSY || st == RELOCK_TIMEOUT) ? exit_busy : code;
    }

    /* Blocked before the renewal thread starts, so it inherits the mask
     * and every signal comes to sigwaitinfo() below. */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    st = relock_keep(l, on_lost, NULL);
    if (st != RELOCK_OK) {
        code = cli_fail(c, st, "run: renewal");
        relock_release(l);
        relock_lock_free(l);
        relock_client_free(c);
        sigprocmask(SIG_SETMASK, &oldmask, NULL);
        return code;
    }
    pid_t pid = spawn(cmd, &oldmask, l);
    if (pid < 0) {
        cli_error("run: fork: %s", strerror(errno));
        relock_release(l);
        relock_lock_free(l);
        relock_client_free(c);
        sigprocmask(SIG_SETMASK, &oldmask, NULL);
        return EXIT_SERVER;
    }

    int status = 0;
    code = -1;
    for (;;) {
        int sig = sigwaitinfo(&mask, NULL);
        if (sig == SIGCHLD || sig < 0) {
            if (waitpid(pid, &status, WNOHANG) == pid)
                break;
        } else if (sig == SIGUSR1) {
            code = lost_while_running(pid, c, lost_why);
            break;
        } else {
            kill(pid, sig); /* pass SIGINT/SIGTERM/SIGHUP on to CMD */
        }
    }
    /* A loss noticed from here on is reported by the release below; a
     * pending notice must not kill us once the mask is restored. */
    signal(SIGUSR1, SIG_IGN);
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    if (code < 0) {
        code = wait_status_code(status);
        st = relock_release(l);
        if (st == RELOCK_LOST) {
            cli_fail(c, st, "run: lock lost before CMD finished");
            code = EXIT_LOST;
        } else if (st != RELOCK_OK) {
            cli_fail(c, st, "run: release");
        }
    }
    relock_lock_free(l);
    relock_client_free(c);
    return code;
}
