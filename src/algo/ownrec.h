/*
 * The owner record (owner_info) written or deleted beside a lock, only
 * while the lock key holds the holder's value (decision 108): by script,
 * by WATCH of the key (and fence), GET, MULTI, the write, EXEC, or on 2.0
 * by a look and then the write.  The record informs and decides nothing:
 * st says whether it was written; callers keep their own outcome.
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
