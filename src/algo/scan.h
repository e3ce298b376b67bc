/*
 * The migration audit's step machine (scan.c), run by the operation
 * core's scan (src/core/scan.c) under both APIs.  A run is at most
 * RELOCK__SCAN_RUN_STEPS batches, below any driver's bound on one run;
 * it ends with RELOCK_OK, and next says what the driver does before the
 * next run: run on (MORE), walk Cluster master node (NODE), route to key
 * (KEY: the markers live in their own slots), or nothing (END: the
 * result is whole).
 */
#ifndef RELOCK_SCAN_H
#define RELOCK_SCAN_H

#include "engine/engine.h"

#define RELOCK__SCAN_RUN_STEPS 200
/* The keys one wide batch reads (GET and TTL each), with the next page's
 * SCAN after them: a whole page of COUNT 200, so that a round trip reads
 * a page, not a few keys. */
#define RELOCK__SCAN_READS 255
/* The Cluster masters one walk covers, at most. */
#define RELOCK__SCAN_MASTERS 64

/* The lock families scan names (family_of): the fixed ones and one per
 * peer profile (peers.c), with room to spare. */
#define RELOCK__SCAN_FAMILIES 32

/* The counters by the class of relock_scan_counter, and every string
 * whole (allocated at its length). */
struct relock_scan_result {
    long long examined, legacy, bridge, modern, stale, unknown, skipped, other_types, gone;
    char *legacy_example; /* NULL: none */
    size_t legacy_example_len;
    char marker_key[RELOCK__PREFIX_MAX + 32], watch_key[RELOCK__PREFIX_MAX + 32];
    long long legacy_seen_ms, watching_since_ms, now_ms, quiet_window_ms;
    char *match;
    int marker_unreadable, keys_fallback, complete, cluster_masters;
    relock_scan_verdict verdict;
    char *verdict_text; /* NULL: no verdict (an error) */
    int nomem;          /* an allocation failed during the walk */
    long long sig[RELOCK_SIG_COUNT];
    /* The families met (family_of): keys, and the first key's name. */
    long long fam_keys[RELOCK__SCAN_FAMILIES];
    char *fam_example[RELOCK__SCAN_FAMILIES];
    char *families_text;
};

typedef enum {
    RELOCK__SCAN_END, RELOCK__SCAN_MORE, RELOCK__SCAN_NODE, RELOCK__SCAN_KEY
} relock__scan_next;

typedef struct relock__scan_m {
    relock__mhead h;
    relock_scan_result *out;
    relock_scan_key_fn fn;
    void *arg;
    /* The wall clock at mono0 (the driver reads both once): the machine
     * reads no clock, a feed's monotonic time tells it now. */
    long long wall0;
    uint64_t mono0;
    relock__scan_next next;
    const char *route; /* KEY: the key */
    /* NODE: master node (0 .. masters - 1; masters 0: one server); with
     * discover the machine asks CLUSTER SLOTS first, and keeps in addr
     * the masters in the order it lists them */
    int node, masters, discover;
    struct relock__scan_addr {
        char host[RELOCK__HOST_MAX];
        int port;
    } addr[RELOCK__SCAN_MASTERS];
    int stage, steps, last;
    long calls;
    char cursor[32];
    /* The key list of the last SCAN or KEYS, copied (a reply lives for
     * one step), and the keys of the batch in flight; ahead: the next
     * page's SCAN follows them in the batch.  typed: the keys whose TYPE
     * is asked next, taken from the key list (the next page may have
     * replaced it). */
    struct relock__scan_key {
        char *s;
        size_t len;
    } *key, typed[RELOCK__SCAN_READS];
    size_t nkeys, at, sent[RELOCK__SCAN_READS], nsent, ntyped;
    int ahead;
    relock__cmd *wide; /* the batches' commands (relock__batch_widen) */
} relock__scan_m;

/*
 * Starts a walk into out (zeroed) of match (NULL: key_prefix + "*"),
 * filling what the result tells before any command.  masters: the Cluster
 * masters the driver walks, or discover 1 for the machine to ask.
 * RELOCK_OK, or the failure recorded on c->err.
 */
relock_status relock__scan_init(relock__scan_m *m, relock_client *c, const char *match,
                                relock_scan_key_fn fn, void *arg, relock_scan_result *out,
                                int masters, int discover, long long wall_ms, uint64_t mono_ms);
relock__step relock__scan_step(void *m, relock_lock *l, const relock__feed *in,
                               relock__batch *out);
/* The walk ended with st: frees the machine's memory; a failed walk's
 * result is incomplete.  Returns st, or RELOCK_ENOMEM when the result
 * lacks something for want of memory. */
relock_status relock__scan_end(relock__scan_m *m, relock_client *c, relock_status st);

#endif
