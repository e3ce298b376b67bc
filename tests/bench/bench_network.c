/*
 * Quorum at a network's distance: acquisition latency with five servers
 * against one, when every server is a round trip of RTT away.
 *
 * On loopback (the quorum rows of bench_phase.c) a round trip costs about
 * as much CPU as it takes time, and the five servers share one core of
 * this machine: five servers then cost five times the work, done one
 * after the other, and that is what those rows measure.  Between hosts
 * the round trip is mostly waiting, the servers answer in parallel, and a
 * quorum's fan-out costs one round trip plus the client's extra work.
 * Here each server sits behind relock-compat-proxy (personality 7, which
 * passes commands through) holding every reply RTT µs, as a host that far
 * away would; the servers and the proxies stay on the placement's server
 * core, so their work is still serial and the figure, if anything,
 * overstates the cost.
 *
 * For each RTT of NET_RTTS_US the delay is set at run time (RELOCK-PROXY
 * FAULT delay-us) and four clients take turns, NET_TURN cycles at a time,
 * all through the proxies: two fenced modern relock clients, one on the
 * first server alone and one on the quorum of all five (majority 3); and,
 * as their baseline, two raw hiredis loops that send the same acquire and
 * compare-and-delete scripts to one server and to all five at once
 * (waiting for every reply).  A relock cycle is relock_try_acquire +
 * relock_release + relock_lock_free, TTL 30 s; the acquire and the whole
 * cycle are timed.  The figure is the ratio of the p50 acquire latencies,
 * 5 servers over 1 (the "acquisition latency"); the raw loops'
 * ratio shows what fanning out to five costs on this machine whatever the
 * client does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench.h"
#include "internal.h" /* the scripts' text: the raw loops send the very same */
#include "relock.h"
#include "testsrv.h"

const long bench_net_rtts_us[NET_NRTTS] = NET_RTTS_US;

/* One figure's client: relock, or a raw loop over nraw connections. */
typedef struct netclient {
    const char *who;  /* result keys net<rtt>_<who>_... */
    relock_client *c;
    redisContext *raw[QUORUM_SERVERS];
    int nraw;
    char sha_acq[41], sha_del[41];
    uint64_t rng;
    const char *name; /* lock name */
    double acq[NET_SAMPLES], cyc[NET_SAMPLES];
    int n;
} netclient;

#define NCLIENTS 4

static void note(netclient *nc, uint64_t t0, uint64_t t1, uint64_t t2)
{
    if (nc->n < NET_SAMPLES) {
        nc->acq[nc->n] = (double)(t1 - t0) / 1e3;
        nc->cyc[nc->n] = (double)(t2 - t0) / 1e3;
        nc->n++;
    }
}

/* Sends argv to every raw connection at once, then reads every reply;
 * 0 when each is accepted by ok_reply. */
static int raw_fanout(netclient *nc, int argc, const char **argv,
                      int (*ok_reply)(const redisReply *r))
{
    size_t len[8];
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    for (int i = 0; i < nc->nraw; i++) {
        int done = 0;
        redisAppendCommandArgv(nc->raw[i], argc, argv, len);
        while (!done)
            if (redisBufferWrite(nc->raw[i], &done) != REDIS_OK)
                return -1;
    }
    int bad = 0;
    for (int i = 0; i < nc->nraw; i++) {
        void *r = NULL;
        if (redisGetReply(nc->raw[i], &r) != REDIS_OK)
            return -1;
        bad |= !ok_reply(r);
        freeReplyObject(r);
    }
    return bad ? -1 : 0;
}

