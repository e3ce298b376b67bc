/*
 * The simulator's scenarios: who runs against which server, with which
 * faults.  Small on purpose: two or three clients, one lock, a few
 * rounds, so that depth-first exploration can cover every interleaving
 * and fault point of the first commands, and seeds cover the rest.
 */
#include <string.h>

#include "sim.h"

#define RL(m, t, w, h, n, x) \
    {.kind = SK_RELOCK, .mode = (m), .lock = "lk", .ttl_ms = (t), .wait_ms = (w), \
     .hold_ms = (h), .iters = (n), .extend = (x), .offset = 1, .notify = 1}
/* A quorum client, with release notices: the simulator checks that a
 * waiter's commands stay within what its backoff allows (a failed
 * attempt's undo must not wake the waiter itself: src/algo/quorum.c,
 * the end of relock__quorum_step()). */
#define RLQ(t, w, h, n, x) \
    {.kind = SK_RELOCK, .mode = RELOCK_MODE_MODERN, .lock = "lk", .ttl_ms = (t), \
     .wait_ms = (w), .hold_ms = (h), .iters = (n), .extend = (x), .offset = 1, .notify = 1}
#define CL(t, w, h, n) \
    {.kind = SK_CLASSIC, .lock = "lk", .ttl_ms = (t), .wait_ms = (w), .hold_ms = (h), \
     .iters = (n)}
#define BRK(at) {.kind = SK_BREAK, .mode = RELOCK_MODE_AUTO, .lock = "lk", .start_ms = (at)}
#define DEL(at) {.kind = SK_DEL, .lock = "lk", .start_ms = (at)}

/* A relock client that extends to a shorter lease (x ms) mid-hold. */
#define RLX(m, t, w, h, n, x) \
    {.kind = SK_RELOCK, .mode = (m), .lock = "lk", .ttl_ms = (t), .wait_ms = (w), \
     .hold_ms = (h), .iters = (n), .extend = 1, .extend_ms = (x), .offset = 1, .notify = 1, \
     .unit_ms = 1}

/* An asynchronous client (relock_async.h on a poll() loop) with k
 * operations in flight at once, each doing its plan (enum sim_async_plan)
 * once it holds; its further operations' claims are the SK_SLOT clients
 * that follow it (OP), with their own lock names. */
#define AS(m, t, w, h, n, k, p0, p1, p2) \
    {.kind = SK_ASYNC, .mode = (m), .lock = "lk", .ttl_ms = (t), .wait_ms = (w), \
     .hold_ms = (h), .iters = (n), .extend = 1, .offset = 1, .notify = 1, .ops = (k), \
     .plans = {(p0), (p1), (p2)}, .free_in_cb = 1}
#define OP(name) {.kind = SK_SLOT, .lock = (name)}

#define MOD RELOCK_MODE_MODERN
#define LEG RELOCK_MODE_LEGACY
#define BRI RELOCK_MODE_BRIDGE

#define ALL_FAULTS (SF_NET | SF_BIT(SF_PAUSE) | SF_BIT(SF_RESTART))

#define MODERN_ON(pers, nm) \
    {.name = nm, .personality = pers, \
     .what = "two relock clients in modern mode: acquire, extend, release", \
     .nclients = 2, .c = {RL(MOD, 1000, 3000, 400, 2, 1), RL(MOD, 1000, 3000, 400, 2, 1)}, \
     .faults = ALL_FAULTS, .tick_ms = 1, .pause_ms = 1500, .in_short = 1}

#define LEGACY_F(pers, nm, f) \
    {.name = nm, .personality = pers, \
     .what = "two relock clients in legacy mode and a classic client", \
     .nclients = 3, \
     .c = {RL(LEG, 2000, 6000, 600, 2, 1), RL(LEG, 2000, 6000, 600, 2, 1), \
           CL(3000, 6000, 500, 1)}, \
     .faults = (f), .tick_ms = 1, .pause_ms = 3500, .in_short = 1}
#define SHORT_EXT(pers, nm, m) \
    {.name = nm, .personality = pers, \
     .what = "two relock clients; the holder extends its 2 s lease to 400 ms mid-hold", \
     .nclients = 2, .c = {RLX(m, 2000, 6000, 1200, 2, 400), RLX(m, 2000, 6000, 1200, 2, 400)}, \
     .faults = SF_NET, .tick_ms = 1, .in_short = 1}
/* legacy.clock = "server", three clients (one holds, one waits, one comes
 * later); the server's clock steps by s ms and back (SF_SERVER_CLOCK). */
#define RLS(m, at) \
    {.kind = SK_RELOCK, .mode = (m), .lock = "lk", .ttl_ms = 2000, .wait_ms = 6000, \
     .hold_ms = 600, .iters = 2, .offset = 1, .notify = 1, .clock_server = 1, .start_ms = (at)}
