/* The fence carry's step machine: a whole-tag key's counter raised (fence.c). */
#ifndef RELOCK_FENCE_H
#define RELOCK_FENCE_H

#include "engine/engine.h"

/* WATCH rounds at most: the counters only grow, so a few looks settle it. */
#define RELOCK__FENCE_WATCH_TRIES 5

enum relock__fence_way {
    RELOCK__FW_NONE = 0,
    RELOCK__FW_SCRIPT, /* RELOCK__SCRIPT_FENCE_CARRY (2.6.0) */
    RELOCK__FW_WATCH,  /* WATCH, GET, GET, MULTI, SET, EXEC (Lua left out) */
    RELOCK__FW_SETNX   /* before 2.6: GET the old counter, SETNX the new one */
};

/* Runs on the lock's handle (l->fence_key); `before` is the counter's
 * earlier name (relock__fence_key_before).  RELOCK_OK, or a failure. */
typedef struct relock__fence_carry_m {
    relock__mhead h;
    const char *before;
    int way;     /* enum relock__fence_way */
    int by_eval;
    int tries;   /* WATCH rounds begun */
    long long old; /* WATCH: the earlier counter (0 when absent) */
    char old_text[32]; /* before 2.6: the earlier counter as read */
} relock__fence_carry_m;

void relock__fence_carry_init(relock__fence_carry_m *m, const char *before);
relock__step relock__fence_carry_step(void *m, relock_lock *l, const relock__feed *in,
                                      relock__batch *out);

#endif
