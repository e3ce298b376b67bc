/*
 * The native cycle against the Lua cycle (docs/performance.md): modern
 * acquire, extend and release on the compat proxy's valkey-9.0
 * personality, once by a client that found DELIFEQ and SET IFEQ there and
 * once by a client that found neither (it connected while the proxy's
 * native commands were switched off, RELOCK-PROXY NATIVE off) and so
 * releases and extends by EVALSHA.  Both go through the same proxy
 * process, so the proxy's relaying costs the two alike and cancels in the
 * ratio; what the proxy cannot take away is that it carries out DELIFEQ
 * and SET IFEQ as scripts of its own on the 7.x server behind it (a real
 * Valkey runs them without Lua).  The figure therefore shows the client's
 * and the protocol's part of the difference, not a real server's.
 *
 * Two pairs: fencing and notices off (acquire SET NX PX on both; extend
 * SET IFEQ PX against the PEXPIRE script; release DELIFEQ against the
 * delete script), and the defaults (the fenced acquire is a script on
 * both; the native release PUBLISHes its notice in the same round trip,
 * the script inside).  Slices of the two clients take turns and the ratio
 * is the median of paired slices, as for the other relock figures.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "relock.h"
#include "testsrv.h"

#define NAT_CLIENTS 4

/* Starts the proxy from the server's core (as the servers are), then
 * returns to the client's cores. */
static int start_proxy_pinned(testsrv *px, int upstream, const char *client_cpus)
{
    if (opt.server_cpu >= 0 && bu_pin_self(opt.server_cpu) != 0) {
        bench_error("native: cannot pin to cpu %d: %s", opt.server_cpu, strerror(errno));
        return -1;
    }
    int started = testsrv_start_proxy(px, upstream, "valkey-9.0", NULL);
    if (bu_pin_self_list(client_cpus) != 0) {
        bench_error("native: cannot return to cpus %s: %s", client_cpus, strerror(errno));
        if (started == 0)
            testsrv_stop(px);
        return -1;
    }
    if (started != 0) {
        bench_error("native: cannot start relock-compat-proxy --personality valkey-9.0");
        return -1;
    }
    return 0;
}

/* One cycle: acquire, extend, release. */
static int cycle(relock_client *c, const char *name)
{
    relock_lock *l = NULL;
    relock_status st = relock_try_acquire(c, name, 10000, &l);
    if (st == RELOCK_OK)
        st = relock_extend(l, 10000);
    if (st == RELOCK_OK)
        st = relock_release(l);
    relock_lock_free(l);
    if (st != RELOCK_OK) {
        bench_error("native: cycle on %s: %s", name, relock_client_error(c)->message);
        return -1;
    }
    return 0;
}

/* Cycles per second over one slice of ms. */
static double slice(relock_client *c, const char *name, long ms)
{
    uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)ms * 1000000u;
    long n = 0;
    uint64_t now = t0;
    while (now < end) {
        if (cycle(c, name) != 0)
            return -1;
        n++;
        now = bu_now_ns();
    }
    return (double)n * 1e9 / (double)(now - t0);
}

static void set_natives(int port, const char *on)
{
    char *r = testsrv_cmd_port(port, "RELOCK-PROXY NATIVE %s", on);
    free(r);
}