#define SERVER_STEP(pers, nm, m, s) \
    {.name = nm, .personality = pers, \
     .what = "legacy.clock = server: the server's clock steps " #s " ms and back, between " \
             "and inside operations of a holder, a waiter and a later client", \
     .nclients = 3, .c = {RLS(m, 0), RLS(m, 50), RLS(m, 700)}, \
     .faults = SF_BIT(SF_SERVER_CLOCK), .tick_ms = 1, .server_step_ms = (s), .in_short = 1}
#define LEGACY_ON(pers, nm) LEGACY_F(pers, nm, SF_NET | SF_BIT(SF_PAUSE) | SF_BIT(SF_RESTART))

/* An asynchronous client with legacy.clock = "server", two operations in
 * flight (one extends, one is kept by renewals, each measuring the
 * server's clock on the client's connection); its second operation's lock
 * is the SK_SLOT client after it. */
#define ASS(m, t, w, h, n, at) \
    {.kind = SK_ASYNC, .mode = (m), .lock = "lk", .ttl_ms = (t), .wait_ms = (w), \
     .hold_ms = (h), .iters = (n), .extend = 1, .offset = 1, .notify = 1, .clock_server = 1, \
     .ops = 2, .plans = {SAP_EXTEND, SAP_KEEP}, .start_ms = (at)}
/* The server's clock steps s ms and back (as SERVER_STEP) under an
 * asynchronous client whose two operations take one lock (a holder and a
 * waiter on one loop), beside a blocking waiter and a later one. */
#define ASYNC_SERVER_STEP(pers, nm, m, s, sh) \
    {.name = nm, .personality = pers, \
     .what = "legacy.clock = server: the server's clock steps " #s " ms and back under an " \
             "asynchronous client's two operations on one lock and two blocking clients", \
     .nclients = 4, \
     .c = {{.kind = SK_ASYNC, .mode = (m), .lock = "lk", .ttl_ms = 2000, .wait_ms = 6000, \
            .hold_ms = 600, .iters = 2, .extend = 1, .offset = 1, .notify = 1, \
            .clock_server = 1, .ops = 2, .plans = {SAP_EXTEND, SAP_EXTEND}}, \
           OP("lk"), RLS(m, 50), RLS(m, 700)}, \
     .faults = SF_BIT(SF_SERVER_CLOCK), .tick_ms = 1, .server_step_ms = (s), .in_short = (sh)}
/* legacy.clock = "server" beside a classic holder of lk for 60 s: the
 * wall clocks of an asynchronous client (its first operation on lk, its
 * second on lk2) and of a blocking client on lk2 step +120 s; only the
 * server's clock may tell them the classic lock has ended. */
#define ASYNC_CLOCK(pers, nm, m, sh) \
    {.name = nm, .personality = pers, \
     .what = "legacy.clock = server: an asynchronous and a blocking client whose wall clocks " \
             "step +120 s meet a classic holder", \
     .nclients = 4, \
     .c = {{.kind = SK_CLASSIC, .lock = "lk", .ttl_ms = 60000, .wait_ms = 1000, \
            .hold_ms = 30000, .iters = 1}, \
           ASS(m, 2000, 0, 300, 4, 100), OP("lk2"), \
           {.kind = SK_RELOCK, .mode = (m), .lock = "lk2", .ttl_ms = 2000, .wait_ms = 3000, \
            .hold_ms = 300, .iters = 3, .extend = 1, .offset = 1, .notify = 1, \
            .clock_server = 1, .start_ms = 150}}, \
     .faults = SF_BIT(SF_CLOCK), .tick_ms = 1, .clock_step_ms = 120000, .in_short = (sh)}

