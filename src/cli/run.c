/*
 * relock run: hold a lock while a command runs, as flock(1) does.
 *
 * CMD runs in a process group of its own, so that what relock does to it
 * (a forwarded signal, SIGTERM and SIGKILL when the lock is lost) reaches
 * every process CMD started, not only CMD.  When relock has the terminal,
 * CMD's group gets it while CMD runs.
 *
 * If relock itself dies, SIGKILL included, a small guardian process in
 * CMD's group notices (the pipe only relock writes to reads EOF) and ends
 * the group: SIGTERM, then SIGKILL after at most a quarter of the lease.
 * Renewals stop with relock, but the lease then still has at least two
 * thirds of its time (renewed every third), so the tree is gone before
 * another holder can acquire.
 *
 * The parent blocks the signals it cares about and reads them from a
 * signalfd, together with a pipe on which the renewal thread reports a
 * lost lock: no asynchronous handlers, and no signal a user could send
 * means anything to relock but "pass this on" (INT, TERM, HUP, QUIT, USR1,
 * USR2 go to CMD's group).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

const char help_run[] =
    "usage: relock run [-t TTL] [-w WAIT | -n] [-q | -v] [-E CODE] [--owner TEXT]\n"
    "                  NAME -- CMD [ARG...]\n"
    "       relock run [options] NAME -c 'SHELL COMMAND'\n"
    "Acquire NAME, run CMD while renewing the lock, release it when CMD ends,\n"
    "and exit with CMD's exit code (128+N if a signal N ended it).\n"
    "  -t TTL   lease, renewed in the background every third of it (default 30s)\n"
    "  -w WAIT  wait at most WAIT for the lock (default: wait.max_ms, forever)\n"
    "  -n       do not wait: fail at once if NAME is held\n"
    "  -q       say nothing when the lock is not acquired (cron mails no overlap)\n"
    "  -v       say who holds the lock and how long relock waited\n"
    "  -E CODE, --exit-busy CODE   exit code when the lock is not acquired (1)\n"
    "  --exit-lost CODE            exit code when the lock is lost (3)\n"
    "  --exit-error CODE           exit code for relock's own errors (2, 4)\n"
    "  --owner TEXT                who holds it, for relock inspect (default: CMD)\n"
    "TTL and WAIT are seconds (10, 1.5) or carry units (250ms, 5m, 1m30s).\n"
    "CMD gets RELOCK_NAME, RELOCK_VALUE and RELOCK_FENCE in its environment, and\n"
    "runs in a process group of its own. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1\n"
    "and SIGUSR2 are passed on to that group. If the lock is lost while CMD runs,\n"
    "the group gets SIGTERM (SIGKILL 5 s later) and relock exits 3. If relock\n"
    "itself dies, the group is ended before the lease can run out.\n";

/* Time CMD gets between SIGTERM and SIGKILL after the lock is lost. */
#define KILL_GRACE_MS 5000

/* The signals passed on to CMD's group. */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof forwarded / sizeof forwarded[0])

static int wait_status_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return EXIT_SERVER;
}

/* Gives the terminal's foreground to group pgid (0: back to ours), when
 * relock had it.  SIGTTOU is blocked around the call: a background group
 * may not change it otherwise. */
static void hand_terminal(int had_tty, pid_t pgid)
{
    if (!had_tty)
        return;
    sigset_t tt, old;
    sigemptyset(&tt);
    sigaddset(&tt, SIGTTOU);
    sigprocmask(SIG_BLOCK, &tt, &old);
    tcsetpgrp(STDIN_FILENO, pgid ? pgid : getpgrp());
    sigprocmask(SIG_SETMASK, &old, NULL);
}

