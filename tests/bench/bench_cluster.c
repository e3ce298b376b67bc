/*
 * Redis Cluster with and without the slot map (docs/performance.md): a
 * cluster of three masters started on the server's core, CLUSTER_NAMES lock
 * names spread over them by their slots, and two modern (fenced) clients
 * given the first master that acquire and release the names in turn: one
 * with cluster.slot_map on, which keeps a connection per master and goes
 * straight to each name's master, and one with it off, whose one
 * connection follows a MOVED (and reconnects) whenever the next name lives
 * on another master.  Slices of the two take turns and the ratio is the
 * median of paired slices, as for the other relock figures; the MOVED
 * replies and connections the servers counted per cycle are printed with
 * them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

#define CLUSTER_NODES 3
#define CLUSTER_NAMES 300

/* Starts a cluster-enabled redis-server from the server's core. */
static int start_node(testsrv *s, const char *client_cpus)
{
    if (opt.server_cpu >= 0 && bu_pin_self(opt.server_cpu) != 0) {
        bench_error("cluster: cannot pin to cpu %d: %s", opt.server_cpu, strerror(errno));
        return -1;
    }
    int started = -1;
    for (int attempt = 0; attempt < 3 && started != 0; attempt++) {
        /* The bus port would be the data port + 10000, which may be out
         * of range for an ephemeral port: set it. */
        char bus[16];
        snprintf(bus, sizeof bus, "%d", testsrv_free_port());
        const char *args[] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "5000", "--cluster-port", bus, NULL};
        started = testsrv_start(s, args);
    }
    if (bu_pin_self_list(client_cpus) != 0) {
        bench_error("cluster: cannot return to cpus %s: %s", client_cpus, strerror(errno));
        if (started == 0)
            testsrv_stop(s);
        return -1;
    }
    if (started != 0) {
        bench_error("cluster: cannot start a cluster-enabled redis-server");
        return -1;
    }
    return 0;
}

/* redis-cli --cluster create over the nodes, bounded to 60 s, then until
 * every node says cluster_state:ok (30 s). */
static int create_cluster(const testsrv *node)
{
    char addr[CLUSTER_NODES][32];
    const char *argv[CLUSTER_NODES + 8] = {"redis-cli", "--cluster", "create"};
    int n = 3;
    for (int i = 0; i < CLUSTER_NODES; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", node[i].port);
        argv[n++] = addr[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "0";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = tu_wait_child(pid, 60000);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bench_error("cluster: redis-cli --cluster create failed (status %d)", status);
        return -1;
    }
    for (int i = 0; i < CLUSTER_NODES; i++) {
        uint64_t end = tu_now_ms() + 30000;
        int ok = 0;
        while (!ok && tu_now_ms() < end) {
            char *v = testsrv_cmd(&node[i], "CLUSTER INFO");
            ok = v && strstr(v, "cluster_state:ok");
            free(v);
            if (!ok)
                tu_sleep_ms(50);
        }
        if (!ok) {
            bench_error("cluster: node %d not cluster_state:ok within 30 s", i);
            return -1;
        }
    }
    return 0;
}

/* A figure summed over the nodes' INFO: the number after field. */
static long long info_sum(const testsrv *node, const char *section, const char *field)
{
    long long sum = 0;
    for (int i = 0; i < CLUSTER_NODES; i++) {
        char *v = testsrv_cmd(&node[i], "INFO %s", section);
        const char *p = v ? strstr(v, field) : NULL;
        if (p)
            sum += atoll(p + strlen(field));
        free(v);
    }
    return sum;
}

typedef struct walker {
    relock_client *c;
    int next; /* the next name */
    long cycles;
} walker;

/* Acquire and release of the next name. */
static int cycle(walker *w, char names[][32])
{
    relock_lock *l = NULL;
    const char *name = names[w->next];
    w->next = (w->next + 1) % CLUSTER_NAMES;
    relock_status st = relock_try_acquire(w->c, name, 10000, &l);
    if (st == RELOCK_OK)
        st = relock_release(l);
    relock_lock_free(l);
    if (st != RELOCK_OK) {
        bench_error("cluster: cycle on %s: %s", name, relock_client_error(w->c)->message);
        return -1;
    }
    w->cycles++;
    return 0;
}

/* Cycles per second over one slice of ms. */
static double slice(walker *w, char names[][32], long ms)
{
    uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)ms * 1000000u;
    long n = 0;
    uint64_t now = t0;
    while (now < end) {
        if (cycle(w, names) != 0)
            return -1;
        n++;
        now = bu_now_ns();
    }
    return (double)n * 1e9 / (double)(now - t0);
}

