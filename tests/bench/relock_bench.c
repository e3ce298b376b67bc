/*
 * relock-bench: the figures of docs/performance.md, run by `./dev bench`.
 *
 *   relock-bench [--json] [--sample-ms MS] [--reps N] [--only wait|throughput]
 *
 * On private redis-servers it starts itself, the bench measures a PING
 * round trip; raw hiredis loops of exactly the commands one lock cycle
 * needs (the baselines); relock's uncontended acquire+release cycles in
 * each mode as a ratio to its raw loop; the same cycle over a quorum of 5
 * (and 3) servers as a latency ratio to one server, on loopback and with
 * every server a network round trip away (bench_network.c); contended
 * read-modify-write sections from 1, 2 and 4 processes on one key (exact
 * counter, each worker's share); the memory one process spends per held
 * lock; and how long a blocked waiter takes to get a lock after a release
 * (handoff) or after a dead holder's lease ends (takeover), against the
 * PING round trip.
 *
 * It does so twice, pinned with taskset(1): client and servers on the
 * same core (every figure is then CPU cost, the two sides taking turns)
 * and on two different cores (round-trip bound; the five quorum servers
 * then share the server's core).  This top process only runs
 * `taskset -c CLIENT relock-bench --phase NAME --server-cpu CPU` for each
 * placement (bench_phase.c), reads the figures the phase prints as
 * "key value" lines, and prints the table or the JSON (bench_report.c).
 *
 * Every loop is bounded in count and time: each throughput figure is the
 * median of --reps rounds of --sample-ms each, each latency figure takes
 * at most 200 samples within a fixed time (bench.h), and a phase that runs
 * past its limit is stopped.  Exit status: 0 when every target is met, 1 when one is
 * missed or a figure could not be measured, 2 on a usage error.  Servers
 * are stopped by their PID, also when the bench is interrupted.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "relock.h"
#include "testutil.h"

bench_opts opt = {0, 1000, 3, NULL, -1, 0, NULL};

/* The phase running now: told to stop (and so to stop its server and
 * workers by PID) if we are interrupted. */
static volatile pid_t g_phase_pid;

static void on_signal(int sig)
{
    if (g_phase_pid > 0)
        kill(g_phase_pid, SIGTERM);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Runs one placement: `taskset -c CLIENT self --phase ...`, collecting
 * its "key value" lines; bounded in time. */
static void run_placement(const char *self, bench_phase *ph)
{
    ph->status = -1;
    int p[2];
    if (pipe(p) != 0) {
        bu_kv_parse(&ph->kv, "error1 pipe failed\n");
        return;
    }
    char cpu[16], scpu[16], ms[32], reps[16];
    snprintf(cpu, sizeof cpu, "%d", ph->client_cpu);
    snprintf(scpu, sizeof scpu, "%d", ph->server_cpu);
    snprintf(ms, sizeof ms, "%ld", opt.sample_ms);
    snprintf(reps, sizeof reps, "%d", opt.reps);
    fflush(stdout);
    fflush(stderr);
    uint64_t t0 = bu_now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        bu_kv_parse(&ph->kv, "error1 fork failed\n");
        return;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        const char *argv[] = {"taskset", "-c", cpu, self, "--phase", ph->name, "--server-cpu",
                              scpu, "--sample-ms", ms, "--reps", reps, NULL, NULL, NULL};
        if (opt.only) {
            argv[12] = "--only";
            argv[13] = opt.only;
        }
        execvp(argv[0], (char *const *)argv);
        printf("error1 cannot run taskset (util-linux): %s\n", strerror(errno));
        fflush(stdout);
        _exit(127);
    }
    g_phase_pid = pid;
    close(p[1]);
    /* The time a phase may take: its samples, the latency figures' fixed
     * bounds, and room for set-up. */
    uint64_t limit_ms = 60000u + 3u * HANDOFF_LIMIT_MS + 2u * TAKEOVER_LIMIT_MS +
                        (uint64_t)NET_NRTTS * NET_LIMIT_MS + WAITLOAD_LIMIT_MS +
                        (uint64_t)opt.reps * (uint64_t)opt.sample_ms * 20u;
    uint64_t deadline = t0 + limit_ms * 1000000u;
    size_t cap = 1 << 16, used = 0;
    char *text = calloc(1, cap);
    int timed_out = 0;
    while (text && used < cap - 1) {
        int n = bu_read_deadline(p[0], text + used, cap - 1 - used, deadline);
        if (n == 0)
            break;
        if (n < 0) {
            timed_out = bu_now_ns() >= deadline;
            break;
        }
        used += (size_t)n;
    }
    close(p[0]);
    if (timed_out) {
        fprintf(stderr, "relock-bench: %s ran past %llu s; stopping it\n", ph->name,
                (unsigned long long)(limit_ms / 1000));
        kill(pid, SIGTERM); /* it stops its server and workers by PID */
    }
    int status = tu_wait_child(pid, 10000);
    g_phase_pid = 0;
    ph->secs = (double)(bu_now_ns() - t0) / 1e9;
    if (text) {
        text[used] = '\0';
        bu_kv_parse(&ph->kv, text);
        free(text);
    }
    if (timed_out)
        bu_kv_parse(&ph->kv, "error98 ran past its time limit\n");
    ph->status = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void machine_text(char *buf, size_t len)
{
    struct utsname u;
    char model[128] = "unknown cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *colon = strchr(line, ':');
                if (colon) {
                    snprintf(model, sizeof model, "%s", colon + 2);
                    model[strcspn(model, "\n")] = '\0';
                }
                break;
            }
        fclose(f);
    }
    if (uname(&u) != 0)
        snprintf(u.release, sizeof u.release, "?");
    snprintf(buf, len, "%ld cpus online (%s), Linux %s", sysconf(_SC_NPROCESSORS_ONLN), model,
             u.release);
}

