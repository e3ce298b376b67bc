/*
 * The deterministic simulator (docs/architecture.md, "Simulator").
 *
 * One process, virtual time, seeded choices.  Simulated clients run as
 * coroutines: relock clients call the library (which talks through
 * hiredis to the model server: the socket calls of the simulator's own
 * program are answered by it), classic legacy clients run the seed
 * algorithm with hiredis, an operator breaks locks.  A scheduler decides
 * at every command which connection's command runs next and whether a
 * fault hits it; invariants are checked as the model server changes and as
 * clients report outcomes.  Every choice comes from a chooser: random from
 * a seed, or a depth-first walk over every choice up to a bound.
 */
#ifndef SIM_SIM_H
#define SIM_SIM_H

#include <stdint.h>

#include "relock.h"

enum sim_kind {
    SK_RELOCK = 0, /* a relock client: acquire, hold (extend), release */
    SK_CLASSIC,    /* the seed algorithm: SETNX ts; GET; GETSET; DEL */
    SK_BREAK,      /* an operator: relock_break() */
    SK_DEL,        /* an operator: a plain DEL */
    /* A relock asynchronous client (relock_async.h) on a poll() loop of
     * its own, its timers on the client's monotonic clock: ops operations
     * in flight at once on one loop, each on its own lock handle.  Its
     * first operation's claim is its own; each further one's is the
     * SK_SLOT client that follows it in the scenario (same clocks, its own
     * lock name), so the checks tell the operations apart. */
    SK_ASYNC,
    SK_SLOT        /* the claim of an SK_ASYNC client's further operation: runs nothing */
};

/* Faults, one bit each in a scenario's mask. */
enum sim_fault {
    SF_NONE = 0,
    SF_LOST_BEFORE, /* the connection dies before the command reaches the server */
    SF_LOST_AFTER,  /* the command runs, the connection dies before its reply */
    SF_HOLD,        /* the command runs, no reply comes: the client times out */
    SF_DEAD_AFTER,  /* the reply comes, then the connection dies */
    SF_ERROR,       /* the command does not run: -LOADING */
    SF_PAUSE,       /* the client stops after the reply, past its lease */
    SF_CLOCK,       /* the client's wall clock steps before the command */
    SF_RESTART,     /* the server restarts without persistence first */
    SF_DEAD_IDLE,   /* the reply comes, the connection dies, the client idles 250 ms */
    /* The server's wall clock steps before the command: by server_step_ms
     * from the true time, or back to the true time when stepped already
     * (so two steps are one way and back).  TIME and key expiry follow. */
    SF_SERVER_CLOCK,
    SF_DELAY,       /* the command runs, its reply (and those after it) comes delay_ms later */
    SF_REPLICA,     /* the server's replicas go down (or come back) before the command */
    /* The connection dies before the command, and the server refuses new
     * connections for refuse_ms (a path to it gone for a moment). */
    SF_REFUSE,
    /* The connection dies before the command, and the server answers
     * -LOADING to every command for refuse_ms (restarted with its data,
     * loading it): a reconnect's setup meets a transient error. */
    SF_LOADING,
    SF_COUNT
};
#define SF_BIT(f) (1u << (f))
#define SF_NET (SF_BIT(SF_LOST_BEFORE) | SF_BIT(SF_LOST_AFTER) | SF_BIT(SF_HOLD) | \
                SF_BIT(SF_DEAD_AFTER) | SF_BIT(SF_ERROR) | SF_BIT(SF_DEAD_IDLE))

typedef struct sim_client_spec {
    int kind;
    relock_mode mode;
    const char *lock;     /* the lock's name (the key: no prefix) */
    long ttl_ms;          /* relock: the lease; classic: the timeout (whole seconds) */
    long wait_ms;
    long hold_ms;
    int iters;
    int extend;           /* relock: extend once in the middle of the hold */
    long extend_ms;       /* its new lease (0: the acquire's), shorter to test the bound */
    long start_ms;        /* sleeps first */
    long skew_ms;         /* its wall clock against the server's */
    long drift_ppm;       /* its clocks (monotonic and wall) run this much fast (< 0: slow) */
    int unit_ms;          /* legacy.clock_unit ms */
    long offset;          /* legacy.expiry_offset */
    long skew_margin_ms;
    int clock_server;     /* legacy.clock = "server" */
    int notify;           /* wait.notify */
    int durability;       /* durability.replicas (WAIT after each acquire and extend) */
    /* SK_ASYNC: operations in flight at once (1 + the SK_SLOT clients
     * after it), and what each does once it holds (enum sim_async_plan,
     * by operation; each iteration moves every plan one place on) */
    int ops;
    int plans[3];
    /* SK_ASYNC: the last iteration's first release frees the client
     * from its callback, with the other operations still in flight */
    int free_in_cb;
} sim_client_spec;