void bench_cluster(const char *client_cpus)
{
    testsrv node[CLUSTER_NODES];
    int started = 0;
    walker w[2];
    memset(w, 0, sizeof w);
    static char names[CLUSTER_NAMES][32];
    long slices = opt.sample_ms / SLICE_MS > 0 ? opt.sample_ms / SLICE_MS : 1;
    long slice_ms = opt.sample_ms / slices;
    size_t n = (size_t)slices * (size_t)opt.reps;
    double *rate = calloc(2 * n, sizeof *rate);
    double *ratio = calloc(n, sizeof *ratio);
    char err[400] = "";
    if (!rate || !ratio) {
        bench_error("cluster: out of memory");
        goto done;
    }
    for (; started < CLUSTER_NODES; started++) {
        if (start_node(&node[started], client_cpus) != 0)
            goto done;
        bench_track(node[started].pid);
    }
    fprintf(stderr, "relock-bench [%s]: a cluster of %d masters\n", opt.phase, CLUSTER_NODES);
    if (create_cluster(node) != 0)
        goto done;
    /* How the names spread: the master of each slot, and how often the
     * next name is on another master than the one before. */
    int per[CLUSTER_NODES] = {0}, switches = 0, prev = -1;
    for (int k = 0; k < CLUSTER_NAMES; k++) {
        snprintf(names[k], sizeof names[k], "bench:cluster:%d", k);
        char *v = testsrv_cmd(&node[0], "EXISTS %s", names[k]);
        int at = 0;
        if (v && strncmp(v, "MOVED ", 6) == 0) {
            int port = atoi(strrchr(v, ':') + 1);
            for (int i = 0; i < CLUSTER_NODES; i++)
                if (node[i].port == port)
                    at = i;
        }
        free(v);
        per[at]++;
        switches += prev >= 0 && at != prev;
        prev = at;
    }
    bench_out("cluster_names", "%d %d %d", per[0], per[1], per[2]);
    bench_out("cluster_switch_share", "%.3f", (double)switches / (CLUSTER_NAMES - 1));
    static const char *const map_on[] = {"cluster.slot_map", "true", NULL};
    static const char *const map_off[] = {"cluster.slot_map", "false", NULL};
    w[0].c = bench_connect(node[0].port, "modern", map_on, err, sizeof err);
    if (w[0].c)
        w[1].c = bench_connect(node[0].port, "modern", map_off, err, sizeof err);
    if (!w[0].c || !w[1].c) {
        bench_error("cluster: %s", err);
        goto done;
    }
    /* Warm up: the map client learns its map and opens its connections. */
    for (int k = 0; k < CLUSTER_NAMES; k++)
        if (cycle(&w[0], names) != 0 || cycle(&w[1], names) != 0)
            goto done;
    long long moved[2] = {0}, conns[2] = {0};
    long cycles[2] = {0};
    for (size_t s = 0; s < n; s++)
        for (int k = 0; k < 2; k++) {
            long before = w[k].cycles;
            long long m0 = info_sum(node, "errorstats", "errorstat_MOVED:count=");
            long long c0 = info_sum(node, "stats", "total_connections_received:");
            rate[(size_t)k * n + s] = slice(&w[k], names, slice_ms);
            if (rate[(size_t)k * n + s] < 0)
                goto done;
            /* The connections that read INFO are not the client's: one
             * per node, the one that reads the count included. */
            conns[k] += info_sum(node, "stats", "total_connections_received:") - c0 -
                        CLUSTER_NODES;
            moved[k] += info_sum(node, "errorstats", "errorstat_MOVED:count=") - m0;
            cycles[k] += w[k].cycles - before;
        }
    for (int k = 0; k < 2; k++) {
        double *copy = calloc(n, sizeof *copy);
        if (!copy)
            break;
        memcpy(copy, rate + (size_t)k * n, n * sizeof *copy);
        bench_out(k == 0 ? "cluster_map" : "cluster_nomap", "%.1f", bu_median(copy, (int)n));
        free(copy);
    }
    for (size_t s = 0; s < n; s++)
        ratio[s] = rate[s] / rate[n + s];
    bench_out("cluster_pratio", "%.4f", bu_median(ratio, (int)n));
    bench_out("cluster_map_moved", "%lld", moved[0]);
    bench_out("cluster_map_connects", "%lld", conns[0]);
    bench_out("cluster_map_cycles", "%ld", cycles[0]);
    bench_out("cluster_nomap_moved_per_cycle", "%.3f",
              cycles[1] ? (double)moved[1] / (double)cycles[1] : 0.0);
    bench_out("cluster_nomap_connects_per_cycle", "%.3f",
              cycles[1] ? (double)conns[1] / (double)cycles[1] : 0.0);
done:
    for (int k = 0; k < 2; k++)
        relock_client_free(w[k].c);
    free(rate);
    free(ratio);
    for (int i = started - 1; i >= 0; i--) {
        bench_untrack(node[i].pid);
        testsrv_stop(&node[i]);
    }
}
