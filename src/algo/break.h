/* relock_break()'s step machine: an operator's delete of a stuck lock (break.c). */
#ifndef RELOCK_BREAK_H
#define RELOCK_BREAK_H

#include "engine/engine.h"

/* The longest value accepted for comparison: far above any lock value,
 * small enough for a one-line message. */
#define RELOCK__BREAK_VALUE_MAX 1024
/* A WATCH beaten by another client is retried this often. */
#define RELOCK__BREAK_WATCH_TRIES 5

/* Which way the machine deletes (from the server's capabilities). */
enum relock__break_way {
    RELOCK__BW_NONE = 0,
    RELOCK__BW_SCRIPT, /* the compare-and-delete script (2.6.0) */
    RELOCK__BW_WATCH,  /* WATCH, GET, MULTI, DEL, INCR, EXEC (2.2, 2.4) */
    RELOCK__BW_PLAIN,  /* 2.0: GET, then MULTI, GET, DEL, INCR, INCR, EXEC */
    RELOCK__BW_ANY     /* no value before 2.6: MULTI, DEL, INCR(s), EXEC */
};

/*
 * Runs on a handle that names the key.  Inputs (relock__break_init):
 * if_value (NULL: whatever the key holds), if_fence (0: not compared),
 * breaks_key (counted without WATCH), chan (the notice's channel, or "")
 * and okey (the owner record's key, or "").  RELOCK_OK deleted;
 * RELOCK_LOST absent; RELOCK_BUSY another value, a fence no longer
 * current, or (2.0) a value that arrived just before the delete;
 * RELOCK_EAMBIGUOUS when the delete may have run; or a failure.
 */
typedef struct relock__break_m {
    relock__mhead h;
    const char *if_value;
    long long if_fence;
    const char *breaks_key;
    const char *chan;
    const char *okey;
    int way;        /* enum relock__break_way */
    int by_eval;    /* the script goes by EVAL (the server said NOSCRIPT) */
    int tries;      /* WATCH rounds begun */
    int with_get;   /* the transaction reads the value it deletes (2.0) */
    int was_absent; /* WATCH: the key was absent at the GET */
    int moved;      /* WATCH: the value matched, the fence did not */
    int next;       /* the transaction's next queued command */
    /* 2.0: the value the transaction deleted (malloc'd; freed at the
     * machine's end), to be put back when it was not the one named. */
    char *got;
} relock__break_m;

void relock__break_init(relock__break_m *m, const char *if_value, long long if_fence,
                        const char *breaks_key, const char *chan, const char *okey);
relock__step relock__break_step(void *m, relock_lock *l, const relock__feed *in,
                                relock__batch *out);
/* Frees what a machine stopped before its end still holds. */
void relock__break_free(relock__break_m *m);

#endif
