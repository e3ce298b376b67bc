/* The table and the JSON of relock-bench, with the targets applied. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "relock.h"

static bench_row *add_row(bench_table *t, const char *figure)
{
    if (t->n >= MAX_ROWS)
        t->n = MAX_ROWS - 1;
    bench_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->figure, sizeof r->figure, "%s", figure);
    snprintf(r->baseline, sizeof r->baseline, "-");
    snprintf(r->ratio, sizeof r->ratio, "-");
    snprintf(r->target, sizeof r->target, "-");
    snprintf(r->result, sizeof r->result, "info");
    r->v = r->base = r->r = NAN;
    r->p99 = r->p99_ratio = NAN;
    r->unit = "";
    return r;
}

static void fmt_rate(char *buf, size_t len, double v)
{
    if (isnan(v))
        snprintf(buf, len, "not measured");
    else
        snprintf(buf, len, "%.0f/s (%.1f us)", v, 1e6 / v);
}

static void rate_row(bench_table *t, const bu_kv *kv, const char *figure, const char *key)
{
    bench_row *r = add_row(t, figure);
    r->v = bu_kv_num(kv, key);
    r->unit = "cycles/s";
    fmt_rate(r->value, sizeof r->value, r->v);
    if (isnan(r->v))
        snprintf(r->result, sizeof r->result, "FAIL");
    char skey[48];
    snprintf(skey, sizeof skey, "%s_samples", key);
    const char *s = bu_kv_get(kv, skey);
    snprintf(skey, sizeof skey, "%s_cmds", key);
    double cmds = bu_kv_num(kv, skey);
    if (s)
        snprintf(r->detail, sizeof r->detail, "samples %s/s", s);
    if (!isnan(cmds)) {
        size_t used = strlen(r->detail);
        snprintf(r->detail + used, sizeof r->detail - used,
                 "%s%.0f server commands per cycle (script calls included)", used ? "; " : "",
                 cmds);
    }
    snprintf(skey, sizeof skey, "%s_cpu_us", key);
    double cpu = bu_kv_num(kv, skey);
    if (!isnan(cpu)) {
        size_t used = strlen(r->detail);
        snprintf(r->detail + used, sizeof r->detail - used, "%sclient CPU %.2f us per cycle",
                 used ? "; " : "", cpu);
    }
}

/* A relock figure against its raw loop; target <= 0: information only. */
static void ratio_row(bench_table *t, const bu_kv *kv, const char *figure, const char *key,
                      const char *base_key, const char *ratio_key, double target, int scripts_ok)
{
    rate_row(t, kv, figure, key);
    bench_row *r = &t->rows[t->n - 1];
    r->base = bu_kv_num(kv, base_key);
    fmt_rate(r->baseline, sizeof r->baseline, r->base);
    char ckey[48];
    snprintf(ckey, sizeof ckey, "%s_cpu_us", base_key);
    double base_cpu = bu_kv_num(kv, ckey);
    if (!isnan(base_cpu)) {
        size_t used = strlen(r->detail);
        snprintf(r->detail + used, sizeof r->detail - used, " (its raw loop: %.2f us)",
                 base_cpu);
    }
    /* The median of paired slice ratios where the phase measured them. */
    r->r = bu_kv_num(kv, ratio_key);
    if (isnan(r->r) && !isnan(r->v) && !isnan(r->base) && r->base > 0)
        r->r = r->v / r->base;
    if (!isnan(r->r))
        snprintf(r->ratio, sizeof r->ratio, "%.3f", r->r);
    if (target > 0) {
        snprintf(r->target, sizeof r->target, ">= %.2f x raw", target);
        int pass = !isnan(r->r) && r->r >= target && scripts_ok;
        snprintf(r->result, sizeof r->result, "%s", pass ? "PASS" : "FAIL");
        if (!scripts_ok) {
            size_t used = strlen(r->detail);
            snprintf(r->detail + used, sizeof r->detail - used,
                     "%sthe raw loop's scripts differ from relock's", used ? "; " : "");
        }
    } else if (isnan(r->v)) {
        snprintf(r->result, sizeof r->result, "FAIL");
    }
}

