/*
 * The timestamp algorithms (legacy and bridge modes, design.md §5.1-5.2) as step
 * machines of the lock engine (src/algo/engine/engine.h): no I/O, no clock, no
 * randomness.  Private to compat/; the unit tests feed them by hand.
 *
 * Batches.  Reads that cannot change anything go out together (WATCH with
 * its GETs; GET of the key with the break counter).  A transaction is sent
 * as three batches, MULTI, the queued commands (each must answer +QUEUED),
 * EXEC: a refused MULTI would leave the queued writes to run at once, and
 * before 2.6 a refused queued command does not abort the transaction
 * (docs/design.md §3.4).  A machine that fails between WATCH (or MULTI)
 * and EXEC ends inside the transaction: the driver closes the connection,
 * which discards it (a refused EXEC is followed by DISCARD, cas.c).  Only
 * a fault on the batch holding EXEC (or the script) can leave a write
 * behind: that is where RELOCK_EAMBIGUOUS comes from.
 */
#ifndef RELOCK_COMPAT_TS_H
#define RELOCK_COMPAT_TS_H

#include "cas.h"
#include "engine/engine.h"

/* How the server lets us make a step atomic: the probed capabilities of
 * the connection, read when the machine starts. */
typedef enum { RELOCK__TS_EVAL, RELOCK__TS_WATCH, RELOCK__TS_PLAIN } relock__ts_path;

/* ------------------------------------------------------------ the operations */

/*
 * One acquire attempt (relock__algo.attempt).  With bridge.value_suffix,
 * l->value holds a fresh token (32 hex characters) that the value written
 * carries.  The first feed carries the times: start (mono_ms) and now
 * (fleet_ms) plan the lease.
 *
 *   EVAL   the SETNX script                        [A_SCRIPT]
 *          -> lost reply: GET key (read-back)       [A_READBACK]
 *   WATCH  compare-and-set from absent              [A_SETNX_CAS]
 *   PLAIN  first attempt: fenced SETNX              [A_SETNX_FW]
 *            -> 0: GET key                         [A_GET]
 *            -> lost EXEC: GET key (read-back)     [A_READBACK]
 *          later attempts (l->looked): GET key      [A_LOOK]
 *            -> absent: fenced SETNX                [A_SETNX_FW]
 *            -> live value: BUSY, nothing written
 *   held:  a live value: BUSY with the holder's remaining time in
 *          head.hint_ms; an expired one: take it over, by
 *          compare-and-set from that value (EVAL, WATCH) [A_TAKE_CAS]
 *          or by fenced GETSET (PLAIN)                   [A_TAKE_GETSET],
 *          won only if the old value had itself expired.  With
 *          legacy.clock = "server", "expired" is judged again, and the
 *          lease planned anew, on TIME read after the value [A_FRESH].
 *
 * An attempt that ends BUSY sets l->looked, so that on 2.0 a waiter's
 * next attempts read before they write: a fenced SETNX moves the fence
 * even when it fails, and would otherwise move it at every poll.
 */
typedef struct relock__ts_acquire {
    relock__mhead head;
    relock__ts_path path;
    uint64_t start;
    long long now;
    int fresh;     /* now was read after the value found (a takeover rests on it) */
    long long pttl; /* A_FRESH: the expired value's PTTL, judged again */
    char tok[33];  /* the caller's token (bridge suffix), for a new plan */
    relock__lease ls;
    int by_eval;
    relock_status io_st; /* the fault that sent us to the read-back */
    char old[RELOCK__VALUE_MAX];
    relock__cas cas; /* the write: a compare-and-set or 2.0's fenced write */
} relock__ts_acquire;

relock__step relock__ts_acquire_step(void *m, relock_lock *l, const relock__feed *in,
                                     relock__batch *out);

/*
 * Release (newv unset) or extend (relock__algo.release, .extend).  An
 * extend asks for the fleet's clock: it plans a new lease from the first
 * feed's times; with bridge.value_suffix, tok holds a fresh token for the
 * new value.
 *
 *   EVAL, WATCH  compare-and-delete / -set of our value and fence [U_CAS],
 *                following a GETSET loser's write once, under the fence;
 *                a beaten WATCH looks again, four rounds in all.
 *   PLAIN        (extend: only while our validity remains)
 *                GET key; [GET breaks]; [GET fence]                [U_READ]
 *                release: DEL key while our validity remains       [U_DEL]
 *                         then PUBLISH, best effort                [U_PUBLISH]
 *                extend:  GETSET key newv                          [U_GETSET]
 */
typedef struct relock__ts_update {
    relock__mhead head;
    int extend;
    long long ttl_ms;
    char tok[33];
    const char *op; /* "release" or "extend" */
    relock__ts_path path;
    uint64_t start;
    relock__lease ls;
    char newv[RELOCK__VALUE_MAX];
    char expected[RELOCK__VALUE_MAX];
    int following;
    int round;
    char bkey[RELOCK__KEY_MAX];
    int read_breaks;
    int read_epoch; /* the fence counter read too: its epoch counts breaks */
    char chan[RELOCK__KEY_MAX];
    relock__cas cas;
} relock__ts_update;

relock__step relock__ts_update_step(void *m, relock_lock *l, const relock__feed *in,
                                    relock__batch *out);

/* Adopt: no command; from the first feed's times, the validity a lock
 * adopted from its timestamp value can claim.  Start with
 * relock__ts_adopt_init. */
typedef struct relock__ts_adopt {
    relock__mhead head;
} relock__ts_adopt;

relock__step relock__ts_adopt_step(void *m, relock_lock *l, const relock__feed *in,
                                   relock__batch *out);
void relock__ts_adopt_init(relock__ts_adopt *m);

#endif
