/*
 * The engine's shared parts (design.md §2.1): the head every step machine
 * starts with, building the batch a machine sends, checking the replies it
 * gets, the EVALSHA-then-EVAL transition.
 *
 * Nothing here does I/O, and nothing reads a clock or draws randomness: a
 * machine written with these helpers behaves the same under every driver,
 * the simulator's included.
 */
#ifndef RELOCK_ENGINE_ENGINE_H
#define RELOCK_ENGINE_ENGINE_H

#include "handle.h"
#include "machine.h"

/* ------------------------------------------------------------------ machines */

/*
 * The first member of every machine.  A machine is started by zeroing it
 * (and setting its own inputs); the driver reads the head, never the rest.
 */
typedef struct relock__mhead {
    int pc;           /* where the machine is; 0 = not started */
    relock_status st; /* the outcome, once DONE */
    long hint_ms;     /* acquire attempt BUSY: holder's remaining ms, or -1 */
    /* The connection is inside WATCH/MULTI now: set from the batch last
     * sent (relock__send); a machine that ends with it set left a
     * transaction open, and the driver (the operation core) then closes
     * the connection, which discards it. */
    int in_txn;
    /* The next feed must carry fleet_ms (the fleet's clock, legacy.clock):
     * the driver reads it just before it calls the machine.  Set before
     * the first call for the first feed.  A failure to read it is fed as
     * a fault UNSENT (after the batch's replies, if any; a batch that
     * failed is fed its own fault, without the clock).  A batch may be
     * empty (no command): the feed then brings only the times. */
    int want_fleet;
    /* The machine met a value only a legacy client can have written: the
     * driver writes the marker `relock scan` reads after the machine ends
     * (src/core/operation.c).  Informational: a failure is nobody's. */
    int note_legacy;
} relock__mhead;

/* mhead.want_fleet: the server's clock must be read afresh (TIME now,
 * whatever the estimate), as a takeover needs (feed.fleet_fresh). */
#define RELOCK__FLEET_FRESH 2

/* A machine's step function (docs/architecture.md).  The first call has
 * in->nreply == 0, no fault, and the times; each later call has the
 * replies to the batch the previous call filled.  Returns
 * RELOCK__STEP_SEND with *out filled (relock__send), or RELOCK__STEP_DONE
 * with the head's st set and any error recorded on l->c->err
 * (relock__done). */
typedef relock__step (*relock__step_fn)(void *m, relock_lock *l, const relock__feed *in,
                                        relock__batch *out);

/* Ends the machine with st (its error, if any, already recorded). */
relock__step relock__done(relock__mhead *h, relock_status st);
/* The batch in *out is ready to send: records out->in_txn in the head. */
relock__step relock__send(relock__mhead *h, const relock__batch *out);
/* A machine that has not ended after this many batches is stopped with
 * RELOCK_EPROTO by the operation core: every machine ends in a few, so it
 * is a machine's bug. */
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
 * Appends a command of argc words (NUL-terminated; the words are pointed
 * at, so they must live until the batch is sent: literals, the lock's key
 * and value, the client's script SHA-1s, or text from relock__batch_fmt).
 * Returns the command's index in the batch, or -1 when the batch or the
 * command is too large, which also marks the batch so that a driver
 * refuses it (relock__batch_ok): a machine's fault, caught by its tests.
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
 * The empty batch b holds its commands in cmd (cap of them, at most
 * RELOCK__BATCH_CMDS) until the next reset: for a machine that pipelines
 * more commands than a batch holds itself (the scan reads a couple of
 * hundred keys at once).  cmd belongs to the machine and lives as long as
 * the batch is in flight.  A machine that asks for the fleet's clock
 * (want_fleet) sends no wide batch: the asynchronous driver keeps the
 * replies waiting for the clock in RELOCK__BATCH_OWN places.  A bad call
 * marks the batch (relock__batch_ok).
 */
void relock__batch_widen(relock__batch *b, relock__cmd *cmd, int cap);

/* ------------------------------------------------------------------ replies */

/*
 * Checks a reply's shape against shape, a short description:
 *   one or more letters, the types allowed at the top:
 *     s status, b bulk string, i integer, n nil, a array, e error reply,
 *     ? any type;
 *   after 'a', optionally "[...]": one letter (or a group of letters in
 *   parentheses, any of them) per leading element the array must have,
 *   and '$' before ']' when it must have no more.
 * Examples: "bn" (GET), "i", "na[si$]" (EXEC of MULTI, SET, INCR),
 * "a[ii]" (at least two integers), "a[(in)b]".
 * An error reply that shape does not allow is recorded as the server's
 * error (RELOCK_EPROTO, or RELOCK_EFOREIGN for WRONGTYPE), any other
 * mismatch as "WHAT on HOST:PORT: unexpected T reply" (RELOCK_EPROTO),
 * both on c->err as RELOCK__BAD_REPLY does.  A NULL reply never matches.
 * Returns RELOCK_OK or the status recorded.
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
 * (kept if an error is recorded already: the first is the most precise)
 * and returns its status. */
relock_status relock__fault_fail(relock_client *c, const relock__feed *in);
/* Records RELOCK_EPROTO for a reply of an unexpected type or an error
 * reply, naming the command. */
relock_status relock__bad_reply(relock_client *c, const char *file, int line, const char *what,
                                const redisReply *r);
#define RELOCK__BAD_REPLY(c, what, r) relock__bad_reply((c), __FILE__, __LINE__, (what), (r))
/* Whether a server's error text says "not now" rather than "never": a
 * restarted server loading its data (LOADING), one busy in a long script
 * (BUSY), a replica cut off from its master (MASTERDOWN), a Cluster slot
 * moving (TRYAGAIN).  Such a reply tells nothing about what the server
 * can do. */
int relock__reply_transient(const char *text);

/* ------------------------------------------------------------------ scripts */

/*
 * Appends a script call: EVALSHA of the script's SHA-1 (c->sha[id]), or
 * with by_eval the script's text by EVAL, with nkeys keys first among the
 * nargs arguments.  Returns the command's index, or -1 as
 * relock__batch_add.
 */
int relock__batch_script(relock__batch *b, const relock_client *c, int id, int nkeys, int nargs,
                         const char *const *args, int by_eval);
/*
 * The EVALSHA-then-EVAL transition, called with the feed of a batch whose
 * command idx was a script call: when its reply is a NOSCRIPT error and
 * the call was by EVALSHA (*by_eval 0), sets *by_eval and returns 1: the
 * machine sends the same call again (now by EVAL) and stays where it is.
 * Returns 0 otherwise (the reply is the script's, or an error to judge).
 */
int relock__script_again(const relock__feed *in, int idx, int *by_eval);

#endif
