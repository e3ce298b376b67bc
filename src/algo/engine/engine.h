/*
 * The engine's shared parts (design.md §2.1).  Nothing here does I/O, reads
 * a clock or draws randomness: a machine written with these helpers behaves
 * the same under every driver, the simulator's included.
 */
#ifndef RELOCK_ENGINE_ENGINE_H
#define RELOCK_ENGINE_ENGINE_H

#include "handle.h"
#include "machine.h"

/* ------------------------------------------------------------------ machines */

/* The first member of every machine, started by zeroing it (and setting
 * its inputs); the driver reads the head, never the rest. */
typedef struct relock__mhead {
    int pc;           /* where the machine is; 0 = not started */
    relock_status st; /* the outcome, once DONE */
    long hint_ms;     /* acquire attempt BUSY: holder's remaining ms, or -1 */
    /* The connection is inside WATCH/MULTI now (from the batch last sent);
     * a machine that ends with it set left a transaction open, and the
     * driver closes the connection, which discards it. */
    int in_txn;
    /* The next feed must carry fleet_ms (the fleet's clock, legacy.clock),
     * read just before the call (set before the first call for the first
     * feed).  A failure to read it is fed as a fault UNSENT after the
     * batch's replies; a failed batch is fed its own fault.  The batch may
     * be empty: the feed then brings only the times. */
    int want_fleet;
    /* The machine met a value only a legacy client can have written: the
     * driver writes the marker `relock scan` reads (src/core/operation.c);
     * a failure to write it is nobody's. */
    int note_legacy;
} relock__mhead;

/* mhead.want_fleet: the server's clock must be read afresh (TIME now,
 * whatever the estimate), as a takeover needs (feed.fleet_fresh). */
#define RELOCK__FLEET_FRESH 2

/* A machine's step function (docs/architecture.md).  The first call has
 * no reply, no fault, and the times; each later one the replies to the
 * batch the previous call filled.  Returns RELOCK__STEP_SEND with *out
 * filled, or RELOCK__STEP_DONE with the head's st set and any error on
 * l->c->err. */
typedef relock__step (*relock__step_fn)(void *m, relock_lock *l, const relock__feed *in,
                                        relock__batch *out);

/* Ends the machine with st (its error, if any, already recorded). */
relock__step relock__done(relock__mhead *h, relock_status st);
/* The batch in *out is ready to send: records out->in_txn in the head. */
relock__step relock__send(relock__mhead *h, const relock__batch *out);
/* A machine not ended after this many batches is stopped with
 * RELOCK_EPROTO: every machine ends in a few, so it is a machine's bug. */
#define RELOCK__DRIVE_MAX_STEPS 256
/* Marks the batch in *out inside a transaction or not (in_txn), moves the
 * machine to pc and sends it. */
relock__step relock__send_at(relock__mhead *h, relock__batch *out, int pc, int in_txn);
/* relock__send_at() of a batch reset to one command of the argc words
 * that follow. */
relock__step relock__send_words(relock__mhead *h, relock__batch *out, int pc, int in_txn,
                                int argc, ...);

/* ------------------------------------------------------------------ batches */

void relock__batch_reset(relock__batch *b);
/*
 * Appends a command of argc NUL-terminated words, pointed at: they must
 * live until the batch is sent (literals, the lock's strings, the script
 * SHA-1s, relock__batch_fmt's text).  Returns the command's index, or -1
 * when the batch or the command is too large, which also marks the batch
 * for the driver to refuse (relock__batch_ok): a machine's fault.
 */
int relock__batch_add(relock__batch *b, int argc, const char *const *argv);
/* Formats text into the batch's scratch space and returns it, valid as
 * long as the batch is; NULL (and the batch marked) when it does not fit. */
const char *relock__batch_fmt(relock__batch *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A decimal number in the scratch space (relock__batch_fmt). */
const char *relock__batch_num(relock__batch *b, long long v);
/* relock__batch_add() with the argc words as arguments. */
int relock__batch_words(relock__batch *b, int argc, ...);
/* Whether the batch was built without overflowing. */
int relock__batch_ok(const relock__batch *b);
/*
 * The empty batch b holds its commands in the machine's cmd (cap of them,
 * at most RELOCK__BATCH_CMDS) until the next reset, for a machine that
 * pipelines more than a batch holds (the scan).  cmd lives as long as the
 * batch is in flight.  A wide batch never asks for the fleet's clock: the
 * asynchronous driver keeps replies waiting for it in RELOCK__BATCH_OWN
 * places.  A bad call marks the batch.
 */
void relock__batch_widen(relock__batch *b, relock__cmd *cmd, int cap);

/* ------------------------------------------------------------------ replies */

/*
 * Checks a reply against shape: the letters of the types allowed at the
 * top (s status, b bulk string, i integer, n nil, a array, e error, ? any);
 * after 'a', optionally "[...]": one letter, or a group in parentheses,
 * per leading element the array must have, and '$' before ']' when it
 * must have no more.  Examples: "bn" (GET), "na[si$]" (EXEC of MULTI, SET,
 * INCR), "a[(in)b]".  A NULL reply never matches; a mismatch is recorded
 * on c->err as RELOCK__BAD_REPLY does.  Returns RELOCK_OK or its status.
 */
relock_status relock__reply_check_at(relock_client *c, const char *file, int line,
                                     const redisReply *r, const char *shape, const char *what);
#define relock__reply_check(c, r, shape, what)                                              \
    relock__reply_check_at((c), __FILE__, __LINE__, (r), (shape), (what))
/* Whether r matches shape, recording nothing. */
int relock__reply_is(const redisReply *r, const char *shape);
/* Element i of an array reply as an integer: 0 when absent or not one. */
long long relock__reply_elem_int(const redisReply *r, size_t i);

/* A fault ended the batch: records the driver's words for it on c->err
 * (unless an error, the more precise, is there) and returns its status. */
relock_status relock__fault_fail(relock_client *c, const relock__feed *in);
/* Records a reply of an unexpected type or an error reply, naming the
 * command: RELOCK_EPROTO, or RELOCK_EFOREIGN for a WRONGTYPE error. */
relock_status relock__bad_reply(relock_client *c, const char *file, int line, const char *what,
                                const redisReply *r);
#define RELOCK__BAD_REPLY(c, what, r) relock__bad_reply((c), __FILE__, __LINE__, (what), (r))
/* Whether a server's error says "not now" (LOADING, BUSY, MASTERDOWN,
 * TRYAGAIN) rather than "never": it tells nothing of what the server can
 * do. */
int relock__reply_transient(const char *text);

/* ------------------------------------------------------------------ scripts */

/* Appends EVALSHA of script id (or with by_eval EVAL of its text) with
 * nkeys keys first among nargs arguments; returns as relock__batch_add. */
int relock__batch_script(relock__batch *b, const relock_client *c, int id, int nkeys, int nargs,
                         const char *const *args, int by_eval);
/* Called with the feed of a batch whose command idx was a script call:
 * when it answered NOSCRIPT to EVALSHA, sets *by_eval and returns 1 (the
 * machine sends the call again by EVAL); else 0, the reply to judge. */
int relock__script_again(const relock__feed *in, int idx, int *by_eval);

#endif
