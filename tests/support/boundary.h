/*
 * boundary: what the command-boundary enumerations share (it_boundaries
 * and its parts, one per entry point): the compat proxy's fault at
 * one boundary, the other client that writes there, a look at the key on
 * the real server, and the order in which boundaries and faults are run
 * (in full, or reduced under RELOCK_TEST_REDUCED=1, decision 190).
 *
 * The helpers fail the running cmocka test when the server or the proxy
 * cannot be reached.
 */
#ifndef RELOCK_BOUNDARY_H
#define RELOCK_BOUNDARY_H

#include <pthread.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

/* The faults the proxy applies at boundary k (after the reply to the k-th
 * command counted from the moment it is armed):
 *   LOST_REPLY  command k ran, its reply never arrives (the connection
 *               closes instead);
 *   DEAD_AFTER  the reply arrives, then the connection closes;
 *   WRITE       the reply is held 60 ms while another client writes;
 *   WRITE_DEAD  the same write while the reply is held bnd_write_dead_hold_ms
 *               (300 ms: longer than the blocking client's idle check),
 *               then the connection closes;
 *   ERROR       command k never runs: it is answered -LOADING. */
enum bnd_fault { BND_LOST_REPLY, BND_DEAD_AFTER, BND_WRITE, BND_WRITE_DEAD, BND_ERROR, BND_NFAULTS };
extern const char *const bnd_fault_name[BND_NFAULTS];
/* How long WRITE_DEAD holds the reply before the close: 300 ms, past the
 * blocking client's idle check; a program whose client has no such check
 * may shorten it. */
extern long bnd_write_dead_hold_ms;

/* A command on 127.0.0.1:port (a server, or a proxy's control command),
 * on a connection of its own; the reply is the caller's to free. */
redisReply *bnd_cmd(int port, const char *fmt, ...);
/* bnd_cmd() with two string arguments whose reply must not be an error. */
void bnd_do(int port, const char *fmt, const char *a, const char *b);
/* The replies the proxy relayed since its fault was last set. */
long long bnd_replies(int pport);
/* Arms fault f at boundary k; k 0 with BND_WRITE only resets the count. */
void bnd_arm(int pport, long long k, enum bnd_fault f);
/* Disarms the proxy's faults. */
void bnd_disarm(int pport);
/* The key's value ("" when absent) and the fence counter on the server. */
void bnd_look(int port, const char *key, const char *fkey, char *val, size_t len,
              long long *fence);

/* The other client's value: a wall-clock second far in the future, so a
 * legacy client reads it as a live holder. */
#define BND_OTHER_VALUE "3999999999"

/* What the other client writes: SETNX of a free key (a rival acquire), a
 * compare-and-set of the expired value (a rival takeover), or a plain SET
 * (a new holder, after a break or an expiry).  Each counts the fence when
 * it wins. */
enum bnd_rival { BND_RIVAL_SETNX, BND_RIVAL_TAKEOVER, BND_RIVAL_SET };

typedef struct bnd_other {
    pthread_t thread;
    int port;  /* the real server */
    int pport; /* the proxy whose reply count it waits for */
    long long k;
    enum bnd_rival rival;
    char key[1400];
    char fkey[1400];
    char expired[32];
    int won;   /* its write won (set once the thread is joined) */
    int wrote; /* it wrote at all */
    int ended; /* the operation ended: bnd_other_join() was called */
} bnd_other;

/* Starts the other client: once the proxy relayed k replies it writes (on
 * the server itself, never through the proxy); when the operation ends
 * first (the join, and 200 ms more for replies still on their way; 5 s at
 * most), it writes nothing. */
void bnd_other_start(bnd_other *o, int port, int pport, long long k, enum bnd_rival rival,
                     const char *key, const char *fkey, const char *expired);
void bnd_other_join(bnd_other *o);

/* RELOCK_TEST_REDUCED=1. */
int bnd_reduced(void);

/*
 * Runs run(ctx, k, f) for the boundaries 1..n and the faults that skip
 * does not leave out: every pair, or under bnd_reduced() one fault at each
 * boundary (the kind run least so far, in turn, starting with kind salt)
 * and then each kind not yet run at its first boundary.  Returns the
 * number of runs.
 */
typedef int (*bnd_skip_fn)(void *ctx, long long k, long long n, enum bnd_fault f);
typedef void (*bnd_run_fn)(void *ctx, long long k, enum bnd_fault f);
int bnd_enumerate(long long n, int salt, bnd_skip_fn skipfn, bnd_run_fn run, void *ctx);

#endif
