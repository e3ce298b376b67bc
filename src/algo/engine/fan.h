/*
 * The engine over several connections (design.md §9.1, the quorum): a fan
 * machine sends one batch per server and is fed each server's replies as
 * they arrive.  It works in rounds, each a request to a set of servers with
 * a deadline, and says when a round is decided; servers that have not
 * answered by then are the driver's (src/core/fanout.c) to read later or
 * drop.  The machine holds every decision; the driver the connections,
 * their setup, the replies owed and the poll loop.
 */
#ifndef RELOCK_ENGINE_FAN_H
#define RELOCK_ENGINE_FAN_H

#include "engine.h"

/* A fan machine's answer when it has nothing to send and the round is not
 * decided: feed it the next replies, or the time once it has passed the
 * round's deadline. */
#define RELOCK__STEP_WAIT ((relock__step)2)

/* What a fan machine asks to be sent. */
typedef struct relock__fanout {
    relock__batch b[RELOCK__MAX_SERVERS]; /* b[i] for each server i in mask */
    unsigned mask;
    /* 1: these batches start a new round; 0: they are sent again in the
     * round under way (by EVAL after NOSCRIPT). */
    int round;
    long long timeout_ms; /* a new round: each server's time to answer */
    /* A new round: the servers whose batch undoes what earlier requests
     * may have done there (a failed acquire's clean-up).  It goes behind
     * those requests on their connection, however late: a server runs one
     * connection's commands in order, so the undoing runs after what it
     * undoes, where on a new connection it could run first.  Only when
     * that connection is gone does the driver open another. */
    unsigned after;
} relock__fanout;

/* What a fan driver feeds to a fan machine. */
typedef struct relock__fanfeed {
    /* The servers whose replies (or fault) this feed brings, in srv[];
     * 0 in the first feed of a round and when only the time moved. */
    unsigned from;
    /* srv[i], for i in from: the replies to server i's batch, or a fault:
     * UNSENT or LOST when it was dropped; fault_status RELOCK_ECONFIG when
     * it refused AUTH or SELECT.  In a round's first feed, such a refusal
     * was met on the connection's earlier use and only informs (`reached`
     * says whether the new one was sent the batch); any other fault there
     * dropped a reached server before its batch was written. */
    relock__feed srv[RELOCK__MAX_SERVERS];
    /* A round's first feed: its servers connected (or connecting) and
     * sent their batch; the others are down or left alone after being
     * late. */
    unsigned reached;
    /* The round's servers whose batch is wholly written: one that has not
     * answered when the round is decided is left owing its reply (it may
     * still run the request; its connection is kept for what must follow),
     * any other is dropped. */
    unsigned written;
    /* The time: in the first feed of a round, when the round started
     * (its deadlines count from it); else when the replies were read. */
    uint64_t mono_ms;
} relock__fanfeed;

/* A fan machine's step function; the first call has from == 0, the
 * time, and is no round's first feed.  Returns SEND with *out filled,
 * WAIT, or DONE with the head's st set (errors on l->c->err). */
typedef relock__step (*relock__fan_fn)(void *m, relock_lock *l, const relock__fanfeed *in,
                                       relock__fanout *out);

/* An algorithm's machines for the operation core: the acquire and the
 * update (release, extend) machines, each with its size and an init that
 * draws the token (the driver draws randomness); a quorum has one fan
 * machine for every operation instead (acq_step and upd_step NULL). */
typedef struct relock__machines {
    size_t acq_size;
    relock_status (*acq_init)(void *m, relock_lock *l);
    relock__step_fn acq_step;
    size_t upd_size;
    relock_status (*upd_init)(void *m, relock_lock *l, int extend, long long ttl_ms);
    relock__step_fn upd_step;
    relock__fan_fn fan;
} relock__machines;

/* A fan machine that has not ended after this many feeds is stopped with
 * RELOCK_EPROTO (a machine's bug). */
#define RELOCK__FAN_MAX_FEEDS 4096

#endif
