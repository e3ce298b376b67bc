/* The torture runner's worker processes (see torture.h).  Each slot is a
 * process group led by the worker (or by the `relock run` driver, with
 * relock and its CMD inside), so that a stop or a kill of the slot reaches
 * every process that belongs to it, by that group's id. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "torture.h"

void t_log(const char *log, const char *event, long id, const char *kind, const char *detail)
{
    char line[200];
    int n = snprintf(line, sizeof line, "%s %llu %ld %s%s%s\n", event,
                     (unsigned long long)t_now_ns(), id, kind, detail ? " " : "",
                     detail ? detail : "");
    if (n <= 0 || (size_t)n >= sizeof line)
        return;
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    /* One write(), as the workers do: the line lands whole. */
    if (write(fd, line, (size_t)n) != n)
        fprintf(stderr, "torture: log write failed\n");
    close(fd);
}

/* The environment of a skewed worker: libfaketime moves its wall clock
 * (and that of everything it starts) by skew_ms and leaves CLOCK_MONOTONIC,
 * the log's clock, alone. */
static void skew_env(const char *lib, long skew_ms)
{
    char fake[32];
    snprintf(fake, sizeof fake, "%+.3f", skew_ms / 1000.0);
    setenv("LD_PRELOAD", lib, 1);
    setenv("FAKETIME", fake, 1);
    setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
    /* Under AddressSanitizer a preloaded library comes before the
     * runtime; harmless here. */
    const char *asan = getenv("ASAN_OPTIONS");
    char opts[512];
    snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
}

pid_t slot_start(slot *s, int index, const slotenv *e)
{
    const scenario *sc = e->sc;
    char port[16], rport[16], ttl[32], seed[32], until[32], hold[32], timeout[32], url[64],
        margin[32];
    snprintf(port, sizeof port, "%d", e->lock_port);
    snprintf(rport, sizeof rport, "%d", e->resource_port);
    snprintf(ttl, sizeof ttl, "%ld", sc->ttl_ms);
    /* Fixed by the schedule's seed, the slot and how often it started. */
    snprintf(seed, sizeof seed, "%llu",
             (unsigned long long)(e->seed * 1000 + (uint64_t)index * 50 + (uint64_t)s->starts));
    snprintf(until, sizeof until, "%llu", (unsigned long long)e->until_ms);
    snprintf(hold, sizeof hold, "%ld", sc->hold_ms);
    int unit_s = strcmp(sc->unit, "s") == 0;
    snprintf(timeout, sizeof timeout, "%ld", unit_s ? sc->ttl_ms / 1000 : sc->ttl_ms);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", e->lock_port);
    snprintf(margin, sizeof margin, "%ld", sc->margin_ms);

    const char *argv[64];
    int n = 0;
    const char *path;
    if (s->type == W_CLI) {
        path = e->paths->run_driver;
        const char *a[] = {path, "--relock", e->paths->relock_cli, "--conf", e->conf, "--url", url,
                           "--mode", sc->mode, "--name", "torture-lock", "--ttl", ttl, "--wait",
                           "1000", "--until-ms", until, "--log", e->log, "--kind", s->kind,
                           "--section", e->paths->section, "--resource-port", rport,
                           "--counter", "res", "--hold-ms", hold, "--seed", seed,
                           "--fault-file", s->fault_file, "--gap-ms", "5"};
        for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
            argv[n++] = a[i];
    } else {
        int lib = s->type == W_LIB;
        path = lib ? e->paths->relock_worker : e->paths->classic;
        const char *a[] = {path, "--port", port, "--key", "torture-lock", "--unit", sc->unit,
                           lib ? "--ttl" : "--timeout", lib ? ttl : timeout, "--sections",
                           "100000000", "--log", e->log, "--counter", "res", "--seed", seed,
                           "--until-ms", until, "--gap-ms", "5", "--resource-port", rport,
                           "--hold-ms", hold, "--tolerate", "--fault-file", s->fault_file};
        for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
            argv[n++] = a[i];
        if (lib) {
            argv[n++] = "--mode";
            argv[n++] = sc->mode;
            argv[n++] = "--wait";
            argv[n++] = "1000";
            if (sc->margin_ms >= 0) {
                argv[n++] = "--skew-margin";
                argv[n++] = margin;
            }
        }
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int err = open(e->errfile, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        if (err >= 0)
            dup2(err, 2);
        if (s->skew_ms && e->paths->faketime)
            skew_env(e->paths->faketime, s->skew_ms);
        execv(path, (char *const *)argv);
        fprintf(stderr, "torture: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    /* Also here, so that no signal to the group can come before it. */
    setpgid(pid, pid);
    s->pid = pid;
    s->starts++;
    s->killed = 0;
    s->cont_at = 0;
    return pid;
}

void slot_reap_group(pid_t pgid)
{
    /* The members that outlived the leader are reparented to us (the
     * runner is a subreaper).  Bounded: 5 s. */
    for (int i = 0; i < 5000; i++) {
        int st;
        while (waitpid(-pgid, &st, WNOHANG) > 0)
            ;
        if (kill(-pgid, 0) != 0 && errno == ESRCH)
            return;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "torture: process group %ld did not end\n", (long)pgid);
}

void slot_kill(slot *s)
{
    if (!s->pid)
        return;
    kill(-s->pid, SIGKILL);
    int st;
    while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR)
        ;
    slot_reap_group(s->pid);
    s->killed = 1;
}
