/*
 * The owner record (owner_info) written or deleted beside a lock, as a
 * step machine (ownrec.c), only while the lock key holds the holder's
 * value (decision 108).  The record's text (host, pid, time) is made by
 * the driver's side before the start (relock__owner_info).
 *
 *   EVAL:  EVALSHA owner_if_held (EVAL on NOSCRIPT)
 *   WATCH: WATCH key [fence]; GET key; [GET fence]
 *          -> not ours: UNWATCH
 *          -> ours:     MULTI | PSETEX (SETEX before 2.6) or DEL | EXEC
 *   2.0:   GET key -> ours: PSETEX/SETEX or DEL (a look, then the write)
 *
 * The record informs and decides nothing: the outcome (st) says whether
 * it was written, and callers keep their own outcome and error.  A
 * transaction that did not end cleanly is left marked in the head
 * (in_txn), so the driver drops the connection.
 */
#ifndef RELOCK_OWNREC_H
#define RELOCK_OWNREC_H

#include "engine/engine.h"

/* Bytes of a record: host, pid, time and RELOCK_OWNER_MAX bytes of text. */
#define RELOCK__OWNER_INFO_MAX 512

typedef struct relock__owner_m {
    relock__mhead h;
    int held; /* write the record (1) or delete it (0) */
    int fence; /* the fence counter is compared too */
    int by_eval;
    int done;  /* outcome: the record was written or deleted */
    long long ms;
    char key[RELOCK__KEY_MAX];
    char value[RELOCK__VALUE_MAX];
    char info[RELOCK__OWNER_INFO_MAX];
} relock__owner_m;

/*
 * Starts m for l's record: written with text info (held), or deleted,
 * while the lock key holds value.  Returns 0 when there is nothing to do:
 * owner_info off, a quorum (one server's view), or a key too long.
 * Needs the server's capabilities (a probed connection).
 */
int relock__owner_init(relock__owner_m *m, const relock_lock *l, const char *value, int held,
                       const char *info);
relock__step relock__owner_step(void *m, relock_lock *l, const relock__feed *in,
                                relock__batch *out);

#endif
