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
 * the group: SIGTERM, then SIGKILL after at most a quarter of the lease,
 * and no later than the end of the validity relock last computed (a page
 * shared with the guardian holds it): renewals stop with relock, and after
 * renewals that failed the lease may have less than that quarter left.
 * In modern mode the guardian then has the lock released, so that waiters
 * need not sit out the lease.
 *
 * The lock is held until CMD and every process left in its group have
 * ended (as flock's lock lives while any process holds the inherited
 * descriptor), or with --kill-rest those are ended when CMD exits.  The
 * loss deadline is relock's own: the loop wakes when the validity ends,
 * whatever the renewal thread is still waiting for (keep.c).
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
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

const char help_run[] =
    "usage: relock run [-t TTL] [-w WAIT | -n] [-q | -v] [-k DURATION] [--kill-rest]\n"
    "                  [--json] [EXIT CODES] [--owner TEXT] NAME -- CMD [ARG...]\n"
    "       relock run [options] NAME -c 'SHELL COMMAND'\n"
    "Acquire NAME, run CMD while renewing the lock, release it when CMD and every\n"
    "process left in its process group have ended, and exit with CMD's exit code\n"
    "(128+N if a signal N ended it).\n"
    "  -t, --ttl TTL      the LEASE, renewed every third of it (default 30s); not\n"
    "                     flock's --timeout, which is the wait: that is -w\n"
    "  -w, --wait WAIT    wait at most WAIT for the lock (default: wait.max_ms,\n"
    "                     forever; infinity: forever)\n"
    "  -n, --nonblock     do not wait: fail at once if NAME is held\n"
    "  -q, --quiet        say nothing when the lock is not acquired\n"
    "  -v, --verbose      say who holds the lock and how long relock waited\n"
    "  -k, --kill-after DURATION  SIGKILL CMD's group DURATION after a SIGTERM,\n"
    "                     SIGINT, SIGHUP or SIGQUIT passed on to it, and after a\n"
    "                     loss (default 5s after a loss only)\n"
    "  --kill-rest        when CMD exits, end what it left in its group (SIGTERM,\n"
    "                     SIGKILL after -k) instead of keeping the lock for it\n"
    "  --json             the acquisition and errors as JSON lines on stderr\n"
    "  -E, --exit-busy CODE        exit code when the lock is not acquired (1)\n"
    "  --exit-lost CODE            exit code when the lock is lost (3)\n"
    "  --exit-error CODE           exit code for relock's own errors (2, 4)\n"
    "  --owner TEXT                who holds it, for relock inspect (default: CMD)\n"
    "TTL and WAIT are seconds (10, 1.5) or carry units (250ms, 5m, 1m30s, 5min).\n"
    "CMD gets RELOCK_NAME, RELOCK_VALUE and RELOCK_FENCE in its environment, and\n"
    "runs in a process group of its own. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1\n"
    "and SIGUSR2 are passed on to that group. If the lock is lost while CMD runs\n"
    "(or its validity ends before a renewal succeeds), the group gets SIGTERM\n"
    "(SIGKILL 5 s or -k later) and relock exits 3. If relock itself dies, the\n"
    "group is ended before the lease can run out, and in modern mode the lock is\n"
    "released once the group is gone.\n";

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

/* Starts CMD in a group of its own.  The child execs only once relock has
 * written a byte on go (the guardian is in place by then): a relock killed
 * between the fork and the guardian's start leaves no CMD running
 * unguarded; the child sees the pipe's end instead and exits. */
