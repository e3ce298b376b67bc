/* legacy.clock = "server": one TIME updates the estimate in c->conn.clock (clock.c). */
#ifndef RELOCK_CLOCK_H
#define RELOCK_CLOCK_H

#include "engine/engine.h"

typedef struct relock__clock_m {
    relock__mhead h;
    int in_txn;  /* the batch goes inside the transaction open now */
    uint64_t t0; /* the monotonic ms when TIME went out */
} relock__clock_m;

/* Starts m; in_txn: the connection is inside the asking machine's
 * WATCH (TIME changes nothing the WATCH covers). */
void relock__clock_init(relock__clock_m *m, int in_txn);
relock__step relock__clock_step(void *m, relock_lock *l, const relock__feed *in,
                                relock__batch *out);

#endif
