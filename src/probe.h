/*
 * The server probe (DESIGN §2) as a step machine: INFO, or without it the
 * refusals of TIME, SET and UNWATCH, then COMMAND DOCS.  Pure: the blocking
 * probe (relock__probe, probe.c) and the asynchronous client (async.c)
 * send the commands it asks for and feed back the replies.
 */
#ifndef RELOCK_PROBE_H
#define RELOCK_PROBE_H

#include "engine/engine.h"

typedef struct relock__probe_m {
    int pc;           /* 0: not started */
    relock_status st; /* the outcome, once done */
} relock__probe_m;

/* One step: RELOCK__STEP_SEND with a batch of one command, or
 * RELOCK__STEP_DONE with m->st (errors on c->err).  Writes what it learns
 * into conn (version, caps); conn->srv names the server in messages. */
relock__step relock__probe_step(relock__probe_m *m, relock_client *c, relock__conn *conn,
                                const relock__feed *in, relock__batch *out);

#endif