static pid_t spawn(char **cmd, const sigset_t *oldmask, relock_lock *l, int had_tty,
                   const int go[2])
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
    close(go[1]);
    char b;
    ssize_t n;
    while ((n = read(go[0], &b, 1)) < 0 && errno == EINTR)
        ;
    if (n != 1)
        _exit(126); /* relock is gone: CMD never starts */
    close(go[0]);
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
 * What the guardian starts, once relock is gone, to release the lock when
 * CMD's group has ended: relock itself, `relock release --after-group
 * PGID NAME VALUE FENCE`, with the same configuration (the URL and file
 * through the environment, as relock may have read them, so that no
 * password shows in the process list).  Built before the fork, since the
 * guardian may only call async-signal-safe functions; only in modern mode,
 * where the value does not change with the renewals.
 */
typedef struct releaser {
    char *argv[12];
    char **envp;
    char pgid[24], fence[24];
} releaser;

extern char **environ;

static releaser *releaser_new(const cli_ctx *ctx, relock_client *c, relock_lock *l, pid_t pgid)
{
    if (relock_client_mode(c) != RELOCK_MODE_MODERN)
        return NULL;
    releaser *r = calloc(1, sizeof *r);
    size_t n = 0;
    while (environ[n])
        n++;
    if (!r || !(r->envp = calloc(n + 3, sizeof *r->envp))) {
        free(r);
        return NULL;
    }
    size_t e = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "RELOCK_URL=", 11) != 0 &&
            strncmp(environ[i], "RELOCK_CONFIG=", 14) != 0)
            r->envp[e++] = environ[i];
    char *url = NULL, *file = NULL;
    if (ctx->url && asprintf(&url, "RELOCK_URL=%s", ctx->url) > 0)
        r->envp[e++] = url;
    /* No file read: an empty RELOCK_CONFIG, so that the release reads
     * none either rather than the default file. */
    if (asprintf(&file, "RELOCK_CONFIG=%s", ctx->file ? ctx->file : "") > 0)
        r->envp[e++] = file;
    snprintf(r->pgid, sizeof r->pgid, "%ld", (long)pgid);
    snprintf(r->fence, sizeof r->fence, "%lld", relock_lock_fence(l));
    size_t a = 0;
    r->argv[a++] = "relock";
    r->argv[a++] = "-m";
    r->argv[a++] = "modern";
    r->argv[a++] = "release";
    r->argv[a++] = "-q";
    r->argv[a++] = "--after-group";
    r->argv[a++] = r->pgid;
    r->argv[a++] = "--";
    r->argv[a++] = (char *)relock_lock_name(l);
    r->argv[a++] = (char *)relock_lock_value(l);
    r->argv[a++] = r->fence;
    r->argv[a] = NULL;
    return r;
}

/*
 * The guardian: joins CMD's group, ignores every signal it can, and waits
 * on the read end of a pipe only relock writes to.  A byte means "CMD is
 * done, stand down"; end of file means relock is gone: the group gets
 * SIGTERM, then SIGKILL after grace_ms or when the validity ends (*valid_until,
 * on the monotonic clock), whichever comes first; that ends the guardian too.
 * First, with a releaser, it starts a process outside the group that
 * releases the lock once the group is gone, so that waiters need not sit
 * out the lease.  Only async-signal-safe calls: the parent has threads.
 */
static long long mono_ms(void);

static pid_t start_guardian(pid_t pgid, int rfd, int wfd, int gofd, long long grace_ms,
                            const releaser *rel, _Atomic long long *valid_until)
{
    pid_t g = fork();
    if (g != 0)
        return g;
    close(wfd);
    close(gofd); /* CMD, still waiting for it, sees its end when relock's goes */
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
    if (rel && fork() == 0) {
        setpgid(0, 0); /* out of the group it waits for */
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        execve("/proc/self/exe", rel->argv, rel->envp);
        _exit(127);
    }
    kill(-pgid, SIGTERM);
    kill(-pgid, SIGCONT);
    if (valid_until) {
        long long left = atomic_load(valid_until) - mono_ms();
        if (left < grace_ms)
            grace_ms = left > 0 ? left : 0;
    }
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

/* The lock is lost: CMD's group gets SIGTERM (continued, if stopped),
 * then SIGKILL after grace_ms or as soon as CMD is gone, for what it left
 * behind.  cmd_done: CMD was reaped already (its leftovers are waited for). */
static void lost_while_running(pid_t pgid, int cmd_done, int *status, const cli_keeper *k,
                               long long grace_ms, pid_t guardian)
{
    cli_keep_say_lost(k, "run: lock lost while CMD was running");
    kill(-pgid, SIGTERM);
    kill(-pgid, SIGCONT); /* a stopped process acts on SIGTERM only once continued */
    if (cmd_done) {
        long long t0 = mono_ms();
        while (mono_ms() - t0 < grace_ms && cli_group_others(pgid, guardian) > 0)
            sleep_ms(20);
        kill(-pgid, SIGKILL);
    } else if (!reap_within(pgid, grace_ms, status)) {
        kill(-pgid, SIGKILL);
        waitpid(pgid, status, 0);
    } else {
        kill(-pgid, SIGKILL); /* what CMD left behind in its group */
    }
}

/*
 * CMD was stopped (Ctrl-Z at the terminal stops its group, which has the
 * terminal).  The shell waits for relock's group, its job, not for CMD's:
 * relock takes the terminal back and stops its group too, so that the
 * shell gets the terminal, as for any job.  Renewals stop with relock.  When continued
 * (fg, bg), CMD's group is continued too, with the terminal when relock
 * is in the foreground; not if the validity ended meanwhile: the loop
 * then finds the loss and ends CMD.
 */
static void suspend_with(pid_t pgid, int had_tty, relock_lock *l)
{
    if (!had_tty)
        return; /* no job control: CMD waits for whoever stopped it */
    hand_terminal(had_tty, 0);
    /* Its whole process group, as an editor suspends: when relock runs in
     * a script, the shell above waits for the script, which must stop
     * too.  SIGTSTP, which an interactive shell that shares the group
     * (no job control) ignores. */
    kill(0, SIGTSTP);
    if (relock_lock_validity_ms(l) <= 0)
        return;
    if (tcgetpgrp(STDIN_FILENO) == getpgrp())
        hand_terminal(had_tty, pgid);
    kill(-pgid, SIGCONT);
}

/* The --json line on stderr once the lock is held. */
static void json_acquired(relock_lock *l, long long waited)
{
    fputs("{\"name\":\"", stderr);
    cli_json_str(stderr, relock_lock_name(l));
    fputs("\",\"value\":\"", stderr);
    cli_json_str(stderr, relock_lock_value(l));
    fprintf(stderr, "\",\"fence\":%lld,\"validity_ms\":%lld,\"waited_ms\":%lld}\n",
            relock_lock_fence(l), relock_lock_validity_ms(l), waited);
}

int cmd_run(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+t:w:nqvE:k:h", help_run,
                                CLI_JSON | CLI_TALK | CLI_EXITS | CLI_OWNER | CLI_RUN, &o);
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
    if (cli_renewed_ttl_refused("run", ttl_ms))
        return cli_code(&o, EXIT_USAGE);

    int code = cli_owner_setup(ctx, "run", &o, OWNER_CMD, cmd);
    if (code)
        return cli_code(&o, code);
    if (o.verbose)
        cli_keep_verbose(ctx, "run");
    relock_client *c = cli_connect(ctx, &code);
    if (!c)
        return cli_code(&o, code);
    relock_lock *l = NULL;
    long long t0 = mono_ms();
    cli_progress *progress = cli_progress_start(ctx, "run", name, o.verbose);
    relock_status st = cli_acquire(ctx, c, "run", name, ttl_ms, wait_ms, &l);
    cli_progress_stop(progress);
    if (st == RELOCK_BUSY || st == RELOCK_TIMEOUT) {
        cli_quiet_fail(o.quiet, c, st, "run");
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
    code = cli_lease_too_short(c, l, ttl_ms, mono_ms() - t0, "run", 1);
    if (code) {
        code = cli_code(&o, code);
        relock_lock_free(l);
        relock_client_free(c);
        return code;
    }
    if (o.json)
        json_acquired(l, mono_ms() - t0);
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
    _Atomic long long *valid_until = NULL; /* shared with the guardian */
    cli_keeper keeper = {{-1, -1}, RELOCK_LOST, NULL, NULL, 0};
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
    int go[2];
    if (pipe2(go, O_CLOEXEC) < 0) {
        cli_error("run: %s", strerror(errno));
        code = cli_code(&o, EXIT_SERVER);
        goto out_release;
    }
    pid_t pid = spawn(cmd, &oldmask, l, had_tty, go);
    close(go[0]);
    if (pid < 0) {
        close(go[1]);
        cli_error("run: fork: %s", strerror(errno));
        code = cli_code(&o, EXIT_SERVER);
        goto out_release;
    }
    cli_owner_cmd(l, &o, (long)pid, cmd);
    long long grace = ttl_ms / 4 < KILL_GRACE_MS ? ttl_ms / 4 : KILL_GRACE_MS;
    releaser *rel = releaser_new(ctx, c, l, pid);
    /* The end of the validity, for the guardian: written at every turn of
     * the loop below, which wakes at the latest when it ends, so it is
     * never later than the lease's (a renewal moves it on at the next
     * turn).  Without the page the guardian keeps its quarter of the TTL. */
    valid_until = mmap(NULL, sizeof *valid_until, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (valid_until == MAP_FAILED)
        valid_until = NULL;
    else
        atomic_store(valid_until, mono_ms() + relock_lock_validity_ms(l));
    pid_t guardian = start_guardian(pid, gpipe[0], gpipe[1], go[1], grace, rel, valid_until);
    /* The guardian is in place: CMD may start. */
    if (write(go[1], "g", 1) != 1)
        kill(pid, SIGKILL); /* the child is gone (killed meanwhile): see to it */
    close(go[1]);
    if (rel) {
        /* The parent's copy (the guardian has its own): the two entries
         * made for it, the others are environ's. */
        for (char **e = rel->envp; *e; e++)
            if (strncmp(*e, "RELOCK_URL=", 11) == 0 || strncmp(*e, "RELOCK_CONFIG=", 14) == 0)
                free(*e);
        free(rel->envp);
        free(rel);
    }
    close(gpipe[0]);
    gpipe[0] = -1;

    /* After a loss, and after a forwarded signal that ends (-k), how long
     * CMD's group gets before SIGKILL. */
    long long kill_after = o.kill_after_ms >= 0 ? o.kill_after_ms : KILL_GRACE_MS;
    int status = 0;
    int cmd_done = 0;
    long long kill_at = -1; /* when the group gets SIGKILL (-k, --kill-rest) */
    code = -1;
    for (;;) {
        int timeout = cli_keep_timeout(&keeper);
        if (valid_until)
            atomic_store(valid_until, mono_ms() + relock_lock_validity_ms(l));
        if (cmd_done && (timeout < 0 || timeout > 50))
            timeout = 50; /* looking for CMD's leftovers */
        if (kill_at >= 0) {
            long long left = kill_at - mono_ms();
            if (left < 0)
                left = 0;
            if (timeout < 0 || left < timeout)
                timeout = (int)left;
        }
        struct pollfd pf[2] = {{sfd, POLLIN, 0}, {keeper.fd[0], POLLIN, 0}};
        int n = poll(pf, 2, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (cli_keep_lost(&keeper, pf[1].revents != 0)) {
            lost_while_running(pid, cmd_done, &status, &keeper, kill_after, guardian);
            if (o.verbose)
                cli_keep_say_key(c, "run", name);
            code = o.exit_lost;
            break;
        }
        if (kill_at >= 0 && mono_ms() >= kill_at) {
            kill(-pid, SIGKILL); /* the guardian too: the group ends now */
            kill_at = -1;
        }
        struct signalfd_siginfo si;
        if (pf[0].revents && read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            int sig = (int)si.ssi_signo;
            if (sig == SIGCHLD) {
                int ws;
                pid_t r;
                while ((r = waitpid(-1, &ws, WNOHANG | WUNTRACED)) > 0) {
                    if (r == pid && WIFSTOPPED(ws)) {
                        suspend_with(pid, had_tty, l);
                        continue;
                    }
                    if (WIFSTOPPED(ws))
                        continue;
                    if (r == guardian)
                        guardian = -1;
                    if (r != pid)
                        continue;
                    status = ws;
                    cmd_done = 1;
                    if (o.kill_rest && cli_group_others(pid, guardian) > 0) {
                        if (o.verbose)
                            fprintf(stderr, "relock: run: CMD ended; ending what it left "
                                            "in its group\n");
                        kill(-pid, SIGTERM);
                        kill(-pid, SIGCONT);
                        kill_at = mono_ms() + kill_after;
                    } else if (o.verbose && cli_group_others(pid, guardian) > 0) {
                        fprintf(stderr, "relock: run: CMD ended; the lock is kept until "
                                        "the processes it left in its group end\n");
                    }
                }
            } else {
                kill(-pid, sig); /* CMD's whole group */
                if (o.kill_after_ms >= 0 && kill_at < 0 &&
                    (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT))
                    kill_at = mono_ms() + o.kill_after_ms;
            }
        }
        /* CMD's group is gone (the guardian aside): the lock can go. */
        if (cmd_done && cli_group_others(pid, guardian) == 0)
            break;
    }
    hand_terminal(had_tty, 0);
    /* CMD is done: the guardian stands down, and is reaped. */
    if (guardian > 0 && write(gpipe[1], "q", 1) != 1)
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
    cli_keep_free(&keeper, l, c);
    cli_keep_close(&keeper);
    for (int i = 0; i < 2; i++)
        if (gpipe[i] >= 0)
            close(gpipe[i]);
    if (sfd >= 0)
        close(sfd);
    if (valid_until)
        munmap(valid_until, sizeof *valid_until);
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    return code;
}