static pid_t spawn(char **cmd, const sigset_t *oldmask, relock_lock *l, int had_tty)
{
    char fence[32];
    snprintf(fence, sizeof fence, "%lld", relock_lock_fence(l));
    pid_t pid = fork();
    if (pid != 0) {
        if (pid > 0) {
            setpgid(pid, pid); /* both sides: whichever runs first */
            hand_terminal(had_tty, pid);
        }
        return pid;
    }
    setpgid(0, 0);
    hand_terminal(had_tty, getpid());
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

static void sleep_ms(long long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/*
 * The guardian: joins CMD's group, ignores every signal it can, and waits
 * on the read end of a pipe only relock writes to.  A byte means "CMD is
 * done, stand down"; end of file means relock is gone: the group gets
 * SIGTERM, then SIGKILL after grace_ms (which ends the guardian too).
 * Only async-signal-safe calls: the parent has threads.
 */
static pid_t start_guardian(pid_t pgid, int rfd, int wfd, long long grace_ms)
{
    pid_t g = fork();
    if (g != 0)
        return g;
    close(wfd);
    if (setpgid(0, pgid) < 0)
        _exit(0); /* the group is gone already: nothing to guard */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD)
            signal(sig, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        /* Holds no pipe of CMD's open: a reader of CMD's output sees its
         * end when CMD's processes end. */
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
    }
    char b;
    ssize_t n;
    while ((n = read(rfd, &b, 1)) < 0 && errno == EINTR)
        ;
    if (n == 1)
        _exit(0);
    kill(-pgid, SIGTERM);
    kill(-pgid, SIGCONT);
    sleep_ms(grace_ms);
    kill(-pgid, SIGKILL);
    _exit(0);
}

/* Waits for the child for at most ms; returns 1 when it has ended. */
static int reap_within(pid_t pid, long ms, int *status)
{
    for (long waited = 0; waited <= ms; waited += 10) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void lost_while_running(pid_t pgid, int *status, const cli_keeper *k)
{
    cli_keep_say_lost(k, "run: lock lost while CMD was running");
    kill(-pgid, SIGTERM);
    kill(-pgid, SIGCONT); /* a stopped process acts on SIGTERM only once continued */
    if (!reap_within(pgid, KILL_GRACE_MS, status)) {
        kill(-pgid, SIGKILL);
        waitpid(pgid, status, 0);
    } else {
        kill(-pgid, SIGKILL); /* what CMD left behind in its group */
    }
}

int cmd_run(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+t:w:nqvE:h", help_run,
                                CLI_TALK | CLI_EXITS | CLI_OWNER, &o);
    if (rc)
        return rc - 1000;
    long long ttl_ms = o.ttl_ms, wait_ms = o.wait_ms;
    if (argc - optind < 2) {
        cli_error("run: expected NAME -- CMD [ARG...] or NAME -c 'COMMAND' (try relock run "
                  "--help)");
        return cli_code(&o, EXIT_USAGE);
    }
    const char *name = argv[optind];
    char **cmd = argv + optind + 1;
    char *shell[] = {"/bin/sh", "-c", NULL, NULL};
    if (strcmp(cmd[0], "--") == 0) {
        cmd++;
    } else if (strcmp(cmd[0], "-c") == 0) {
        /* flock's form: NAME -c 'shell command' */
        if (!cmd[1] || cmd[2]) {
            cli_error("run: -c takes one shell command, quoted: relock run NAME -c 'a && b'");
            return cli_code(&o, EXIT_USAGE);
        }
        shell[2] = cmd[1];
        cmd = shell;
    }
    if (!cmd[0]) {
        cli_error("run: no CMD after --");
        return cli_code(&o, EXIT_USAGE);
    }
    if (ttl_ms == 0)
        ttl_ms = relock_config_ttl_ms(ctx->cfg);

    int code = cli_owner_setup(ctx, "run", &o, OWNER_CMD, cmd);
    if (code)
        return cli_code(&o, code);
    relock_client *c = cli_connect(ctx, &code);
    if (!c)
        return cli_code(&o, code);
    relock_lock *l = NULL;
    long long t0 = mono_ms();
    cli_progress *progress = cli_progress_start(ctx, "run", name, o.verbose);
    relock_status st = cli_acquire(c, "run", name, ttl_ms, wait_ms, &l);
    cli_progress_stop(progress);
    if (st == RELOCK_BUSY || st == RELOCK_TIMEOUT) {
        if (!o.quiet)
            cli_fail(c, st, "run");
        if (o.verbose) {
            fprintf(stderr, "relock: run: waited %lld ms\n", mono_ms() - t0);
            cli_say_holder(c, "run", name);
        }
        relock_client_free(c);
        return o.exit_busy;
    }
    if (st != RELOCK_OK) {
        code = cli_code(&o, cli_fail(c, st, "run"));
        relock_client_free(c);
        return code;
    }
    if (o.verbose)
        fprintf(stderr, "relock: run: %s acquired after %lld ms, fence %lld\n", name,
                mono_ms() - t0, relock_lock_fence(l));

    /* Blocked before the renewal thread starts, so that it inherits the
     * mask and every signal comes to the signalfd below. */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (size_t i = 0; i < NFORWARDED; i++)
        sigaddset(&mask, forwarded[i]);
    /* Blocking SIGCONT does not stop it from continuing relock; read from
     * the signalfd it is passed on, so that `kill -STOP` then `kill -CONT`
     * of relock's group stops and continues CMD's too. */
    sigaddset(&mask, SIGCONT);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    int gpipe[2] = {-1, -1};
    cli_keeper keeper = {{-1, -1}, RELOCK_LOST};
    if (sfd < 0 || pipe2(gpipe, O_CLOEXEC) < 0) {
        cli_error("run: %s", strerror(errno));
        code = cli_code(&o, EXIT_SERVER);
        goto out_release;
    }
    code = cli_keep_start(&keeper, c, l, "run");
    if (code) {
        code = cli_code(&o, code);
        goto out_release;
    }
    int had_tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
    pid_t pid = spawn(cmd, &oldmask, l, had_tty);
    if (pid < 0) {
        cli_error("run: fork: %s", strerror(errno));
        code = cli_code(&o, EXIT_SERVER);
        goto out_release;
    }
    cli_owner_cmd(l, &o, (long)pid, cmd);
    long long grace = ttl_ms / 4 < KILL_GRACE_MS ? ttl_ms / 4 : KILL_GRACE_MS;
    pid_t guardian = start_guardian(pid, gpipe[0], gpipe[1], grace);
    close(gpipe[0]);
    gpipe[0] = -1;

    int status = 0;
    code = -1;
    for (;;) {
        struct pollfd pf[2] = {{sfd, POLLIN, 0}, {keeper.fd[0], POLLIN, 0}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents) {
            lost_while_running(pid, &status, &keeper);
            code = o.exit_lost;
            break;
        }
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof si) != (ssize_t)sizeof si)
            continue;
        if ((int)si.ssi_signo == SIGCHLD) {
            if (waitpid(pid, &status, WNOHANG) == pid)
                break;
        } else {
            kill(-pid, (int)si.ssi_signo); /* CMD's whole group */
        }
    }
    hand_terminal(had_tty, 0);
    /* CMD is done: the guardian stands down, and is reaped. */
    if (write(gpipe[1], "q", 1) != 1 && guardian > 0)
        kill(guardian, SIGKILL);
    if (guardian > 0 && !reap_within(guardian, 1000, &(int){0})) {
        kill(guardian, SIGKILL);
        waitpid(guardian, NULL, 0);
    }
    if (code < 0) {
        code = wait_status_code(status);
        st = relock_release(l);
        if (st == RELOCK_LOST) {
            cli_fail(c, st, "run: lock lost before CMD finished");
            code = o.exit_lost;
        } else if (st != RELOCK_OK) {
            cli_fail(c, st, "run: release");
        }
    }
    goto out;
out_release:
    relock_release(l);
out:
    relock_lock_free(l);
    relock_client_free(c);
    cli_keep_close(&keeper);
    for (int i = 0; i < 2; i++)
        if (gpipe[i] >= 0)
            close(gpipe[i]);
    if (sfd >= 0)
        close(sfd);
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    return code;
}