static void add_detail(bench_row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_detail(bench_row *r, const char *fmt, ...)
{
    size_t used = strlen(r->detail);
    if (used + 3 >= sizeof r->detail)
        return;
    if (used) {
        memcpy(r->detail + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail + used, sizeof r->detail - used, fmt, ap);
    va_end(ap);
}

/* Redis Cluster: cycles with the slot map against cycles with a MOVED
 * and a reconnect at each switch of master, what the servers counted, and
 * how the names spread (bench_cluster.c).  Information only. */
static void cluster_row(bench_table *t, const bu_kv *kv)
{
    ratio_row(t, kv, "cluster, 3 masters: slot map vs map off", "cluster_map", "cluster_nomap",
              "cluster_pratio", 0, 1);
    bench_row *r = &t->rows[t->n - 1];
    add_detail(r, "map: %s MOVED and %s connections in %s cycles",
               bu_kv_get(kv, "cluster_map_moved") ? bu_kv_get(kv, "cluster_map_moved") : "?",
               bu_kv_get(kv, "cluster_map_connects") ? bu_kv_get(kv, "cluster_map_connects") : "?",
               bu_kv_get(kv, "cluster_map_cycles") ? bu_kv_get(kv, "cluster_map_cycles") : "?");
    add_detail(r, "map off: %s MOVED and %s connections per cycle",
               bu_kv_get(kv, "cluster_nomap_moved_per_cycle")
                   ? bu_kv_get(kv, "cluster_nomap_moved_per_cycle")
                   : "?",
               bu_kv_get(kv, "cluster_nomap_connects_per_cycle")
                   ? bu_kv_get(kv, "cluster_nomap_connects_per_cycle")
                   : "?");
    add_detail(r, "names per master %s, next name on another master %s of the time",
               bu_kv_get(kv, "cluster_names") ? bu_kv_get(kv, "cluster_names") : "?",
               bu_kv_get(kv, "cluster_switch_share") ? bu_kv_get(kv, "cluster_switch_share")
                                                     : "?");
}

/* Quorum over n servers against the single-server fenced client: the
 * ratio is of latencies (cycle times), so lower is better; target <= 0:
 * information only. */
static void quorum_row(bench_table *t, const bu_kv *kv, const char *figure, int n, double target)
{
    char key[48], rkey[48];
    snprintf(key, sizeof key, "rl_quorum%d", n);
    snprintf(rkey, sizeof rkey, "rl_quorum%d_lratio", n);
    rate_row(t, kv, figure, key);
    bench_row *r = &t->rows[t->n - 1];
    r->base = bu_kv_num(kv, "rl_fenced");
    fmt_rate(r->baseline, sizeof r->baseline, r->base);
    double base_cpu = bu_kv_num(kv, "rl_fenced_cpu_us");
    if (!isnan(base_cpu))
        add_detail(r, "1 server: client CPU %.2f us", base_cpu);
    r->r = bu_kv_num(kv, rkey);
    if (isnan(r->r) && !isnan(r->v) && !isnan(r->base) && r->v > 0)
        r->r = r->base / r->v;
    if (!isnan(r->r))
        snprintf(r->ratio, sizeof r->ratio, "%.3f", r->r);
    if (target > 0) {
        snprintf(r->target, sizeof r->target, "<= %.2f x 1-server latency", target);
        snprintf(r->result, sizeof r->result, "%s",
                 !isnan(r->r) && r->r <= target ? "PASS" : "FAIL");
    }
    const char *cpus = bu_kv_get(kv, "quorum_server_cpus");
    if (cpus)
        add_detail(r, "servers on cpus %s", cpus);
    snprintf(key, sizeof key, "quorum%d_mode", n);
    const char *mode = bu_kv_get(kv, key);
    if (mode)
        add_detail(r, "client: %s", mode);
}

/* net<rtt>_<who>_<what> of the network figure, or NaN. */
static double net_num(const bu_kv *kv, long rtt, const char *who, const char *what)
{
    char key[64];
    snprintf(key, sizeof key, "net%ld_%s_%s", rtt, who, what);
    return bu_kv_num(kv, key);
}

/* The quorum of 5 against one server, each a round trip of rtt away
 * (bench_network.c): p50 acquire latencies, lower is better; target <= 0:
 * information only. */
static void network_row(bench_table *t, const bu_kv *kv, long rtt, double target)
{
    char fig[72];
    snprintf(fig, sizeof fig, "quorum, 5 servers vs 1, each %ld us away", rtt);
    bench_row *r = add_row(t, fig);
    r->unit = "us";
    r->v = net_num(kv, rtt, "q5", "acq_p50");
    r->p99 = net_num(kv, rtt, "q5", "acq_p99");
    r->base = net_num(kv, rtt, "q1", "acq_p50");
    double base99 = net_num(kv, rtt, "q1", "acq_p99");
    if (target > 0)
        snprintf(r->target, sizeof r->target, "<= %.2f x 1-server latency", target);
    if (isnan(r->v) || isnan(r->base) || r->base <= 0) {
        snprintf(r->value, sizeof r->value, "not measured");
        snprintf(r->result, sizeof r->result, "FAIL");
        return;
    }
    snprintf(r->value, sizeof r->value, "p50 %.0f / p99 %.0f us", r->v, r->p99);
    snprintf(r->baseline, sizeof r->baseline, "p50 %.0f / p99 %.0f us", r->base, base99);
    r->r = r->v / r->base;
    r->p99_ratio = r->p99 / base99;
    snprintf(r->ratio, sizeof r->ratio, "%.3f", r->r);
    if (target > 0)
        snprintf(r->result, sizeof r->result, "%s", r->r <= target ? "PASS" : "FAIL");
    add_detail(r, "acquire latency (relock_try_acquire), %.0f and %.0f samples taking turns",
               net_num(kv, rtt, "q5", "n"), net_num(kv, rtt, "q1", "n"));
    double w5 = net_num(kv, rtt, "raw5", "acq_p50"), w1 = net_num(kv, rtt, "raw1", "acq_p50");
    add_detail(r, "raw hiredis fan-out of the same scripts, waiting for all: p50 %.0f us to 5 "
               "against %.0f us to 1 (%.2f x): relock's quorum acquire is %.2f x that fan-out",
               w5, w1, w5 / w1, r->v / w5);
    double c5 = net_num(kv, rtt, "q5", "cyc_p50"), c1 = net_num(kv, rtt, "q1", "cyc_p50");
    add_detail(r, "p99 ratio %.2f; acquire + release cycle p50 %.0f against %.0f us (%.2f x)",
               r->p99_ratio, c5, c1, c5 / c1);
    const char *cpus = bu_kv_get(kv, "net_proxy_cpus");
    if (cpus)
        add_detail(r, "every server behind a proxy holding replies %ld us; proxies on cpus %s",
                   rtt, cpus);
    const char *mode = bu_kv_get(kv, "net_q5_mode");
    if (mode)
        add_detail(r, "client: %s", mode);
}

/* lat_<name>_<what> of a latency figure, or NaN. */
static double lat_num(const bu_kv *kv, const char *name, const char *what)
{
    char key[64];
    snprintf(key, sizeof key, "lat_%s_%s", name, what);
    return bu_kv_num(kv, key);
}

/* A latency figure (bench_latency.c): p50 and p99 in us, and as
 * multiples of the PING round trip measured between its samples (the
 * throughput section's when those are missing). */
static void latency_row(bench_table *t, const bu_kv *kv, const char *figure, const char *name,
                        const char *how)
{
    bench_row *r = add_row(t, figure);
    r->unit = "us";
    r->v = lat_num(kv, name, "p50");
    r->p99 = lat_num(kv, name, "p99");
    r->base = bu_kv_num(kv, "lat_ping_us");
    if (isnan(r->base))
        r->base = bu_kv_num(kv, "ping_us");
    if (isnan(r->v) || isnan(r->p99)) {
        snprintf(r->value, sizeof r->value, "not measured");
        snprintf(r->result, sizeof r->result, "FAIL");
        snprintf(r->detail, sizeof r->detail, "%s", how);
        return;
    }
    snprintf(r->value, sizeof r->value, "p50 %.0f / p99 %.0f us", r->v, r->p99);
    if (!isnan(r->base) && r->base > 0) {
        snprintf(r->baseline, sizeof r->baseline, "PING %.1f us", r->base);
        r->r = r->v / r->base;
        r->p99_ratio = r->p99 / r->base;
        snprintf(r->ratio, sizeof r->ratio, "%.1f / %.1f", r->r, r->p99_ratio);
    }
    add_detail(r, "%.0f samples (taking turns with the other figures of its group, %.1f s); "
               "min %.0f, mean %.0f, max %.0f us",
               lat_num(kv, name, "n"), lat_num(kv, name, "secs"), lat_num(kv, name, "min"),
               lat_num(kv, name, "mean"), lat_num(kv, name, "max"));
    add_detail(r, "%s", how);
    double cold = bu_kv_num(kv, "lat_coldping_us");
    if (!isnan(cold) && cold > 0)
        add_detail(r, "p50 / p99 = %.1f / %.1f x the PING after idle", r->v / cold,
                   r->p99 / cold);
    if (lat_num(kv, name, "estimated") == 1)
        add_detail(r, "the key's end estimated on the client (no PEXPIRETIME)");
}

/* The waiting load (bench_waitload.c): commands/s of a blocked waiter per
 * mode against the classic waiter's in the same rounds.  Information,
 * except for the asynchronous client's waiters: each must keep sending
 * (a waiter that sends nothing has stopped trying) and stay within
 * WL_ASYNC_MAX times the blocking waiter of its mode, measured in the same
 * rounds (its backoff is the blocking waiter's; a waiter whose backoff
 * never grows sends about a hundred times more). */
#define WL_ASYNC_MAX 3.0
static void waitload_rows(bench_table *t, const bu_kv *kv)
{
    static const char *const keys[] = {"classic", "legacy", "bridge", "modern",
                                       "async_bridge", "async_modern"};
    static const char *const figs[] = {
        "waiting: classic SETNX + GET loop (reference)", "waiting: relock legacy (s), cmds/s",
        "waiting: relock bridge, cmds/s", "waiting: relock modern, cmds/s",
        "waiting: relock async bridge, cmds/s", "waiting: relock async modern, cmds/s"};
    static const char *const what[] = {
        "SETNX, GET, sleep 1-5 ms, behind a timestamp 300 s away",
        "default wait settings, behind a relock legacy holder (timestamp 300 s away, no TTL)",
        "default wait settings, behind a bridge holder (300 s lease)",
        "default wait settings, fenced, behind a modern holder (300 s lease)",
        "relock_async_acquire() on a libevent loop, default wait settings, behind a bridge "
        "holder (300 s lease)",
        "relock_async_acquire() on a libevent loop, default wait settings, fenced, behind a "
        "modern holder (300 s lease)"};
    /* The blocking waiter each asynchronous one is held to. */
    static const int peer[] = {-1, -1, -1, -1, 2, 3};
#ifdef RELOCK_BENCH_ASYNC
    const int nfig = 6;
#else
    const int nfig = 4;
#endif
    double base = bu_kv_num(kv, "wait_classic");
    for (int i = 0; i < nfig; i++) {
        char key[48];
        snprintf(key, sizeof key, "wait_%s", keys[i]);
        bench_row *r = add_row(t, figs[i]);
        r->unit = "commands/s";
        r->v = bu_kv_num(kv, key);
        if (isnan(r->v))
            snprintf(r->value, sizeof r->value, "not measured");
        else
            snprintf(r->value, sizeof r->value, "%.1f/s", r->v);
        if (isnan(r->v))
            snprintf(r->result, sizeof r->result, "FAIL");
        if (i > 0) {
            r->base = base;
            if (!isnan(base))
                snprintf(r->baseline, sizeof r->baseline, "classic %.1f/s", base);
            snprintf(key, sizeof key, "wait_%s_pratio", keys[i]);
            r->r = bu_kv_num(kv, key);
            if (!isnan(r->r))
                snprintf(r->ratio, sizeof r->ratio, "%.3f", r->r);
        }
        snprintf(key, sizeof key, "wait_%s_samples", keys[i]);
        const char *s = bu_kv_get(kv, key);
        snprintf(r->detail, sizeof r->detail, "%s; rounds %s/s", what[i], s ? s : "?");
        snprintf(key, sizeof key, "wait_%s_cmds", keys[i]);
        s = bu_kv_get(kv, key);
        if (s)
            add_detail(r, "by command: %s", s);
        if (peer[i] >= 0) {
            snprintf(key, sizeof key, "wait_%s_bratio", keys[i]);
            double b = bu_kv_num(kv, key);
            snprintf(r->target, sizeof r->target, "> 0, <= %.0f x blocking %s", WL_ASYNC_MAX,
                     keys[peer[i]]);
            int pass = !isnan(r->v) && r->v > 0 && !isnan(b) && b <= WL_ASYNC_MAX;
            snprintf(r->result, sizeof r->result, "%s", pass ? "PASS" : "FAIL");
            if (!isnan(b))
                add_detail(r, "%.3f x the blocking %s waiter's (median of the rounds' ratios)", b,
                           keys[peer[i]]);
        }
    }
}

/* The phase's errors, and a phase that did not finish. */
static void error_rows(const bench_phase *ph, bench_table *t)
{
    const bu_kv *kv = &ph->kv;
    bench_row *r;
    for (int i = 0; i < kv->n; i++)
        if (strncmp(kv->key[i], "error", 5) == 0) {
            r = add_row(t, "error");
            snprintf(r->value, sizeof r->value, "see detail");
            snprintf(r->result, sizeof r->result, "FAIL");
            snprintf(r->detail, sizeof r->detail, "%s", kv->val[i]);
        }
    if (ph->status != 0) {
        r = add_row(t, "phase");
        snprintf(r->value, sizeof r->value, "did not finish");
        snprintf(r->result, sizeof r->result, "FAIL");
    }
}

void bench_build_table(const bench_phase *ph, bench_table *t)
{
    const bu_kv *kv = &ph->kv;
    t->n = 0;
    int throughput_only = opt.only && strcmp(opt.only, "throughput") == 0;
    if (opt.only && !throughput_only) {
        waitload_rows(t, kv);
        error_rows(ph, t);
        return;
    }
    bench_row *r = add_row(t, "PING round trip");
    r->v = bu_kv_num(kv, "ping_us");
    r->unit = "us";
    if (isnan(r->v)) {
        snprintf(r->value, sizeof r->value, "not measured");
        snprintf(r->result, sizeof r->result, "FAIL");
    } else {
        snprintf(r->value, sizeof r->value, "%.1f us", r->v);
    }

    double matched = bu_kv_num(kv, "scripts_matched");
    int scripts_ok = matched == 4;
    r = add_row(t, "raw loops send relock's script texts");
    r->v = matched;
    r->unit = "scripts";
    snprintf(r->value, sizeof r->value, "%s of 4", isnan(matched) ? "?" : "");
    if (!isnan(matched))
        snprintf(r->value, sizeof r->value, "%.0f of 4", matched);
    snprintf(r->target, sizeof r->target, "4 of 4");
    snprintf(r->result, sizeof r->result, "%s", scripts_ok ? "PASS" : "FAIL");
    const char *differ = bu_kv_get(kv, "scripts_differ");
    if (differ)
        snprintf(r->detail, sizeof r->detail, "differ: %s (the raw loop no longer matches the library)",
                 differ);

    rate_row(t, kv, "raw: SET NX PX + EVALSHA del", "raw_modern");
    rate_row(t, kv, "raw: EVALSHA fenced acquire + EVALSHA del", "raw_fenced");
    rate_row(t, kv, "raw: EVALSHA SETNX script + EVALSHA CAS del", "raw_legacy");
    rate_row(t, kv, "raw: same, bridge (PEXPIRE, TTL check)", "raw_bridge");
    rate_row(t, kv, "raw: SETNX + DEL (classic, reference)", "raw_setnx_del");

    ratio_row(t, kv, "relock modern, fencing off", "rl_modern", "raw_modern", "rl_modern_pratio",
              TARGET_MODERN, scripts_ok);
    ratio_row(t, kv, "relock modern, fenced (default)", "rl_fenced", "raw_fenced",
              "rl_fenced_pratio", TARGET_MODERN, scripts_ok);
    ratio_row(t, kv, "relock legacy (Redis 7: EVALSHA)", "rl_legacy", "raw_legacy",
              "rl_legacy_pratio", TARGET_LEGACY, scripts_ok);
    ratio_row(t, kv, "relock bridge", "rl_bridge", "raw_bridge", "rl_bridge_pratio", 0,
              scripts_ok);
    ratio_row(t, kv, "relock legacy vs classic SETNX + DEL", "rl_legacy", "raw_setnx_del",
              "rl_legacy_setnx_pratio", 0, scripts_ok);

    if (throughput_only) {
        quorum_row(t, kv, "quorum, 5 servers vs 1, loopback (modern fenced)", QUORUM_SERVERS, 0);
        quorum_row(t, kv, "quorum, 3 servers vs 1, loopback (modern fenced)", 3, 0);
        error_rows(ph, t);
        return;
    }
    /* Native compare-and-set against Lua, both through one proxy
     * (valkey-9.0): information only (bench_native.c). */
    ratio_row(t, kv, "native vs Lua via one proxy, fence+notices off", "native_bare",
              "native_bare_lua", "native_bare_pratio", 0, 1);
    ratio_row(t, kv, "native vs Lua via one proxy, defaults", "native_dflt", "native_dflt_lua",
              "native_dflt_pratio", 0, 1);

    /* Redis Cluster, names spread over 3 masters: the slot map against a
     * redirect and a reconnect at each switch of master (bench_cluster.c);
     * information only. */
    cluster_row(t, kv);

    /* On loopback the quorum rows measure work on shared cores, not
     * latency between hosts: information only (decision 45). */
    quorum_row(t, kv, "quorum, 5 servers vs 1, loopback (modern fenced)", QUORUM_SERVERS, 0);
    quorum_row(t, kv, "quorum, 3 servers vs 1, loopback (modern fenced)", 3, 0);
    for (int i = 0; i < NET_NRTTS; i++)
        network_row(t, kv, bench_net_rtts_us[i],
                    bench_net_rtts_us[i] == NET_TARGET_RTT_US ? TARGET_QUORUM5 : 0);

    double one = bu_kv_num(kv, "cont1");
    static const int nprocs[] = {1, 2, 4};
    for (size_t k = 0; k < 3; k++) {
        int n = nprocs[k];
        char key[32], fig[72];
        snprintf(key, sizeof key, "cont%d", n);
        snprintf(fig, sizeof fig, "contended, %d process%s (modern fenced)", n,
                 n > 1 ? "es" : "");
        r = add_row(t, fig);
        r->unit = "sections/s";
        r->v = bu_kv_num(kv, key);
        fmt_rate(r->value, sizeof r->value, r->v);
        snprintf(key, sizeof key, "cont%d_exact", n);
        int exact = bu_kv_num(kv, key) == 1;
        snprintf(key, sizeof key, "cont%d_counts", n);
        const char *counts = bu_kv_get(kv, key);
        snprintf(key, sizeof key, "cont%d_samples", n);
        const char *samples = bu_kv_get(kv, key);
        snprintf(r->detail, sizeof r->detail, "rounds %s/s; sections=counter per round: %s",
                 samples ? samples : "?", counts ? counts : "?");
        snprintf(key, sizeof key, "cont%d_cmds", n);
        double cmds = bu_kv_num(kv, key);
        snprintf(key, sizeof key, "cont%d_conns", n);
        double conns = bu_kv_num(kv, key);
        if (!isnan(cmds) && !isnan(conns)) {
            size_t used = strlen(r->detail);
            snprintf(r->detail + used, sizeof r->detail - used,
                     "; per section: %.1f server commands (script calls included), %.2f new "
                     "connections",
                     cmds, conns);
        }
        if (n == 1) {
            snprintf(r->target, sizeof r->target, "exact count");
            snprintf(r->result, sizeof r->result, "%s", exact && !isnan(r->v) ? "PASS" : "FAIL");
            continue;
        }
        r->base = one;
        fmt_rate(r->baseline, sizeof r->baseline, one);
        snprintf(key, sizeof key, "cont%d_pratio", n);
        r->r = bu_kv_num(kv, key); /* median of per-round ratios */
        if (isnan(r->r) && !isnan(r->v) && !isnan(one) && one > 0)
            r->r = r->v / one;
        if (!isnan(r->r))
            snprintf(r->ratio, sizeof r->ratio, "%.3f", r->r);
        if (n == 2) {
            snprintf(r->target, sizeof r->target, ">= %.2f x 1 process, exact",
                     TARGET_CONTENDED2);
            int pass = exact && !isnan(r->r) && r->r >= TARGET_CONTENDED2;
            snprintf(r->result, sizeof r->result, "%s", pass ? "PASS" : "FAIL");
        } else {
            snprintf(r->target, sizeof r->target, "exact count");
            snprintf(r->result, sizeof r->result, "%s", exact && !isnan(r->v) ? "PASS" : "FAIL");
        }
        if (!exact) {
            size_t used = strlen(r->detail);
            snprintf(r->detail + used, sizeof r->detail - used, "; COUNTER NOT EXACT");
        }

        snprintf(fig, sizeof fig, "fairness, %d processes (min share)", n);
        r = add_row(t, fig);
        snprintf(key, sizeof key, "cont%d_minshare", n);
        r->v = bu_kv_num(kv, key);
        r->unit = "share";
        r->base = 1.0 / n;
        snprintf(r->baseline, sizeof r->baseline, "fair %.1f%%", 100.0 / n);
        if (isnan(r->v)) {
            snprintf(r->value, sizeof r->value, "not measured");
        } else {
            snprintf(r->value, sizeof r->value, "%.1f%%", r->v * 100);
            r->r = r->v * n;
            snprintf(r->ratio, sizeof r->ratio, "%.3f", r->r);
        }
        snprintf(r->target, sizeof r->target, ">= %.2f x fair (no starving)", STARVE_FRACTION);
        snprintf(r->result, sizeof r->result, "%s",
                 !isnan(r->r) && r->r >= STARVE_FRACTION ? "PASS" : "FAIL");
        snprintf(key, sizeof key, "cont%d_shares", n);
        const char *shares = bu_kv_get(kv, key);
        snprintf(r->detail, sizeof r->detail, "per-worker %% per round: %s",
                 shares ? shares : "?");
    }

    r = add_row(t, "memory per held lock (10,000 held)");
    r->unit = "bytes";
    r->v = bu_kv_num(kv, "mem_per_lock");
    double beyond = bu_kv_num(kv, "mem_beyond");
    r->base = r->v - beyond; /* the key and value bytes */
    if (isnan(r->v)) {
        snprintf(r->value, sizeof r->value, "not measured");
        snprintf(r->result, sizeof r->result, "FAIL");
    } else {
        snprintf(r->value, sizeof r->value, "%.0f B (%.0f beyond)", r->v, beyond);
        snprintf(r->baseline, sizeof r->baseline, "key+value %.0f B", r->base);
        snprintf(r->target, sizeof r->target, "<= %.0f B beyond key+value", TARGET_MEM_BYTES);
        snprintf(r->result, sizeof r->result, "%s", beyond <= TARGET_MEM_BYTES ? "PASS" : "FAIL");
        snprintf(r->detail, sizeof r->detail,
                 "VmRSS before %.0f kB, VmHWM after %.0f kB, HWM reset %s",
                 bu_kv_num(kv, "mem_rss_before") / 1024, bu_kv_num(kv, "mem_hwm_after") / 1024,
                 bu_kv_num(kv, "mem_hwm_reset") == 1 ? "yes" : "no");
    }

    double lp = bu_kv_num(kv, "lat_ping_us");
    if (!isnan(lp)) {
        r = add_row(t, "PING round trip, between latency samples");
        r->v = lp;
        r->unit = "us";
        snprintf(r->value, sizeof r->value, "%.1f us", lp);
        snprintf(r->detail, sizeof r->detail,
                 "median of %.0f PINGs, %.0f after each turn of the latency figures: their "
                 "baseline",
                 bu_kv_num(kv, "lat_ping_n"), bu_kv_num(kv, "lat_ping_per_turn"));
    }
    double cp = bu_kv_num(kv, "lat_coldping_us");
    if (!isnan(cp)) {
        r = add_row(t, "PING after 10-20 ms idle (first round trip)");
        r->v = cp;
        r->unit = "us";
        snprintf(r->value, sizeof r->value, "%.1f us", cp);
        snprintf(r->detail, sizeof r->detail,
                 "median of %.0f, one after each turn of the handoff figures, following as "
                 "long an idle time as their releases do",
                 bu_kv_num(kv, "lat_coldping_n"));
    }
    latency_row(t, kv, "handoff, modern (release notice)", "handoff_modern",
                "holder's TTL 10 s, waiter's backoff raised to 10 s: only the release notice "
                "wakes it; from before relock_release() to the waiter's relock_acquire() "
                "returning");
    latency_row(t, kv, "handoff, bridge (release notice)", "handoff_bridge",
                "as modern, in bridge mode (timestamp values in s with a TTL)");
    latency_row(t, kv, "handoff, modern, notify off (backoff)", "handoff_nonotify",
                "wait.notify = false, default backoff 2-200 ms: the waiter finds the lock free "
                "on its next look; released 10-20 ms after the waiter began waiting");
    latency_row(t, kv, "takeover after expiry, modern (50 ms)", "takeover_modern",
                "the holder's 50 ms lease is never released; from the key's PEXPIRETIME to "
                "the waiter's relock_acquire() returning; default wait settings");
    latency_row(t, kv, "takeover after expiry, legacy (ms)", "takeover_legacy",
                "legacy.clock_unit = ms, the holder's timestamp T (now + 50 + 1 ms) is never "
                "released; from T to the waiter's relock_acquire() returning");
    waitload_rows(t, kv);
    error_rows(ph, t);
}

int bench_table_failed(const bench_table *t)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->rows[i].result, "FAIL") == 0)
            return 1;
    return 0;
}

