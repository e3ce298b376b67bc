/*
 * relock hold: a lock held across several shell commands, as etcdctl lock
 * NAME does without a command.  It acquires, prints "VALUE FENCE", renews
 * the lease in the background (keep.c, the renewal run uses) and releases
 * at SIGTERM, SIGINT, SIGHUP or end of standard input.  A script keeps it
 * as a coprocess:
 *
 *     coproc relock hold NAME
 *     hold=$COPROC_PID
 *     read -r value fence <&"${COPROC[0]}"
 *     ...
 *     kill "$hold"; wait "$hold"
 *
 * As a plain background job (relock hold --no-stdin NAME &) standard input
 * is not read.  On a loss, found by a renewal or by the end of the validity
 * on relock's own clock, --notify signals the script at once and
 * --on-lost runs a command, before the exit with status 3.
 *
 * The signals are blocked and read from a signalfd, beside standard input
 * and the pipe on which the renewal reports a loss: one poll() loop, no
 * asynchronous handlers.
 */
#include <errno.h>
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

const char help_hold[] =
    "usage: relock hold [-t TTL] [-w WAIT | -n] [-q | -v] [EXIT CODES] [--json]\n"
    "                   [--owner TEXT] [--no-stdin] [--notify PID|parent\n"
    "                   [--notify-signal SIG]] [--on-lost 'COMMAND'] NAME\n"
    "Acquire NAME, print \"VALUE FENCE\" on one line, renew the lock in the\n"
    "background, and release it at SIGTERM, SIGINT, SIGHUP or end of standard\n"
    "input; then exit 0.\n"
    "  -t, --ttl TTL    the lease, renewed every third of it (default: ttl_ms,\n"
    "                   30s); not flock's --timeout (the wait, -w)\n"
    "  -w, --wait WAIT  wait at most WAIT for the lock (default: wait.max_ms)\n"
    "  -n, --nonblock   do not wait: fail at once if NAME is held\n"
    "  -q, -v           quiet when not acquired; verbose: holder, time waited\n"
    "  --json           print {name, value, fence, validity_ms, waited_ms}\n"
    "  --owner TEXT     who holds it, for relock inspect (default: the caller)\n"
    "  --no-stdin       ignore standard input: only a signal ends the hold (for a\n"
    "                   plain background job, relock hold --no-stdin NAME &)\n"
    "  --notify PID|parent  on a loss, at once, send SIGTERM to PID (parent:\n"
    "                   hold's parent, the script)\n"
    "  --notify-signal SIG  that signal instead (TERM, INT, HUP, USR1, USR2...)\n"
    "  --on-lost 'COMMAND'  on a loss, run COMMAND with /bin/sh -c (RELOCK_NAME,\n"
    "                   RELOCK_VALUE, RELOCK_FENCE set) before exiting 3\n"
    "  -E CODE, --exit-busy CODE, --exit-lost CODE, --exit-error CODE: exit codes\n"
    "Exit: 0 released, 1 not acquired, 2 usage, 3 lost while held (said on\n"
    "stderr, at the latest when the validity ends), 4 server error.\n"
    "In a script: coproc relock hold NAME; hold=$COPROC_PID\n"
    "read -r value fence <&\"${COPROC[0]}\"; ...; kill \"$hold\"; wait \"$hold\"\n";

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The JSON string body of s (no quotes). */
static void json_str(const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
}

/* Prints the line a script reads; 0, or -1 when standard output failed
 * (a reader that went away). */
static int print_held(const lockopts *o, relock_lock *l, long long waited)
{
    if (o->json) {
        printf("{\"name\":\"");
        json_str(relock_lock_name(l));
        printf("\",\"value\":\"");
        json_str(relock_lock_value(l));
        printf("\",\"fence\":%lld,\"validity_ms\":%lld,\"waited_ms\":%lld}\n", relock_lock_fence(l),
               relock_lock_validity_ms(l), waited);
    } else {
        printf("%s %lld\n", relock_lock_value(l), relock_lock_fence(l));
    }
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : -1;
}

/* What ended the hold. */
enum { END_SIGNAL, END_EOF, END_LOST, END_ERROR };

/*
 * Waits for the end: a signal of mask, end of standard input (data read
 * is discarded), or a loss (the renewal's report, or the end of the
 * validity without a renewal).  *sig is the signal.
 */
static int wait_end(int sfd, cli_keeper *k, int *sig, int no_stdin)
{
    int in_open = !no_stdin;
    char buf[512];
    for (;;) {
        struct pollfd pf[3] = {{sfd, POLLIN, 0}, {k->fd[0], POLLIN, 0},
                               {in_open ? STDIN_FILENO : -1, POLLIN, 0}};
        if (poll(pf, 3, cli_keep_timeout(k)) < 0) {
            if (errno == EINTR)
                continue;
            cli_error("hold: poll: %s", strerror(errno));
            return END_ERROR;
        }
        if (cli_keep_lost(k, pf[1].revents != 0))
            return END_LOST;
        if (pf[0].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                *sig = (int)si.ssi_signo;
                return END_SIGNAL;
            }
        }
        if (pf[2].revents & POLLNVAL) {
            in_open = 0; /* no standard input: only a signal ends the hold */
        } else if (pf[2].revents) {
            ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                return END_EOF;
        }
    }
}

