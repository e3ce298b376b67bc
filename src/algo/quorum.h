/*
 * The quorum's fan machine (quorum.c, design.md §9.1): acquire, extend and
 * release over several independent masters, with the fence raise on the
 * majority, as one step machine run by a fan driver (engine/fan.h).
 */
#ifndef RELOCK_QUORUM_H
#define RELOCK_QUORUM_H

#include "engine/fan.h"

enum relock__quorum_op { RELOCK__Q_ACQUIRE = 1, RELOCK__Q_RELEASE, RELOCK__Q_EXTEND };

/* One round: a request to a set of servers, and what came back. */
typedef struct relock__qround {
    unsigned asked;    /* the servers sent the request */
    unsigned live;     /* reached, neither answered nor dropped yet */
    unsigned answers;  /* answered with the expected shape */
    unsigned yes;      /* answered, and did what was asked */
    unsigned owing;    /* once decided: left owing their replies (written) */
    unsigned unsure;   /* dropped after their request was written: it may have run */
    int reached;       /* servers connected (or connecting) and sent to */
    int answered;      /* replies of the expected shape */
    int good;          /* of those, the yes */
    int need;          /* decided once this many said yes */
    int started;       /* the round's first feed came */
    int config;        /* a server refused AUTH or SELECT: error says which */
    int nolua;         /* a server answered that EVAL or EVALSHA is unknown */
    uint64_t start;    /* when the round started (its first feed's time) */
    uint64_t deadline; /* start + the per-server timeout */
    int by_eval[RELOCK__MAX_SERVERS]; /* sent again by EVAL after NOSCRIPT */
    long long v0[RELOCK__MAX_SERVERS], v1[RELOCK__MAX_SERVERS]; /* the answers */
    char error[448];   /* the first server error ("host:port: text"), or "" */
} relock__qround;

typedef struct relock__quorum_m {
    relock__mhead h;
    int op;             /* enum relock__quorum_op */
    long long ttl_ms;   /* extend: the new lease */
    long long tmo;      /* each server's timeout */
    relock__qround r;   /* the round under way */
    relock__qround first; /* acquire, extend: its main round, once decided */
    /* the request of the round under way (for NOSCRIPT's EVAL) */
    int id, nkeys, nargs;
    const char *args[4];
    char num[32];       /* the ttl, or the fence to raise, as text */
    char chan[RELOCK__KEY_MAX];
    char before[RELOCK__KEY_MAX];
    /* acquire */
    unsigned won;
    int nwon, raise_failed;
    long long fence, lowest, shortest;
    uint64_t valid_until;
} relock__quorum_m;

/* Starts a machine for op on l (the token already in l->value for an
 * acquire); ttl_ms: an extend's new lease. */
void relock__quorum_init(relock__quorum_m *m, int op, long long ttl_ms);
relock__step relock__quorum_step(void *m, relock_lock *l, const relock__fanfeed *in,
                                 relock__fanout *out);

/* Each server's own timeout for a lease of ttl_ms: a tenth of it (at
 * least 10 ms), at most command_timeout_ms. */
long long relock__quorum_server_timeout(const relock_client *c, long long ttl_ms);

/* The quorum's fan machine, for the operation core. */
extern const struct relock__machines relock__quorum_machines;

#endif