void bench_print_table(const bench_phase *ph, const bench_table *t)
{
    const bu_kv *kv = &ph->kv;
    const char *cc = bu_kv_get(kv, "client_cpus"), *sc = bu_kv_get(kv, "server_cpus");
    printf("\n### %s: client on cpu %s, redis-server on cpu %s (%s)\n\n", ph->name,
           cc ? cc : "?", sc ? sc : "?", ph->what);
    const char *head[6] = {"figure", "value", "baseline", "ratio", "target", "result"};
    size_t w[6];
    for (int c = 0; c < 6; c++)
        w[c] = strlen(head[c]);
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        const char *cell[6] = {r->figure, r->value, r->baseline, r->ratio, r->target, r->result};
        for (int c = 0; c < 6; c++)
            if (strlen(cell[c]) > w[c])
                w[c] = strlen(cell[c]);
    }
    printf("| %-*s | %-*s | %-*s | %-*s | %-*s | %-*s |\n", (int)w[0], head[0], (int)w[1],
           head[1], (int)w[2], head[2], (int)w[3], head[3], (int)w[4], head[4], (int)w[5],
           head[5]);
    printf("|");
    for (int c = 0; c < 6; c++) {
        printf("-");
        for (size_t k = 0; k < w[c]; k++)
            putchar('-');
        printf("-|");
    }
    printf("\n");
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        printf("| %-*s | %-*s | %-*s | %-*s | %-*s | %-*s |\n", (int)w[0], r->figure, (int)w[1],
               r->value, (int)w[2], r->baseline, (int)w[3], r->ratio, (int)w[4], r->target,
               (int)w[5], r->result);
    }
    printf("\nvalue and baseline: median of the rounds.  ratio: for relock against its raw "
           "loop, the median of the ratios of neighbouring %d ms slices (the figures take "
           "turns); for quorum, the same of cycle times (latency, lower is better) against "
           "the fenced 1-server client; for contention, the median of the per-round ratios "
           "to the 1-process rate; for handoff and takeover, p50 / p99 as multiples of the "
           "PING round trip.\n\n",
           SLICE_MS);
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].detail[0])
            printf("- %s: %s\n", t->rows[i].figure, t->rows[i].detail);
}

