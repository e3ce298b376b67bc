/*
 * The lock engine (design.md §2.1): every operation is a step machine that
 * does no I/O and reads no clock.  A driver sends the batch it asks for and
 * feeds back the replies (or the fault that ended the batch) with the
 * time; the machine answers with the next batch or its outcome.
 *
 * Replies are hiredis's redisReply, read only (type, integer, str, len,
 * elements, element), so a driver without a hiredis reader (the
 * simulator) can build them.
 */
#ifndef RELOCK_ENGINE_MACHINE_H
#define RELOCK_ENGINE_MACHINE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "relock.h"

/* At most this many arguments per command. */
#define RELOCK__CMD_ARGS 16
/* The commands a batch holds itself: enough for every lock operation, and
 * small (a relock__cmd is some 260 bytes). */
#define RELOCK__BATCH_OWN 8
/* The commands of one batch at most, in an array of the machine's own
 * beyond RELOCK__BATCH_OWN (relock__batch_widen); drivers size what they
 * keep per command by it. */
#define RELOCK__BATCH_CMDS 512
/* Bytes for the arguments a machine formats for one batch (numbers,
 * values); keys and names are pointed at where they live. */
#define RELOCK__BATCH_SCRATCH 512

typedef struct relock__cmd {
    int argc;
    const char *argv[RELOCK__CMD_ARGS];
    size_t len[RELOCK__CMD_ARGS];
} relock__cmd;

/* What a machine asks to be sent, pipelined, on one connection; the
 * replies come back in order.  Valid until the machine's next call.  cmd
 * may point into the batch itself: a batch is reset before use and never
 * copied. */
typedef struct relock__batch {
    relock__cmd *cmd; /* the n commands: own, or the array of relock__batch_widen */
    int n;
    int cap; /* the commands cmd has room for */
    /* The connection is inside WATCH or MULTI after the batch: the driver
     * must not replace it before the next one; losing it is fed back as a
     * fault (design.md §13.3). */
    int in_txn;
    /* The batch must go out on the connection of the lock's last write
     * (WAIT counts the replicas that acknowledged that connection's
     * writes): when it is gone or replaced, the driver sends nothing and
     * feeds back UNSENT with fault_status RELOCK_EDURABILITY. */
    int pinned;
    /* The server may hold the replies this many ms beyond
     * command_timeout_ms (a WAIT's own timeout); 0 for most batches. */
    long long slow_ms;
    char scratch[RELOCK__BATCH_SCRATCH];
    size_t used;
    relock__cmd own[RELOCK__BATCH_OWN];
} relock__batch;

/* How a batch ended, when not every command was answered. */
typedef enum relock__fault {
    RELOCK__FAULT_NONE = 0, /* every command of the batch was answered */
    /* The connection failed before the unanswered commands reached the
     * server (connect refused, write failed): they did not run. */
    RELOCK__FAULT_UNSENT,
    /* The connection failed, or no reply came within command_timeout_ms,
     * after the unanswered commands were sent: they may have run. */
    RELOCK__FAULT_LOST
} relock__fault;

/* The replies to a machine's last batch (fewer than asked only with a
 * fault), and the time they were read. */
typedef struct relock__feed {
    redisReply *const *reply;
    int nreply;
    relock__fault fault;
    relock_status fault_status; /* RELOCK_EIO, RELOCK_ENOMEM, ... with a fault */
    const char *fault_text;     /* the driver's words for it, with the server */
    uint64_t mono_ms;           /* the monotonic clock */
    long long fleet_ms;         /* the fleet's clock (legacy.clock), when asked */
    /* fleet_ms was read afresh for this feed: the local clock, or the
     * server's TIME measured just now, not an estimate from earlier. */
    int fleet_fresh;
} relock__feed;

/* A machine's answer to one call. */
typedef enum relock__step {
    RELOCK__STEP_DONE = 0, /* the outcome is in the machine (status, error) */
    RELOCK__STEP_SEND = 1  /* send *out, then feed back the replies */
} relock__step;

#endif