static int raw_acquired(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static int raw_deleted(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer >= 1;
}

/* The raw cycle: relock's acquire script and compare-and-delete, with
 * the same key shapes (src/base/keys.c). */
static int raw_cycle(netclient *nc)
{
    char tok[33], fence[96], chan[96];
    bu_token(&nc->rng, tok);
    snprintf(fence, sizeof fence, "{%s} relock:fence", nc->name);
    snprintf(chan, sizeof chan, "%s relock:released", nc->name);
    const char *acq[] = {"EVALSHA", nc->sha_acq, "2", nc->name, fence, tok, "30000"};
    const char *del[] = {"EVALSHA", nc->sha_del, "1", nc->name, tok, chan};
    uint64_t t0 = bu_now_ns();
    if (raw_fanout(nc, 7, acq, raw_acquired) != 0) {
        bench_error("network: raw acquire %s over %d failed", nc->name, nc->nraw);
        return -1;
    }
    uint64_t t1 = bu_now_ns();
    if (raw_fanout(nc, 6, del, raw_deleted) != 0) {
        bench_error("network: raw delete %s over %d failed", nc->name, nc->nraw);
        return -1;
    }
    note(nc, t0, t1, bu_now_ns());
    return 0;
}

/* One timed cycle; 0 on success. */
static int cycle(netclient *nc)
{
    if (!nc->c)
        return raw_cycle(nc);
    relock_lock *l = NULL;
    uint64_t t0 = bu_now_ns();
    relock_status st = relock_try_acquire(nc->c, nc->name, 30000, &l);
    uint64_t t1 = bu_now_ns();
    if (st != RELOCK_OK) {
        bench_error("network: acquire %s: %s: %s", nc->name, relock_status_name(st),
                    relock_client_error(nc->c)->message);
        return -1;
    }
    st = relock_release(l);
    relock_lock_free(l);
    uint64_t t2 = bu_now_ns();
    if (st != RELOCK_OK) {
        bench_error("network: release %s: %s: %s", nc->name, relock_status_name(st),
                    relock_client_error(nc->c)->message);
        return -1;
    }
    note(nc, t0, t1, t2);
    return 0;
}

/* Raw connections to the first n of ports with the two scripts loaded;
 * 0 on success. */
static int raw_setup(netclient *nc, const int *ports, int n)
{
    struct timeval tv = {10, 0};
    nc->rng = bu_now_ns() | 1;
    for (nc->nraw = 0; nc->nraw < n; nc->nraw++) {
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", ports[nc->nraw], tv);
        if (!rc || rc->err) {
            bench_error("network: cannot connect to port %d", ports[nc->nraw]);
            redisFree(rc);
            return -1;
        }
        redisSetTimeout(rc, tv);
        nc->raw[nc->nraw] = rc;
        const int ids[] = {RELOCK__SCRIPT_MODERN_ACQUIRE, RELOCK__SCRIPT_DEL_IF_EQ};
        char *shas[] = {nc->sha_acq, nc->sha_del};
        for (int k = 0; k < 2; k++) {
            redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", relock__script_source(ids[k]));
            int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
            if (ok)
                memcpy(shas[k], r->str, 41);
            freeReplyObject(r);
            if (!ok) {
                bench_error("network: SCRIPT LOAD on port %d failed", ports[nc->nraw]);
                nc->nraw++;
                return -1;
            }
        }
    }
    return 0;
}

/* Sets every proxy's reply delay; 0 on success. */
static int set_delay(const testsrv *px, int n, long us)
{
    for (int i = 0; i < n; i++) {
        char *r = testsrv_cmd(&px[i], "RELOCK-PROXY FAULT delay-us %ld", us);
        int ok = r && strcmp(r, "OK") == 0;
        if (!ok)
            bench_error("network: proxy on port %d refused delay-us %ld: %s", px[i].port, us,
                        r ? r : "no answer");
        free(r);
        if (!ok)
            return -1;
    }
    return 0;
}

static void report(long rtt, netclient *nc)
{
    const char *who = nc->who;
    char key[48];
    snprintf(key, sizeof key, "net%ld_%s_n", rtt, who);
    bench_out(key, "%d", nc->n);
    snprintf(key, sizeof key, "net%ld_%s_acq_p50", rtt, who);
    bench_out(key, "%.1f", bu_percentile(nc->acq, nc->n, 50));
    snprintf(key, sizeof key, "net%ld_%s_acq_p99", rtt, who);
    bench_out(key, "%.1f", bu_percentile(nc->acq, nc->n, 99));
    snprintf(key, sizeof key, "net%ld_%s_cyc_p50", rtt, who);
    bench_out(key, "%.1f", bu_percentile(nc->cyc, nc->n, 50));
}

/* The figures at one RTT: the clients take turns until each has
 * NET_SAMPLES cycles or NET_LIMIT_MS passed. */
static int measure(netclient *nc, long rtt)
{
    for (int k = 0; k < NCLIENTS; k++) {
        for (int i = 0; i < NET_WARMUP; i++)
            if (cycle(&nc[k]) != 0)
                return -1;
        nc[k].n = 0;
    }
    uint64_t end = bu_now_ns() + (uint64_t)NET_LIMIT_MS * 1000000u;
    int done = 0;
    for (int turn = 0; !done && bu_now_ns() < end; turn++) {
        done = 1;
        for (int k = 0; k < NCLIENTS; k++) {
            /* Forwards, then backwards: each client follows each other. */
            netclient *x = &nc[turn & 1 ? NCLIENTS - 1 - k : k];
            for (int i = 0; i < NET_TURN; i++)
                if (cycle(x) != 0)
                    return -1;
            done &= x->n >= NET_SAMPLES;
        }
    }
    for (int k = 0; k < NCLIENTS; k++)
        if (nc[k].n < NET_SAMPLES / 4) {
            bench_error("network, RTT %ld us: %s has only %d cycles within %d s", rtt,
                        nc[k].who, nc[k].n, NET_LIMIT_MS / 1000);
            return -1;
        }
    for (int k = 0; k < NCLIENTS; k++)
        report(rtt, &nc[k]);
    return 0;
}

void bench_network(const int *ports, int nports, const char *client_cpus)
{
    testsrv px[QUORUM_SERVERS];
    int npx = 0;
    if (nports < QUORUM_SERVERS) {
        bench_error("network: needs %d servers, has %d", QUORUM_SERVERS, nports);
        return;
    }
    while (npx < QUORUM_SERVERS &&
           bench_start_pinned(&px[npx], client_cpus, ports[npx]) == 0) {
        bench_track(px[npx].pid);
        npx++;
    }
    netclient *nc = calloc(NCLIENTS, sizeof *nc);
    int pports[QUORUM_SERVERS];
    char err[400] = "";
    if (!nc) {
        bench_error("network: out of memory");
        goto done;
    }
    if (npx < QUORUM_SERVERS) {
        bench_error("network: only %d of %d proxies started", npx, QUORUM_SERVERS);
        goto done;
    }
    char cpus[QUORUM_SERVERS * 64] = "";
    for (int i = 0; i < npx; i++) {
        char one[64];
        pports[i] = px[i].port;
        bu_cpus_of(px[i].pid, one, sizeof one);
        size_t used = strlen(cpus);
        snprintf(cpus + used, sizeof cpus - used, "%s%s", i ? "/" : "", one);
    }
    bench_out("net_proxy_cpus", "%s", cpus);
    static const struct {
        const char *who, *name;
        int relock, n;
    } kinds[NCLIENTS] = {
        {"q1", "bench:net:one", 1, 1},
        {"q5", "bench:net:quorum", 1, QUORUM_SERVERS},
        {"raw1", "bench:net:raw1", 0, 1},
        {"raw5", "bench:net:raw5", 0, QUORUM_SERVERS},
    };
    for (int k = 0; k < NCLIENTS; k++) {
        nc[k].who = kinds[k].who;
        nc[k].name = kinds[k].name;
        if (!kinds[k].relock) {
            if (raw_setup(&nc[k], pports, kinds[k].n) != 0)
                goto done;
            continue;
        }
        nc[k].c = kinds[k].n == 1 ? bench_connect(pports[0], "modern", NULL, err, sizeof err)
                                  : bench_connect_quorum(pports, kinds[k].n, err, sizeof err);
        if (!nc[k].c) {
            bench_error("network: %s", err);
            goto done;
        }
    }
    bench_out("net_q5_mode", "%s", relock_client_mode_reason(nc[1].c));
    for (int r = 0; r < NET_NRTTS; r++) {
        long rtt = bench_net_rtts_us[r];
        fprintf(stderr, "relock-bench [%s]: quorum at a network's distance, RTT %ld us\n",
                opt.phase, rtt);
        if (set_delay(px, npx, rtt) != 0 || measure(nc, rtt) != 0)
            break;
    }
done:
    for (int k = 0; nc && k < NCLIENTS; k++) {
        relock_client_free(nc[k].c);
        for (int i = 0; i < nc[k].nraw; i++)
            redisFree(nc[k].raw[i]);
    }
    free(nc);
    for (int i = npx - 1; i >= 0; i--) {
        bench_untrack(px[i].pid);
        testsrv_stop(&px[i]);
    }
}