const sim_scenario sim_scenarios[] = {
    MODERN_ON("7", "modern-7"),
    MODERN_ON("nolua", "modern-nolua"),
    MODERN_ON("valkey-8.1", "modern-valkey-8.1"),
    MODERN_ON("valkey-9.0", "modern-valkey-9.0"),
    MODERN_ON("redis-8.4", "modern-redis-8.4"),
    /* On 2.0 release and extend are a check, then a write: a pause between
     * the two can hit a new holder (docs/safety.md).  Pauses are left out
     * here; known-2.0-pause shows the simulator finds that window. */
    LEGACY_F("2.0", "legacy-2.0", SF_NET),
    LEGACY_ON("2.2", "legacy-2.2"),
    LEGACY_ON("2.4", "legacy-2.4"),
    LEGACY_ON("2.6.0", "legacy-2.6.0"),
    LEGACY_ON("7", "legacy-7"),
    LEGACY_ON("nolua", "legacy-nolua"),
    {.name = "bridge-7", .personality = "7",
     .what = "two relock clients in bridge mode and a classic client",
     .nclients = 3,
     .c = {RL(BRI, 2000, 6000, 600, 2, 1), RL(BRI, 2000, 6000, 600, 2, 1),
           CL(3000, 6000, 500, 1)},
     .faults = SF_NET | SF_BIT(SF_PAUSE), .tick_ms = 1, .pause_ms = 3500, .in_short = 1},
    {.name = "bridge-2.6.0", .personality = "2.6.0",
     .what = "two relock clients in bridge mode and a classic client on 2.6.0",
     .nclients = 3,
     .c = {RL(BRI, 2000, 6000, 600, 2, 1), RL(BRI, 2000, 6000, 600, 2, 1),
           CL(3000, 6000, 500, 1)},
     .faults = SF_NET | SF_BIT(SF_PAUSE), .tick_ms = 1, .pause_ms = 3500},
    {.name = "bridge-offset0", .personality = "7",
     .what = "bridge, seconds, expiry_offset 0, extended: the TTL must outlive the validity",
     .nclients = 2,
     .c = {{.kind = SK_RELOCK, .mode = BRI, .lock = "lk", .ttl_ms = 2000, .wait_ms = 5000,
            .hold_ms = 1800, .iters = 2, .extend = 1, .offset = 0},
           {.kind = SK_RELOCK, .mode = BRI, .lock = "lk", .ttl_ms = 2000, .wait_ms = 5000,
            .hold_ms = 1800, .iters = 2, .extend = 1, .offset = 0, .start_ms = 300}},
     .faults = SF_NET, .tick_ms = 7},
    {.name = "break-legacy-2.2", .personality = "2.2",
     .what = "a legacy holder broken by the operator; a classic client takes the lock",
     .nclients = 3,
     .c = {RL(LEG, 3000, 0, 1200, 1, 1), BRK(200), CL(3000, 6000, 1500, 1)},
     .faults = SF_NET, .tick_ms = 1, .in_short = 1},
    {.name = "break-legacy-2.0", .personality = "2.0",
     .what = "a legacy holder broken by the operator; another relock client takes the lock",
     .nclients = 3,
     .c = {RL(LEG, 3000, 0, 1200, 1, 1), BRK(200), RL(LEG, 3000, 6000, 1500, 1, 1)},
     .faults = SF_NET, .tick_ms = 1, .in_short = 1},
    {.name = "break-bridge-7", .personality = "7",
     .what = "a bridge holder broken by the operator; a classic client takes the lock",
     .nclients = 3,
     .c = {RL(BRI, 3000, 0, 1200, 1, 1), BRK(200), CL(3000, 6000, 1500, 1)},
     .faults = SF_NET, .tick_ms = 1, .in_short = 1},
    {.name = "break-bridge-marker", .personality = "7",
     .what = "a bridge holder broken; a classic client writes the same value in the same "
             "second; the holder's extend follows it and its legacy-seen marker write times out",
     .nclients = 3,
     .c = {RL(BRI, 3000, 0, 1200, 1, 1), BRK(200),
           {.kind = SK_CLASSIC, .lock = "lk", .ttl_ms = 3000, .wait_ms = 6000, .hold_ms = 1500,
            .iters = 1, .start_ms = 205}},
     .force = {{0, "relock:legacy-seen", SF_HOLD}}, .nforce = 1, .phase_ms = 100,
     .faults = 0, .tick_ms = 1, .in_short = 1},
    {.name = "probe-loading", .personality = "2.2",
     .what = "a client whose probe meets -LOADING beside a holder that extends",
     .nclients = 2,
     .c = {RL(LEG, 3000, 0, 1500, 1, 1),
           {.kind = SK_RELOCK, .mode = LEG, .lock = "lk", .ttl_ms = 3000, .wait_ms = 3000,
            .hold_ms = 200, .iters = 1, .offset = 1, .start_ms = 50}},
     .force = {{1, "INFO", SF_ERROR}, {1, "UNWATCH", SF_ERROR}}, .nforce = 2,
     .faults = 0, .tick_ms = 1, .in_short = 1},
    {.name = "break-modern-7", .personality = "7",
     .what = "a modern holder broken by a plain DEL; another relock client takes the lock",
     .nclients = 3,
     .c = {RL(MOD, 3000, 0, 1200, 1, 1), DEL(200), RL(MOD, 3000, 6000, 1500, 1, 1)},
     .faults = SF_NET, .tick_ms = 1},
    {.name = "clock-server", .personality = "2.6.0",
     .what = "legacy.clock = server: a relock client whose wall clock steps +120 s meets a "
             "classic holder",
     .nclients = 2,
     .c = {{.kind = SK_CLASSIC, .lock = "lk", .ttl_ms = 60000, .wait_ms = 1000,
            .hold_ms = 30000, .iters = 1},
           {.kind = SK_RELOCK, .mode = LEG, .lock = "lk", .ttl_ms = 2000, .wait_ms = 0,
            .hold_ms = 100, .iters = 6, .offset = 1, .clock_server = 1, .start_ms = 100}},
     .faults = SF_BIT(SF_CLOCK), .tick_ms = 1, .clock_step_ms = 120000},
    {.name = "fence-tag", .personality = "2.2",
     .what = "locks x and {x} side by side: each keeps its own fence",
     .nclients = 2,
     .c = {{.kind = SK_RELOCK, .mode = LEG, .lock = "x", .ttl_ms = 3000, .wait_ms = 3000,
            .hold_ms = 300, .iters = 2, .extend = 1, .offset = 1},
           {.kind = SK_RELOCK, .mode = LEG, .lock = "{x}", .ttl_ms = 3000, .wait_ms = 3000,
            .hold_ms = 300, .iters = 2, .extend = 1, .offset = 1, .start_ms = 50}},
     .faults = SF_NET, .tick_ms = 1, .in_short = 1},
    /* A quorum over three servers (src/algo/quorum.c).  With one of them down
     * the two others make the majority, so a reply delayed past a few
     * ms moves the moment the majority is reached well after the send:
     * the validity must be counted from the send. */
    {.name = "quorum-3-one-down", .personality = "7",
     .what = "quorum over three servers, one refusing connections: acquire, extend, release "
             "with replies delayed 150 ms",
     .nclients = 2, .servers = 3, .down = 4,
     .c = {RLQ(2000, 5000, 600, 2, 1), RLQ(2000, 5000, 600, 2, 1)},
     .faults = SF_NET | SF_BIT(SF_DELAY) | SF_BIT(SF_PAUSE), .delay_ms = 150, .tick_ms = 1,
     .pause_ms = 2500, .in_short = 1},
    {.name = "quorum-3", .personality = "7",
     .what = "quorum over three servers: acquire, extend, release; delays, restarts",
     .nclients = 3, .servers = 3,
     .c = {RLQ(2000, 5000, 600, 2, 1), RLQ(2000, 5000, 600, 2, 1), RLQ(2000, 5000, 400, 1, 0)},
     .faults = SF_NET | SF_BIT(SF_DELAY) | SF_BIT(SF_PAUSE) | SF_BIT(SF_RESTART),
     .delay_ms = 150, .tick_ms = 1, .pause_ms = 2500},
    {.name = "fence-tag-nolua", .personality = "nolua",
     .what = "modern locks x and {x} side by side on a server without Lua (WATCH/MULTI "
             "paths with whole-tag keys)",
     .nclients = 2,
     .c = {{.kind = SK_RELOCK, .mode = MOD, .lock = "x", .ttl_ms = 3000, .wait_ms = 3000,
            .hold_ms = 300, .iters = 2, .extend = 1, .offset = 1},
           {.kind = SK_RELOCK, .mode = MOD, .lock = "{x}", .ttl_ms = 3000, .wait_ms = 3000,
            .hold_ms = 300, .iters = 2, .extend = 1, .offset = 1, .start_ms = 50}},
     .faults = SF_NET | SF_BIT(SF_RESTART), .tick_ms = 1},
    /* Durability: WAIT for one replica after each acquire and extend; the
     * replica goes down and comes back (a fault at any command), WAIT
     * then answers 0 when its 200 ms end.  A durable OK must find the
     * value on the replica for as long as the holder is told. */
    {.name = "durable-modern-7", .personality = "7",
     .what = "two relock clients with durability.replicas = 1 on a server with one replica",
     .nclients = 2, .replicas = 1,
     .c = {{.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 4000,
            .hold_ms = 600, .iters = 2, .extend = 1, .offset = 1, .notify = 1, .durability = 1},
           {.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 4000,
            .hold_ms = 600, .iters = 2, .extend = 1, .offset = 1, .notify = 1, .durability = 1,
            .start_ms = 30}},
     .faults = SF_NET | SF_BIT(SF_REPLICA) | SF_BIT(SF_PAUSE), .tick_ms = 1, .pause_ms = 2500},
    /* Clock drift within relock's allowance (1 % of the lease + 2 ms):
     * one client's clocks run 0.8 % slow, the other's 0.8 % fast. */
    {.name = "drift-modern-7", .personality = "7",
     .what = "two relock clients whose clocks drift by -0.8 % and +0.8 %",
     .nclients = 2,
     .c = {{.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 1000, .wait_ms = 3000,
            .hold_ms = 400, .iters = 2, .extend = 1, .offset = 1, .notify = 1,
            .drift_ppm = -8000},
           {.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 1000, .wait_ms = 3000,
            .hold_ms = 400, .iters = 2, .extend = 1, .offset = 1, .notify = 1,
            .drift_ppm = 8000}},
     .faults = SF_NET | SF_BIT(SF_PAUSE), .tick_ms = 1, .pause_ms = 1500, .in_short = 1},
    /* Extends to a shorter lease under every network fault: a failed,
     * unanswered or ambiguous one must leave no more validity than the
     * new lease from its start, since the server may hold it (the holder
     * goes on acting on the validity relock states). */
    SHORT_EXT("7", "extend-short-modern-7", MOD),
    SHORT_EXT("nolua", "extend-short-modern-nolua", MOD),
    SHORT_EXT("redis-8.4", "extend-short-modern-redis-8.4", MOD),
    SHORT_EXT("2.0", "extend-short-legacy-2.0", LEG),
    SHORT_EXT("2.2", "extend-short-legacy-2.2", LEG),
    SHORT_EXT("7", "extend-short-legacy-7", LEG),
    SHORT_EXT("7", "extend-short-bridge-7", BRI),
    /* Steps of the server's clock, back and forward by more than a lease:
     * a takeover never rests on an estimate of the server's clock from
     * before the step.  A forward step ends the leases written before it
     * (a stated limit: those claims end there). */
    SERVER_STEP("7", "server-clock-back-legacy-7", LEG, -60000),
    SERVER_STEP("2.6.0", "server-clock-back-legacy-2.6.0", LEG, -60000),
    SERVER_STEP("7", "server-clock-back-bridge-7", BRI, -60000),
    SERVER_STEP("7", "server-clock-forward-legacy-7", LEG, 60000),
    SERVER_STEP("7", "server-clock-forward-bridge-7", BRI, 60000),
    /* The asynchronous client: three operations in flight on one loop, two
     * of them on the lock a blocking client also takes (the same name
     * twice), one on a lock of its own; one extends, one is kept by the
     * loop's renewals, one releases from its acquire's callback or frees
     * its handle with the release in flight (the plans move round each
     * iteration); the first acquire's callback cancels the last pending
     * one every other iteration, and the last iteration's first release
     * frees the client from its callback with the others in flight. */
    {.name = "async-modern-7", .personality = "7",
     .what = "an asynchronous client with three operations in flight (extend, keep, release "
             "in the callback, cancel, free) beside a blocking client",
     .nclients = 4,
     .c = {AS(MOD, 1000, 3000, 400, 3, 3, SAP_EXTEND, SAP_KEEP, SAP_QUICK), OP("lk"),
           OP("lk2"), RL(MOD, 1000, 3000, 400, 2, 1)},
     .faults = ALL_FAULTS | SF_BIT(SF_REFUSE) | SF_BIT(SF_LOADING), .refuse_ms = 300,
     .tick_ms = 1, .pause_ms = 1500, .in_short = 1},
    {.name = "async-nolua", .personality = "nolua",
     .what = "an asynchronous client with three operations in flight on a server without "
             "Lua (WATCH/MULTI paths)",
     .nclients = 4,
     .c = {AS(MOD, 1000, 3000, 400, 3, 3, SAP_KEEP, SAP_FREE, SAP_EXTEND), OP("lk"),
           OP("lk2"), RL(MOD, 1000, 3000, 400, 2, 1)},
     .faults = ALL_FAULTS, .tick_ms = 1, .pause_ms = 1500},
    {.name = "async-quorum-3", .personality = "7",
     .what = "an asynchronous quorum client over three servers, one refusing, with two "
             "operations in flight on one lock beside a blocking quorum client; replies "
             "delayed 150 ms",
     .nclients = 3, .servers = 3, .down = 4,
     .c = {AS(MOD, 2000, 5000, 600, 2, 2, SAP_EXTEND, SAP_KEEP, 0), OP("lk"),
           RLQ(2000, 5000, 600, 2, 1)},
     .faults = SF_NET | SF_BIT(SF_DELAY) | SF_BIT(SF_PAUSE), .delay_ms = 150, .tick_ms = 1,
     .pause_ms = 2500, .in_short = 1},
    {.name = "async-quorum-3-all", .personality = "7",
     .what = "an asynchronous quorum client over three servers, three operations in flight, "
             "beside a blocking quorum client; delays, restarts",
     .nclients = 4, .servers = 3,
     .c = {AS(MOD, 2000, 5000, 600, 2, 3, SAP_KEEP, SAP_EXTEND, SAP_QUICK), OP("lk"),
           OP("lk2"), RLQ(2000, 5000, 600, 2, 1)},
     .faults = SF_NET | SF_BIT(SF_DELAY) | SF_BIT(SF_PAUSE) | SF_BIT(SF_RESTART),
     .delay_ms = 150, .tick_ms = 1, .pause_ms = 2500},
    /* Two of three servers answer 400 ms late, past the quorum's 200 ms
     * per-server timeout: every acquire fails, decided by its deadline
     * while its requests are still in flight to the late two, which run
     * them.  Its clean-up must follow them there, or the failed
     * acquire's token stays on a majority (item f of the enumeration). */
    {.name = "async-quorum-late", .personality = "7",
     .what = "an asynchronous and a blocking quorum client; two of three servers answer "
             "every command 400 ms late: failed acquires leave no token on a majority",
     .nclients = 3, .servers = 3, .slow = 6, .delay_ms = 400, .no_orphans = 1,
     .c = {{.kind = SK_ASYNC, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 0,
            .hold_ms = 300, .iters = 2, .extend = 1, .offset = 1, .notify = 1, .ops = 2,
            .plans = {SAP_EXTEND, SAP_EXTEND}},
           OP("lk2"), RLQ(2000, 0, 300, 2, 0)},
     .faults = 0, .tick_ms = 1, .in_short = 1},
    /* Two waiters of one client on one channel, with a short bound: a
     * SUBSCRIBE answered late ends both bounds while its confirmation is
     * on its way (the walk of the channel's waiters frees the channel as
     * the last one leaves: found under the sanitizer build). */
    {.name = "async-waiters-late-subscribe", .personality = "7",
     .what = "an asynchronous client's two waiters with a 150 ms bound on a held lock; "
             "replies delayed 300 ms",
     .nclients = 3,
     .c = {RL(MOD, 3000, 0, 1200, 1, 0),
           {.kind = SK_ASYNC, .mode = MOD, .lock = "lk", .ttl_ms = 1000, .wait_ms = 150,
            .hold_ms = 200, .iters = 3, .extend = 1, .offset = 1, .notify = 1, .ops = 2,
            .plans = {SAP_EXTEND, SAP_QUICK}, .start_ms = 50},
           OP("lk")},
     .faults = SF_NET | SF_BIT(SF_DELAY), .delay_ms = 300, .tick_ms = 1, .in_short = 1},
    /* A lock deleted by the operator: its extend finds it lost, and its
     * handle is released in the next iteration from the first acquire's
     * callback, while the second acquire's reply may come in the same read
     * (delays); on the last iteration that release's callback frees the
     * client (found under the sanitizer build). */
    {.name = "async-lost-handle", .personality = "7",
     .what = "an asynchronous client releases a lock found lost from another operation's "
             "callback and frees the client from that release's callback",
     .nclients = 3,
     .c = {{.kind = SK_ASYNC, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 0,
            .hold_ms = 400, .iters = 2, .extend = 1, .offset = 1, .ops = 2,
            .plans = {SAP_EXTEND, SAP_EXTEND}, .free_in_cb = 1},
           OP("lk2"), DEL(100)},
     .faults = SF_NET | SF_BIT(SF_DELAY), .delay_ms = 20, .tick_ms = 1, .in_short = 1},
    /* Kept locks on a server that answers 250 ms late, renewed every third
     * of their 2 s lease; the program releases them (without keep_stop)
     * and frees the handles 5.6 s in, while a renewal is in flight: the
     * release waits for it and must still run, leaving no token. */
    {.name = "async-keep-release-free", .personality = "7",
     .what = "an asynchronous client releases and frees kept locks while their renewals "
             "are in flight on a server answering 250 ms late",
     .nclients = 2, .slow = 1, .delay_ms = 250, .no_orphans = 1,
     .c = {{.kind = SK_ASYNC, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 0,
            .hold_ms = 5600, .iters = 2, .offset = 1, .ops = 2,
            .plans = {SAP_KEEP_FREE, SAP_KEEP_FREE}},
           OP("lk2")},
     .faults = 0, .tick_ms = 1, .in_short = 1},
    /* The same, and the program frees the client right after asking for
     * the last releases, while they wait behind the renewals (found under
     * the sanitizer build). */
    {.name = "async-keep-free-client", .personality = "7",
     .what = "an asynchronous client frees itself while the releases of its kept locks "
             "wait behind renewals in flight",
     .nclients = 2, .slow = 1, .delay_ms = 250,
     .c = {{.kind = SK_ASYNC, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 0,
            .hold_ms = 5600, .iters = 1, .offset = 1, .ops = 2,
            .plans = {SAP_KEEP_FREE, SAP_KEEP_FREE}, .free_in_cb = 1},
           OP("lk2")},
     .faults = SF_NET, .tick_ms = 1, .in_short = 1},
    {.name = "async-bridge-7", .personality = "7",
     .what = "an asynchronous client in bridge mode, two operations in flight, beside a "
             "blocking bridge client and a classic client",
     .nclients = 4,
     .c = {AS(BRI, 2000, 6000, 600, 2, 2, SAP_EXTEND, SAP_KEEP, 0), OP("lk"),
           RL(BRI, 2000, 6000, 600, 2, 1), CL(3000, 6000, 500, 1)},
     .faults = SF_NET | SF_BIT(SF_PAUSE), .tick_ms = 1, .pause_ms = 3500},
    {.name = "async-legacy-7", .personality = "7",
     .what = "an asynchronous client in legacy mode, two operations in flight, beside a "
             "classic client",
     .nclients = 3,
     .c = {AS(LEG, 2000, 6000, 600, 2, 2, SAP_KEEP, SAP_EXTEND, 0), OP("lk"),
           CL(3000, 6000, 500, 1)},
     .faults = SF_NET | SF_BIT(SF_PAUSE) | SF_BIT(SF_RESTART), .tick_ms = 1, .pause_ms = 3500},
    /* Kept locks through one short fault each: a refused reconnect (the
     * path gone for 400 ms), a transient error to any command (the
     * reconnect's setup among them), a connection lost before or after
     * a command.  Renewals every third of a 3 s lease, a failed one
     * retried every tenth: no such fault may lose a kept lock. */
    {.name = "async-keep-modern-7", .personality = "7",
     .what = "an asynchronous client keeps two locks through short faults (refused "
             "reconnect, transient errors, lost connections) beside a blocking waiter",
     .nclients = 3,
     .c = {AS(MOD, 3000, 0, 7000, 1, 2, SAP_KEEP, SAP_KEEP, 0), OP("lk2"),
           RL(MOD, 3000, 2000, 300, 1, 0)},
     .faults = SF_BIT(SF_LOST_BEFORE) | SF_BIT(SF_LOST_AFTER) | SF_BIT(SF_DEAD_AFTER) |
               SF_BIT(SF_ERROR) | SF_BIT(SF_REFUSE) | SF_BIT(SF_LOADING),
     .refuse_ms = 400, .keep_survives = 1, .tick_ms = 1, .in_short = 1},
    /* A kept lock whose renewal meets a server that does not answer: the
     * command timeout (1 s) ends after the validity (1.2 s lease, renewed
     * at 400 ms), so the loss must be told by the deadline's timer. */
    {.name = "async-keep-stall", .personality = "7",
     .what = "an asynchronous client keeps a 1.2 s lock whose renewal meets a silent server",
     .nclients = 2,
     .c = {AS(MOD, 1200, 0, 3000, 1, 1, SAP_KEEP, 0, 0),
           RL(MOD, 1200, 4000, 300, 1, 0)},
     .faults = SF_BIT(SF_HOLD) | SF_BIT(SF_LOST_AFTER), .tick_ms = 1, .in_short = 1},
    /* Extends to a shorter lease with durability: a WAIT short of its
     * replica leaves no more than the new lease from the extend's start. */
    {.name = "async-durable-modern-7", .personality = "7",
     .what = "an asynchronous client with durability.replicas = 1 extends 2 s locks to "
             "400 ms beside a blocking client",
     .nclients = 3, .replicas = 1,
     .c = {{.kind = SK_ASYNC, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 4000,
            .hold_ms = 1200, .iters = 2, .extend = 1, .extend_ms = 400, .offset = 1,
            .notify = 1, .durability = 1, .ops = 2, .plans = {SAP_EXTEND, SAP_EXTEND}},
           OP("lk2"),
           {.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 2000, .wait_ms = 4000,
            .hold_ms = 600, .iters = 2, .extend = 1, .offset = 1, .notify = 1,
            .durability = 1, .start_ms = 30}},
     .faults = SF_NET | SF_BIT(SF_REPLICA), .tick_ms = 1, .in_short = 1},
    {.name = "async-extend-short-bridge-7", .personality = "7",
     .what = "an asynchronous bridge client extends its 2 s locks to 400 ms mid-hold",
     .nclients = 3,
     .c = {{.kind = SK_ASYNC, .mode = BRI, .lock = "lk", .ttl_ms = 2000, .wait_ms = 6000,
            .hold_ms = 1200, .iters = 2, .extend = 1, .extend_ms = 400, .offset = 1,
            .notify = 1, .unit_ms = 1, .ops = 2, .plans = {SAP_EXTEND, SAP_EXTEND}},
           OP("lk"), RLX(BRI, 2000, 6000, 1200, 2, 400)},
     .faults = SF_NET, .tick_ms = 1},
    /* The asynchronous client with the timestamp modes' clocks: the wall
     * clock stepping under legacy.clock = server, the server's clock
     * stepping back and forward. */
    ASYNC_CLOCK("2.6.0", "async-clock-server-legacy-2.6.0", LEG, 1),
    ASYNC_CLOCK("7", "async-clock-server-bridge-7", BRI, 0),
    /* A server whose every reply comes 250 ms late: the estimate of its
     * clock may be behind by half the round trip, so a lease planned on it
     * is counted from the moment TIME went out. */
    {.name = "async-clock-server-slow", .personality = "7",
     .what = "legacy.clock = server on a server answering 250 ms late: an asynchronous "
             "client's two operations and a blocking client, clock unit ms",
     .nclients = 3, .slow = 1, .delay_ms = 250,
     .c = {{.kind = SK_ASYNC, .mode = LEG, .lock = "lk", .ttl_ms = 2000, .wait_ms = 6000,
            .hold_ms = 600, .iters = 2, .extend = 1, .offset = 0, .notify = 1,
            .clock_server = 1, .unit_ms = 1, .ops = 2, .plans = {SAP_EXTEND, SAP_KEEP}},
           OP("lk"),
           {.kind = SK_RELOCK, .mode = LEG, .lock = "lk", .ttl_ms = 2000, .wait_ms = 6000,
            .hold_ms = 600, .iters = 2, .extend = 1, .offset = 0, .notify = 1,
            .clock_server = 1, .unit_ms = 1, .start_ms = 50}},
     .faults = SF_NET, .tick_ms = 1},
    ASYNC_SERVER_STEP("7", "async-server-clock-back-legacy-7", LEG, -60000, 1),
    ASYNC_SERVER_STEP("7", "async-server-clock-back-bridge-7", BRI, -60000, 0),
    ASYNC_SERVER_STEP("7", "async-server-clock-forward-legacy-7", LEG, 60000, 0),
    /* The asynchronous client on 2.0 (no WATCH, no EVAL: GET then GETSET
     * or DEL, fenced writes in MULTI): its operations on two locks beside
     * a blocking and a classic client; pauses are left out, as for
     * legacy-2.0. */
    {.name = "async-legacy-2.0", .personality = "2.0",
     .what = "an asynchronous client in legacy mode on 2.0, two operations on two locks, "
             "beside a blocking and a classic client",
     .nclients = 4,
     .c = {AS(LEG, 2000, 6000, 600, 2, 2, SAP_EXTEND, SAP_KEEP, 0), OP("lk2"),
           RL(LEG, 2000, 6000, 600, 2, 1), CL(3000, 6000, 500, 1)},
     .faults = SF_NET, .tick_ms = 1},
    /* Renewals on 2.0 through short faults: a GETSET whose reply was lost
     * wrote the value it carried, which the next renewal finds in the key
     * and must take for its own.  The waiter comes after the first
     * renewals, so that the short run's first 30 commands reach them. */
    {.name = "async-keep-legacy-2.0", .personality = "2.0",
     .what = "an asynchronous client keeps two locks on 2.0 through short faults beside a "
             "blocking waiter",
     .nclients = 3,
     .c = {AS(LEG, 3000, 0, 7000, 1, 2, SAP_KEEP, SAP_KEEP, 0), OP("lk2"),
           {.kind = SK_RELOCK, .mode = LEG, .lock = "lk", .ttl_ms = 3000, .wait_ms = 2000,
            .hold_ms = 300, .iters = 1, .offset = 1, .notify = 1, .start_ms = 1100}},
     .faults = SF_BIT(SF_LOST_BEFORE) | SF_BIT(SF_LOST_AFTER) | SF_BIT(SF_DEAD_AFTER) |
               SF_BIT(SF_ERROR) | SF_BIT(SF_REFUSE) | SF_BIT(SF_LOADING),
     .refuse_ms = 400, .keep_survives = 1, .tick_ms = 1, .in_short = 1},
    /* The lock broken is the asynchronous client's second operation's:
     * what it read before its GETSET is told from what the first one
     * read of its own lock. */
    {.name = "async-break-legacy-2.0", .personality = "2.0",
     .what = "an asynchronous legacy client on 2.0 holds two locks; one is broken by the "
             "operator and a blocking client takes it",
     .nclients = 4,
     .c = {{.kind = SK_ASYNC, .mode = LEG, .lock = "lk2", .ttl_ms = 3000, .wait_ms = 0,
            .hold_ms = 1200, .iters = 1, .extend = 1, .offset = 1, .notify = 1, .ops = 2,
            .plans = {SAP_EXTEND, SAP_EXTEND}},
           OP("lk"), BRK(200), RL(LEG, 3000, 6000, 1500, 1, 1)},
     .faults = SF_NET, .tick_ms = 1, .in_short = 1},
    /* Negative controls: the simulator must find these. */
    {.name = "known-2.0-pause", .personality = "2.0",
     .what = "DOCUMENTED LIMIT: on 2.0 a holder paused between its check and its GETSET "
             "writes over a new holder",
     .nclients = 3,
     .c = {RL(LEG, 2000, 6000, 600, 2, 1), RL(LEG, 2000, 6000, 600, 2, 1),
           CL(3000, 6000, 500, 1)},
     .faults = SF_BIT(SF_PAUSE), .tick_ms = 1, .pause_ms = 3500, .negative = 1},
    {.name = "neg-modern-classic", .personality = "7",
     .what = "NEGATIVE CONTROL: modern values beside a classic client (it reads a token as "
             "an expired timestamp)",
     .nclients = 2,
     .c = {RL(MOD, 3000, 3000, 1000, 2, 0), CL(3000, 6000, 500, 2)},
     .faults = 0, .tick_ms = 1, .negative = 1},
    {.name = "neg-skew", .personality = "2.6.0",
     .what = "NEGATIVE CONTROL: legacy clients whose clocks differ by 5 s, skew_margin_ms 0",
     .nclients = 2,
     .c = {{.kind = SK_RELOCK, .mode = LEG, .lock = "lk", .ttl_ms = 3000, .wait_ms = 8000,
            .hold_ms = 1500, .iters = 2, .offset = 1},
           {.kind = SK_RELOCK, .mode = LEG, .lock = "lk", .ttl_ms = 3000, .wait_ms = 8000,
            .hold_ms = 1500, .iters = 2, .offset = 1, .skew_ms = 5000, .start_ms = 100}},
     .faults = 0, .tick_ms = 1, .negative = 1},
    {.name = "neg-drift", .personality = "7",
     .what = "NEGATIVE CONTROL: a client whose clocks run 5 % slow, beyond the allowance",
     .nclients = 2,
     .c = {{.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 1000, .wait_ms = 3000,
            .hold_ms = 900, .iters = 2, .offset = 1, .drift_ppm = -50000},
           {.kind = SK_RELOCK, .mode = MOD, .lock = "lk", .ttl_ms = 1000, .wait_ms = 3000,
            .hold_ms = 900, .iters = 2, .offset = 1, .start_ms = 20}},
     .faults = 0, .tick_ms = 1, .negative = 1},
    {.name = NULL},
};

const sim_scenario *sim_scenario_find(const char *name)
{
    for (const sim_scenario *s = sim_scenarios; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}
