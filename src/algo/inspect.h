/* relock_inspect()'s step machine: one batch of reads of a lock (inspect.c). */
#ifndef RELOCK_INSPECT_H
#define RELOCK_INSPECT_H

#include "engine/engine.h"

/* The result behind relock_inspect_info (opaque to users).  Every string
 * is whole: copied at its length, never cut. */
struct relock_inspect_info {
    relock_value_kind kind;
    char *value; /* NULL when absent */
    size_t value_len;
    long long pttl_ms;
    long long ts_ms;
    int ts_unit_ms;
    long long fence;
    char *owner; /* NULL when none */
    char *key;   /* the Redis key read (key_prefix + name); NULL when unknown */
    long long waiters; /* subscribers of the release channel; -1 unknown */
};

/*
 * Runs on a handle naming the key (l->name, l->key, l->fence_key); okey is
 * the owner record's key or "".  Fills *info; RELOCK_OK, or a failure
 * (RELOCK_EFOREIGN for a key of another type: the caller names the type).
 */
typedef struct relock__inspect_m {
    relock__mhead h;
    const char *okey;
    relock_inspect_info *info;
} relock__inspect_m;

void relock__inspect_init(relock__inspect_m *m, const char *okey, relock_inspect_info *info);
relock__step relock__inspect_step(void *m, relock_lock *l, const relock__feed *in,
                                  relock__batch *out);

#endif
