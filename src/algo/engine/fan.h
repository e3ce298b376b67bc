/*
 * The engine over several connections (design.md §9.1, the quorum): a fan
 * machine sends one batch per server, and is fed back each server's
 * replies as they arrive, with the time.  Its work goes in rounds: a round
 * sends a request to a set of servers, each with a deadline of its own,
 * and the machine says when the round is decided (it returns the next
 * round, or ends); servers that have not answered by then are the
 * driver's business (it reads their owed replies later, or drops them).
 *
 * The machine holds every decision (what counts as a yes, when a majority
 * is reached or out of reach, NOSCRIPT then EVAL, the fence to raise, what
 * to clean up); the driver (src/core/fanout.c) holds the connections,
 * their setup, the replies owed to earlier rounds and the poll loop.
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
    /* 1: these batches start a new round, and the previous one is
     * decided; 0: they belong to the round under way (a server is sent
     * its request again, by EVAL after NOSCRIPT), in place of its first
     * batch, whose replies it has fed. */
    int round;
    long long timeout_ms; /* a new round: each server's time to answer */
    /* A new round: the servers of mask whose batch undoes what the
     * operation's earlier requests may have done there (a failed
     * acquire's clean-up).  Their batch goes on the connection that
     * carried those requests, behind them, however late their replies
     * are: a server runs one connection's commands in order, so the
     * undoing runs after what it undoes.  (On a new connection it could
     * run first, and the late request then set what was meant to be
     * deleted.)  Only when that connection is gone does the driver open
     * another, even to a server it would otherwise leave alone. */
    unsigned after;
} relock__fanout;

/* What a fan driver feeds to a fan machine. */
typedef struct relock__fanfeed {
    /* The servers whose replies (or fault) this feed brings, in srv[];
     * 0 in the first feed of a round and when only the time moved. */
    unsigned from;
    /* srv[i], for i in from: all the replies to server i's batch, or a
     * fault: UNSENT or LOST when the server was dropped (its connection
     * failed); fault_status RELOCK_ECONFIG, fault_text
     * "HOST:PORT: AUTH/SELECT: ..." when it refused AUTH or SELECT.  In
     * the first feed of a round, a refusal was met on the connection's
     * earlier use and only informs (the server was connected afresh
     * since: `reached` says whether it was sent the round's batch); any
     * other fault there dropped a reached server before its batch was
     * written. */
    relock__feed srv[RELOCK__MAX_SERVERS];
    /* The first feed of a round (from the call that returned it): the
     * round's servers that were connected (or are connecting) and sent
     * their batch; the others were not reached (down, or left alone
     * after being late). */
    unsigned reached;
    /* The round's servers whose batch is wholly written to the socket:
     * when the round is decided, a server that has not answered is left
     * owing its reply if written, in time or late (the server may still
     * run the request; its connection is kept for what must follow it);
     * otherwise the driver drops it. */
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

/* The machines of an algorithm (relock__algo.machines), for a driver that
 * steps them itself, the operation core (src/core/): the acquire machine
 * and the update machine (release and extend), each with its size and an
 * init that draws what the machine needs (the token; engine conventions:
 * the driver draws the randomness); a quorum has one fan machine for
 * every operation instead (acq_step and upd_step NULL). */
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