/* The 1-minute load average, or -1. */
static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* Jiffies of all CPUs: total and stolen by the hypervisor (steal). */
static void cpu_jiffies(unsigned long long *total, unsigned long long *steal)
{
    unsigned long long v[8] = {0};
    *total = *steal = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return;
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        for (int i = 0; i < 8; i++)
            *total += v[i];
        *steal = v[7];
    }
    fclose(f);
}

static int run_all(void)
{
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        fprintf(stderr, "relock-bench: cannot find my own executable\n");
        return 1;
    }
    self[sl] = '\0';
    int cpu[2];
    int ncpu = bu_first_cpus(cpu);
    if (ncpu < 1) {
        fprintf(stderr, "relock-bench: cannot read my CPU affinity\n");
        return 1;
    }
    static bench_phase phs[2];
    int nph = 0;
    phs[nph].name = "same-core";
    phs[nph].what = "one core: CPU cost";
    phs[nph].client_cpu = cpu[0];
    phs[nph].server_cpu = cpu[0];
    nph++;
    if (ncpu >= 2) {
        phs[nph].name = "cross-core";
        phs[nph].what = "two cores: round-trip bound";
        phs[nph].client_cpu = cpu[0];
        phs[nph].server_cpu = cpu[1];
        nph++;
    } else {
        fprintf(stderr, "relock-bench: only one CPU available: the cross-core placement is "
                        "skipped\n");
    }
    char machine[500];
    machine_text(machine, sizeof machine);
    double load0 = loadavg();
    unsigned long long jt0, js0, jt1, js1;
    cpu_jiffies(&jt0, &js0);
    uint64_t t0 = bu_now_ns();
    for (int i = 0; i < nph; i++) {
        fprintf(stderr, "relock-bench: %s placement (client cpu %d, server cpu %d)\n",
                phs[i].name, phs[i].client_cpu, phs[i].server_cpu);
        run_placement(self, &phs[i]);
    }
    double secs = (double)(bu_now_ns() - t0) / 1e9;
    cpu_jiffies(&jt1, &js1);
    double steal = jt1 > jt0 ? 100.0 * (double)(js1 - js0) / (double)(jt1 - jt0) : 0;
    size_t ml = strlen(machine);
    snprintf(machine + ml, sizeof machine - ml,
             "; load average %.2f before, %.2f after; %.1f%% of CPU time stolen by the "
             "hypervisor",
             load0, loadavg(), steal);
    static bench_table ts[2];
    int failed = 0;
    for (int i = 0; i < nph; i++) {
        bench_build_table(&phs[i], &ts[i]);
        failed |= bench_table_failed(&ts[i]);
    }
    if (opt.json) {
        bench_print_json(phs, ts, nph, machine, failed, secs);
    } else {
        const char *rv = bu_kv_get(&phs[0].kv, "redis_version");
        printf("relock %s bench: %s; redis-server %s on 127.0.0.1; median of %d samples of "
               "%ld ms per figure; %.0f s in all\n",
               relock_version(), machine, rv ? rv : "?", opt.reps, opt.sample_ms, secs);
        for (int i = 0; i < nph; i++)
            bench_print_table(&phs[i], &ts[i]);
        printf("\n%s\n", failed ? "RESULT: FAIL (a target was missed or a figure could not be "
                                  "measured)"
                                : "RESULT: PASS (every target met)");
    }
    return failed ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: relock-bench [--json] [--sample-ms MS] [--reps N] [--only wait|throughput]\n"
               "  --json         print the figures as JSON instead of a table\n"
               "  --sample-ms MS length of one throughput or contention sample (default 1000)\n"
               "  --reps N       samples per such figure, median taken (default 3, at most %d)\n"
               "  --only wait    only the waiting-load figures (commands/s of a blocked waiter)\n"
               "  --only throughput\n"
               "                 only the uncontended cycles (PING, the raw loops, relock's\n"
               "                 against them, the loopback quorum)\n"
               "  (the handoff and takeover figures take up to 200 samples in fixed time)\n",
            MAX_REPS);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (strcmp(a, "--json") == 0) {
            opt.json = 1;
        } else if (strcmp(a, "--sample-ms") == 0 && i + 1 < argc &&
                   bu_parse_long(argv[i + 1], 50, 10000, &v) == 0) {
            opt.sample_ms = v;
            i++;
        } else if (strcmp(a, "--reps") == 0 && i + 1 < argc &&
                   bu_parse_long(argv[i + 1], 1, MAX_REPS, &v) == 0) {
            opt.reps = (int)v;
            i++;
        } else if (strcmp(a, "--phase") == 0 && i + 1 < argc) {
            opt.phase = argv[++i];
        } else if (strcmp(a, "--server-cpu") == 0 && i + 1 < argc &&
                   bu_parse_long(argv[i + 1], 0, 4095, &v) == 0) {
            opt.server_cpu = (int)v;
            i++;
        } else if (strcmp(a, "--memory") == 0 && i + 1 < argc &&
                   bu_parse_long(argv[i + 1], 1, 65535, &v) == 0) {
            opt.mem_port = (int)v;
            i++;
        } else if (strcmp(a, "--only") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "wait") == 0 || strcmp(argv[i + 1], "throughput") == 0)) {
            opt.only = argv[++i];
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "relock-bench: bad argument: %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (opt.mem_port)
        return bench_run_memory(opt.mem_port);
    if (opt.phase)
        return bench_run_phase();
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGHUP, on_signal);
    return run_all();
}