static void json_num(FILE *f, double v)
{
    if (isnan(v))
        fprintf(f, "null");
    else
        fprintf(f, "%.6g", v);
}

void bench_print_json(const bench_phase *phs, const bench_table *ts, int nph, const char *machine,
                       int failed, double secs)
{
    FILE *f = stdout;
    fprintf(f, "{\n  \"bench\": \"relock\",\n  \"relock_version\": ");
    bu_json_str(f, relock_version());
    fprintf(f, ",\n  \"machine\": ");
    bu_json_str(f, machine);
    fprintf(f, ",\n  \"sample_ms\": %ld,\n  \"reps\": %d,\n  \"seconds\": %.1f,\n", opt.sample_ms,
            opt.reps, secs);
    fprintf(f, "  \"phases\": [");
    for (int p = 0; p < nph; p++) {
        const bu_kv *kv = &phs[p].kv;
        fprintf(f, "%s\n    {\n      \"name\": ", p ? "," : "");
        bu_json_str(f, phs[p].name);
        fprintf(f, ",\n      \"placement\": ");
        bu_json_str(f, phs[p].what);
        const char *keys[] = {"client_cpus", "server_cpus", "redis_version"};
        for (int k = 0; k < 3; k++) {
            const char *v = bu_kv_get(kv, keys[k]);
            fprintf(f, ",\n      \"%s\": ", keys[k]);
            bu_json_str(f, v ? v : "");
        }
        fprintf(f, ",\n      \"figures\": [");
        for (int i = 0; i < ts[p].n; i++) {
            const bench_row *r = &ts[p].rows[i];
            fprintf(f, "%s\n        {\"figure\": ", i ? "," : "");
            bu_json_str(f, r->figure);
            fprintf(f, ", \"value\": ");
            json_num(f, r->v);
            fprintf(f, ", \"unit\": ");
            bu_json_str(f, r->unit);
            fprintf(f, ", \"baseline\": ");
            json_num(f, r->base);
            fprintf(f, ", \"ratio\": ");
            json_num(f, r->r);
            if (!isnan(r->p99)) {
                fprintf(f, ", \"p99\": ");
                json_num(f, r->p99);
                fprintf(f, ", \"p99_ratio\": ");
                json_num(f, r->p99_ratio);
            }
            fprintf(f, ", \"target\": ");
            bu_json_str(f, r->target);
            fprintf(f, ", \"result\": ");
            bu_json_str(f, r->result);
            fprintf(f, ", \"detail\": ");
            bu_json_str(f, r->detail);
            fprintf(f, "}");
        }
        fprintf(f, "\n      ]\n    }");
    }
    fprintf(f, "\n  ],\n  \"pass\": %s\n}\n", failed ? "false" : "true");
}