/* What an asynchronous client's operation does with the lock it got. */
enum sim_async_plan {
    SAP_EXTEND = 0, /* holds, extends (to extend_ms) hold_ms / 2 after the iteration began,
                     * releases hold_ms / 2 after that */
    SAP_KEEP,       /* relock_async_keep() for hold_ms (several renewals), then releases */
    SAP_QUICK,      /* releases from within the acquire's callback */
    SAP_FREE,       /* holds, releases and frees the handle with the release in flight */
    SAP_KEEP_FREE   /* as SAP_KEEP, then releases without keep_stop (a renewal may be in
                     * flight) and frees the handle with the release in flight */
};

#define SIM_MAX_CLIENTS 6
#define SIM_SERVERS 3

typedef struct sim_scenario {
    const char *name;
    const char *personality;
    const char *what;
    int nclients;
    sim_client_spec c[SIM_MAX_CLIENTS];
    int servers;          /* > 1: a quorum over that many servers (relock clients list them all) */
    unsigned down;        /* servers (bit i: server i) refusing connections for the whole run */
    long delay_ms;        /* SF_DELAY */
    int replicas;         /* each server's replicas (WAIT counts them while they are up) */
    unsigned faults;      /* SF_BIT mask */
    long tick_ms;         /* virtual time per command */
    long pause_ms;        /* SF_PAUSE */
    long clock_step_ms;   /* SF_CLOCK */
    long server_step_ms;  /* SF_SERVER_CLOCK */
    long refuse_ms;       /* SF_REFUSE, SF_LOADING */
    /* Every fault of the scenario is short beside the renewals' margin:
     * a kept lock reported lost in a run with one fault at most (not a
     * restart, a pause or a break) is a violation, since a failed renewal
     * must be retried while validity remains. */
    int keep_survives;
    /* Servers (bit i: server i) whose every reply comes delay_ms late,
     * not a fault (a server far away). */
    unsigned slow;
    /* No token may be left on a majority once every client ended (a
     * failed acquire's clean-up reaches every server that may have run
     * it, late ones too): for scenarios whose faults leave none. */
    int no_orphans;
    int negative;         /* a negative control: a violation must be found */
    /* Faults that always happen: client's first command whose words
     * contain match meets fault (a regression pinned to its place). */
    struct {
        int client;
        const char *match;
        int fault;
    } force[4];
    int nforce;
    long phase_ms;        /* > 0: the wall clock's phase within a second, else by seed */
    int in_short;         /* part of the short exploration */
    int manual;           /* run only when named (--scenario): it finds a known open fault */
} sim_scenario;

extern const sim_scenario sim_scenarios[];
const sim_scenario *sim_scenario_find(const char *name);

typedef struct sim_opts {
    int dfs;              /* 1: depth-first over every choice; 0: random from seed */
    uint64_t seed;
    const int *path;      /* DFS: replay this choice path */
    int npath;
    int depth;            /* DFS: choice points explored; later ones take choice 0 */
    int max_faults;       /* faults per run */
    double fault_rate;    /* random: chance of a fault per command */
    int trace;            /* print the trace of the run */
    long max_steps;
    long fault_step;      /* >= 0: this fault hits the command of that step (boundaries) */
    int fault_kind;
} sim_opts;

typedef struct sim_result {
    int violation;
    char msg[512];
    long steps;
    int nchoices;
    int picks[4096];
    int ns[4096];
    unsigned long commands;
    int faults_used;
} sim_result;

/* Runs one execution of the scenario; the trace goes to stdout when
 * o->trace or on a violation (unless quiet). */
int sim_run(const sim_scenario *sc, const sim_opts *o, sim_result *r, int quiet);

#endif