/* --notify: the process told of a loss at once, before anything else.
 * parent is hold's parent when it started: once that has ended, hold
 * belongs to init or to a subreaper (a service manager, a container's
 * init), which is no script of the caller's and must not get its signal. */
static void tell_lost(const lockopts *o, pid_t parent)
{
    if (!o->notify_pid)
        return;
    if (o->notify_pid < 0 && getppid() != parent) {
        cli_error("hold: --notify parent: the parent, pid %ld, has ended; no one was told",
                  (long)parent);
        return;
    }
    pid_t to = o->notify_pid < 0 ? parent : (pid_t)o->notify_pid;
    if (to > 1 && kill(to, o->notify_sig) != 0)
        cli_error("hold: --notify %ld: %s", (long)to, strerror(errno));
}

extern char **environ;

/* How long hold waits for --on-lost's COMMAND before it exits all the
 * same (COMMAND is left running): the loss must be said within a bound. */
#define ON_LOST_WAIT_MS 10000

/* --on-lost COMMAND: run with /bin/sh -c, RELOCK_NAME, RELOCK_VALUE and
 * RELOCK_FENCE in its environment, and waited for, at most
 * ON_LOST_WAIT_MS.  The environment is made before the fork: the renewal
 * thread may still run, so the child calls nothing but exec. */
static void run_on_lost(const lockopts *o, relock_lock *l)
{
    if (!o->on_lost)
        return;
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 4, sizeof *envp);
    char *name = NULL, *value = NULL, *fence = NULL;
    if (!envp || asprintf(&name, "RELOCK_NAME=%s", relock_lock_name(l)) < 0 ||
        asprintf(&value, "RELOCK_VALUE=%s", relock_lock_value(l)) < 0 ||
        asprintf(&fence, "RELOCK_FENCE=%lld", relock_lock_fence(l)) < 0) {
        cli_error("hold: --on-lost: out of memory");
        free(envp);
        return;
    }
    size_t e = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "RELOCK_NAME=", 12) != 0 &&
            strncmp(environ[i], "RELOCK_VALUE=", 13) != 0 &&
            strncmp(environ[i], "RELOCK_FENCE=", 13) != 0)
            envp[e++] = environ[i];
    envp[e++] = name;
    envp[e++] = value;
    envp[e++] = fence;
    sigset_t none;
    sigemptyset(&none);
    pid_t p = fork();
    if (p == 0) {
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        char *argv[] = {"sh", "-c", (char *)o->on_lost, NULL};
        execve("/bin/sh", argv, envp);
        _exit(127);
    }
    if (p < 0) {
        cli_error("hold: --on-lost: fork: %s", strerror(errno));
    } else {
        int st;
        long long end = mono_ms() + ON_LOST_WAIT_MS;
        pid_t r;
        while ((r = waitpid(p, &st, WNOHANG)) == 0 && mono_ms() < end) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (r == 0)
            cli_error("hold: --on-lost: COMMAND still runs after %d s: left running (pid %ld)",
                      ON_LOST_WAIT_MS / 1000, (long)p);
    }
    free(name);
    free(value);
    free(fence);
    free(envp);
}

/* The signal that ended the wait or the hold, noted by the handler while
 * the signals are caught (cmd_hold). */
static volatile sig_atomic_t hold_signal;

static void note_signal(int sig)
{
    hold_signal = sig;
}

