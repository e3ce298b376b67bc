/*
 * torture_cli: a torture worker that takes the lock through the command
 * line, `relock run -t TTL -w WAIT NAME -- torture_section ...`, again and
 * again until its deadline, and logs what relock run's exit code says:
 *
 *   run     before each relock run (the checker ties "lost" to the section
 *           begun after it)
 *   lost    exit 3, detail "cli": the lock was lost while CMD ran or before
 *           relock released it; the section's holder may have outlived its
 *           lease, and relock said so
 *   error   "run:exitN" or "run:sigN" for anything but 0 (CMD done), 1 (not
 *           acquired within WAIT) and 3 (a death by SIGUSR1, relock run's own
 *           loss signal, is logged as "lost" too)
 *
 *   torture_cli --relock BIN --conf FILE --url URL --mode M --name NAME
 *               --ttl MS --wait MS --until-ms MONO_MS --log FILE --kind K
 *               --section BIN --resource-port P --counter C --hold-ms MS
 *               --seed S --fault-file F --gap-ms MS
 *
 * The runner makes this process the leader of a process group; relock and
 * its CMD stay in that group, so the runner stops and kills them together.
 * Exit 0 at the deadline, 2 usage, 3 the log cannot be written.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker.h"

/* relock run invocations at most: a bound far beyond any run's length. */
#define RUNS_MAX 1000000L

typedef struct drv {
    const char *relock, *conf, *url, *mode, *name, *section, *counter, *fault_file;
    long ttl, wait, hold, gap;
    int resource_port;
} drv;

static void usage(void)
{
    fprintf(stderr,
            "usage: torture_cli --relock BIN --conf FILE --url URL --mode M --name NAME --ttl MS\n"
            "                   --wait MS --until-ms MONO_MS --log FILE --kind K --section BIN\n"
            "                   --resource-port P --counter C --hold-ms MS --seed S\n"
            "                   --fault-file F --gap-ms MS\n");
    exit(2);
}

static long long number(const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        usage();
    return v;
}

static pid_t start_run(const drv *d, const wk_opts *o, const char *kind, uint64_t seed)
{
    char ttl[32], wait[32], port[16], hold[32], seedtxt[32];
    snprintf(ttl, sizeof ttl, "%ldms", d->ttl);
    snprintf(wait, sizeof wait, "%ldms", d->wait);
    snprintf(port, sizeof port, "%d", d->resource_port);
    snprintf(hold, sizeof hold, "%ld", d->hold);
    snprintf(seedtxt, sizeof seedtxt, "%llu", (unsigned long long)seed);
    const char *argv[] = {d->relock,  "-c",        d->conf,         "-u",       d->url,
                          "-m",       d->mode,     "run",           "-t",       ttl,
                          "-w",       wait,        d->name,         "--",       d->section,
                          "--log",    o->log,      "--kind",        kind,       "--resource-port",
                          port,       "--counter", d->counter,      "--hold-ms", hold,
                          "--seed",   seedtxt,     "--fault-file",  d->fault_file, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        /* Ends with us if the runner kills us alone. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(d->relock, (char *const *)argv);
        fprintf(stderr, "torture_cli: cannot run %s: %s\n", d->relock, strerror(errno));
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"relock", required_argument, NULL, 'r'},     {"conf", required_argument, NULL, 'C'},
        {"url", required_argument, NULL, 'u'},        {"mode", required_argument, NULL, 'm'},
        {"name", required_argument, NULL, 'n'},       {"ttl", required_argument, NULL, 't'},
        {"wait", required_argument, NULL, 'w'},       {"until-ms", required_argument, NULL, 'U'},
        {"log", required_argument, NULL, 'l'},        {"kind", required_argument, NULL, 'k'},
        {"section", required_argument, NULL, 'S'},    {"resource-port", required_argument, NULL, 'R'},
        {"counter", required_argument, NULL, 'c'},    {"hold-ms", required_argument, NULL, 'H'},
        {"seed", required_argument, NULL, 's'},       {"fault-file", required_argument, NULL, 'F'},
        {"gap-ms", required_argument, NULL, 'g'},     {NULL, 0, NULL, 0}};
    drv d;
    memset(&d, 0, sizeof d);
    wk_opts o;
    memset(&o, 0, sizeof o);
    o.hold_ms = -1;
    o.skew_margin_ms = -1;
    const char *kind = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'r': d.relock = optarg; break;
        case 'C': d.conf = optarg; break;
        case 'u': d.url = optarg; break;
        case 'm': d.mode = optarg; break;
        case 'n': d.name = optarg; break;
        case 't': d.ttl = (long)number(optarg, 1, 86400000); break;
        case 'w': d.wait = (long)number(optarg, 1, 86400000); break;
        case 'U': o.until_ms = (uint64_t)number(optarg, 1, (long long)(~0ULL >> 1)); break;
        case 'l': o.log = optarg; break;
        case 'k': kind = optarg; break;
        case 'S': d.section = optarg; break;
        case 'R': d.resource_port = (int)number(optarg, 1, 65535); break;
        case 'c': d.counter = optarg; break;
        case 'H': d.hold = (long)number(optarg, 0, 60000); break;
        case 's': o.seed = (uint64_t)number(optarg, 0, (long long)(~0ULL >> 1)); break;
        case 'F': d.fault_file = optarg; break;
        case 'g': o.gap_ms = (long)number(optarg, 0, 60000); break;
        default: usage();
        }
    }
    if (optind != argc || !d.relock || !d.conf || !d.url || !d.mode || !d.name || !d.ttl ||
        !d.wait || !o.until_ms || !o.log || !kind || !d.section || !d.resource_port ||
        !d.counter || !d.fault_file)
        usage();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    wk_worker w;
    wk_init(&w, &o, kind);
    for (long i = 0; i < RUNS_MAX && wk_mono_ms() < o.until_ms; i++) {
        wk_log(&w, "run", NULL);
        pid_t pid = start_run(&d, &o, kind, o.seed * 100003u + (uint64_t)i);
        if (pid < 0) {
            fprintf(stderr, "torture_cli: fork: %s\n", strerror(errno));
            wk_sleep_us(50000);
            continue;
        }
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        char what[32];
        if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 1)) {
            /* done, or not acquired within WAIT */
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
            wk_log(&w, "lost", "cli");
        } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1) {
            /* relock run's renewal thread signals a lost lock with SIGUSR1;
             * when that comes as CMD ends, after relock has unblocked it and
             * before its release stops the renewal, it kills relock (exit
             * 138, not 3).  The lock was lost all the same: say so, and
             * count the wrong exit as an error. */
            wk_log(&w, "lost", "cli");
            wk_error(&w, "run:SIGUSR1(lost)");
        } else {
            if (WIFEXITED(st))
                snprintf(what, sizeof what, "run:exit%d", WEXITSTATUS(st));
            else
                snprintf(what, sizeof what, "run:sig%d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            wk_error(&w, what);
            /* The server may be restarting: do not spin. */
            wk_sleep_us(wk_rand_between(&w, 5000, 30000));
        }
        wk_gap(&w);
    }
    return 0;
}