void bench_native(int upstream, const char *client_cpus)
{
    static const char *const bare[] = {"fencing", "false", "wait.notify", "false", NULL};
    static const struct {
        const char *key;  /* native_<key>_... */
        int native;
        const char *const *settings;
        const char *name;
        const char *path; /* what its mode reason must name */
    } kinds[NAT_CLIENTS] = {
        {"bare", 1, bare, "bench:native:bare", "release: DELIFEQ, extend: SET IFEQ PX"},
        {"bare_lua", 0, bare, "bench:native:bare-lua", "release: script, extend: script"},
        {"dflt", 1, NULL, "bench:native:dflt", "release: DELIFEQ, extend: SET IFEQ PX"},
        {"dflt_lua", 0, NULL, "bench:native:dflt-lua", "release: script, extend: script"},
    };
    testsrv px;
    if (start_proxy_pinned(&px, upstream, client_cpus) != 0)
        return;
    bench_track(px.pid);
    relock_client *c[NAT_CLIENTS] = {NULL};
    long slices = opt.sample_ms / SLICE_MS > 0 ? opt.sample_ms / SLICE_MS : 1;
    long slice_ms = opt.sample_ms / slices;
    size_t n = (size_t)slices * (size_t)opt.reps;
    double *rate = calloc(NAT_CLIENTS * n, sizeof *rate);
    double *ratio = calloc(n, sizeof *ratio);
    char err[400] = "";
    if (!rate || !ratio) {
        bench_error("native: out of memory");
        goto done;
    }
    for (int k = 0; k < NAT_CLIENTS; k++) {
        set_natives(px.port, kinds[k].native ? "on" : "off");
        c[k] = bench_connect(px.port, "modern", kinds[k].settings, err, sizeof err);
        set_natives(px.port, "on");
        if (!c[k]) {
            bench_error("native: %s", err);
            goto done;
        }
        if (!strstr(relock_client_mode_reason(c[k]), kinds[k].path)) {
            bench_error("native: the %s client's paths are \"%s\"", kinds[k].key,
                        relock_client_mode_reason(c[k]));
            goto done;
        }
    }
    bench_out("native_paths", "%s", relock_client_mode_reason(c[2]));
    fprintf(stderr, "relock-bench [%s]: native against Lua through one proxy\n", opt.phase);
    for (size_t s = 0; s < n; s++)
        for (int k = 0; k < NAT_CLIENTS; k++) {
            rate[(size_t)k * n + s] = slice(c[k], kinds[k].name, slice_ms);
            if (rate[(size_t)k * n + s] < 0)
                goto done;
        }
    /* Each client still took its own path at the end (a reconnection
     * would have probed again): one more cycle, counted by the proxy. */
    for (int k = 0; k < NAT_CLIENTS; k++) {
        char *r = testsrv_cmd_port(px.port, "RELOCK-PROXY RESET");
        free(r);
        if (cycle(c[k], kinds[k].name) != 0)
            goto done;
        r = testsrv_cmd_port(px.port, "RELOCK-PROXY COMMANDS-LIST");
        int ok = r && (kinds[k].native ? strstr(r, "DELIFEQ 1") != NULL
                                       : strstr(r, "DELIFEQ") == NULL);
        if (!ok)
            bench_error("native: the %s client's last cycle sent %s", kinds[k].key,
                        r ? r : "(nothing)");
        free(r);
        if (!ok)
            goto done;
    }
    for (int k = 0; k < NAT_CLIENTS; k++) {
        double *copy = calloc(n, sizeof *copy);
        if (!copy)
            break;
        memcpy(copy, rate + (size_t)k * n, n * sizeof *copy);
        bench_out(kinds[k].key[0] == 'b' ? (kinds[k].native ? "native_bare" : "native_bare_lua")
                                         : (kinds[k].native ? "native_dflt" : "native_dflt_lua"),
                  "%.1f", bu_median(copy, (int)n));
        free(copy);
    }
    for (int pair = 0; pair < 2; pair++) {
        for (size_t s = 0; s < n; s++)
            ratio[s] = rate[(size_t)(2 * pair) * n + s] / rate[(size_t)(2 * pair + 1) * n + s];
        bench_out(pair == 0 ? "native_bare_pratio" : "native_dflt_pratio", "%.4f",
                  bu_median(ratio, (int)n));
    }
done:
    for (int k = 0; k < NAT_CLIENTS; k++)
        relock_client_free(c[k]);
    free(rate);
    free(ratio);
    bench_untrack(px.pid);
    testsrv_stop(&px);
}