int cmd_hold(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "t:w:nqvE:h", help_hold,
                                CLI_JSON | CLI_TALK | CLI_EXITS | CLI_OWNER | CLI_HOLD, &o);
    if (rc)
        return rc - 1000;
    if (argc - optind != 1) {
        cli_error("hold: expected one NAME (try relock hold --help)");
        return cli_code(&o, EXIT_USAGE);
    }
    const char *name = argv[optind];
    pid_t parent = getppid(); /* --notify parent: the script that started hold */
    long long ttl_ms = o.ttl_ms ? o.ttl_ms : relock_config_ttl_ms(ctx->cfg);
    if (cli_renewed_ttl_refused("hold", ttl_ms))
        return cli_code(&o, EXIT_USAGE);
    int code = cli_owner_setup(ctx, "hold", &o, OWNER_SELF, NULL);
    if (code)
        return cli_code(&o, code);
    if (o.verbose)
        cli_keep_verbose(ctx, "hold");
    relock_client *c = cli_connect(ctx, &code);
    if (!c)
        return cli_code(&o, code);

    relock_lock *l = NULL;
    long long t0 = mono_ms();
    /* TERM, INT and HUP end the hold.  While relock waits they are caught
     * (the wait gives up at once, nothing held, and relock then dies of the
     * signal as before); from the moment the lock may be ours until the
     * end they are blocked and read from a signalfd: each then ends the
     * hold with a release.  One arriving between the two is not lost: the
     * handler noted it.  A signal ignored when relock started (SIGINT in a
     * background job of a non-interactive shell, SIGHUP under nohup) stays
     * ignored, as for run: whoever started relock chose so. */
    static const int ends[] = {SIGTERM, SIGINT, SIGHUP};
    struct sigaction oldsa[3];
    int caught[3] = {0, 0, 0};
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        if (sigaction(ends[i], NULL, &oldsa[i]) != 0 || oldsa[i].sa_handler == SIG_IGN)
            continue;
        sigaddset(&mask, ends[i]);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = note_signal; /* no SA_RESTART: the wait's sleep is cut short */
        sigemptyset(&sa.sa_mask);
        caught[i] = sigaction(ends[i], &sa, NULL) == 0;
    }
    hold_signal = 0;
    relock_client_cancel_on(c, &hold_signal);
    cli_progress *progress = cli_progress_start(ctx, "hold", name, o.verbose);
    relock_status st = cli_acquire(ctx, c, "hold", name, ttl_ms, o.wait_ms, &l);
    cli_progress_stop(progress);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    relock_client_cancel_on(c, NULL);
    long long waited = mono_ms() - t0;
    int sfd = -1;
    cli_keeper keeper = {{-1, -1}, RELOCK_LOST, NULL, NULL, 0};
    if (st == RELOCK_ECANCELED) {
        code = 128 + (int)hold_signal; /* as if the signal had ended relock */
        goto out;
    }
    if (st == RELOCK_BUSY || st == RELOCK_TIMEOUT) {
        cli_quiet_fail(o.quiet, c, st, "hold");
        if (o.verbose) {
            fprintf(stderr, "relock: hold: waited %lld ms\n", waited);
            cli_say_holder(c, "hold", name);
        }
        code = o.exit_busy;
        goto out;
    }
    if (st != RELOCK_OK) {
        code = cli_code(&o, cli_fail(c, st, "hold"));
        goto out;
    }
    code = cli_lease_too_short(c, l, ttl_ms, waited, "hold", 1);
    if (code) {
        code = cli_code(&o, code);
        goto out;
    }
    if (o.verbose)
        fprintf(stderr, "relock: hold: %s acquired after %lld ms, fence %lld\n", name, waited,
                relock_lock_fence(l));
    sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sfd < 0) {
        cli_error("hold: %s", strerror(errno));
        relock_release(l);
        code = cli_code(&o, EXIT_SERVER);
        goto out;
    }
    code = cli_keep_start(&keeper, c, l, "hold");
    if (code) {
        code = cli_code(&o, code);
        relock_release(l);
        goto out;
    }
    if (print_held(&o, l, waited) != 0) {
        cli_error("hold: cannot write VALUE FENCE: %s", strerror(errno));
        relock_release(l);
        code = cli_code(&o, EXIT_SERVER);
        goto out;
    }

    int sig = (int)hold_signal;
    int end = sig ? END_SIGNAL : wait_end(sfd, &keeper, &sig, o.no_stdin);
    if (end == END_LOST) {
        tell_lost(&o, parent);
        cli_keep_say_lost(&keeper, "hold: lock lost while held");
        /* The command first: -v's read of the key may spend a command
         * timeout on a server that stalls, past the lease's end. */
        run_on_lost(&o, l);
        if (o.verbose)
            cli_keep_say_key(c, "hold", name);
        code = o.exit_lost;
        goto out;
    }
    if (o.verbose)
        fprintf(stderr, "relock: hold: %s, releasing %s\n",
                end == END_SIGNAL ? strsignal(sig)
                : end == END_EOF  ? "end of standard input"
                                  : "poll failed",
                name);
    st = relock_release(l);
    if (st == RELOCK_LOST) {
        cli_fail(c, st, "hold: lock lost before release");
        code = o.exit_lost;
    } else if (st != RELOCK_OK) {
        code = cli_code(&o, cli_fail(c, st, "hold: release"));
    } else {
        code = end == END_ERROR ? cli_code(&o, EXIT_SERVER) : 0;
    }
out:
    cli_keep_free(&keeper, l, c);
    cli_keep_close(&keeper);
    if (sfd >= 0)
        close(sfd);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (caught[i])
            sigaction(ends[i], &oldsa[i], NULL);
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    /* A wait cut short by a signal ends as the signal would have ended it
     * (its action restored above: the default). */
    if (st == RELOCK_ECANCELED)
        raise((int)hold_signal);
    return code;
}
