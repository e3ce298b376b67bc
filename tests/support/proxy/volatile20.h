/*
 * volatile20: Redis 2.0's treatment of keys that carry an expiry.
 *
 * Before 2.2, a write looked its key up with lookupKeyWrite(), which
 * deleted the key first if it had an expiry ("volatile keys count as
 * absent for writes"): SETNX on a volatile key answers 1 and overwrites it,
 * INCR on a volatile counter starts again from 0, LPUSH on a volatile list
 * starts a new list without a TTL.  And EXPIRE refused to touch a key that
 * already had an expiry (answer 0, TTL unchanged).
 *
 * The upstream is a modern server, so the proxy rewrites these commands
 * into a Lua script that first deletes the volatile keys and then runs the
 * original command, atomically.  Blocking pops cannot run inside a script:
 * for them a separate purge script is sent just before the command (see
 * vol20_plan).
 */
#ifndef RELOCK_PROXY_VOLATILE20_H
#define RELOCK_PROXY_VOLATILE20_H

#include <stddef.h>

#include "buf.h"
#include "resp.h"

enum vol20_kind {
    VOL20_NONE = 0, /* forward unchanged */
    VOL20_WRAP,     /* replace by the atomic purge-then-run script */
    VOL20_EXPIRE,   /* replace by the 2.0 EXPIRE / EXPIREAT script */
    VOL20_PREAMBLE  /* send the purge script, then the command itself */
};

/* How a command must be sent to emulate 2.0.  Commands with a word count
 * the 2.0 command did not take are left alone (VOL20_NONE): the real server
 * then answers with the same arity error. */
enum vol20_kind vol20_plan(const proxy_arg *argv, size_t argc);

/* Append the replacement command (VOL20_WRAP, VOL20_EXPIRE) or the purge
 * preamble (VOL20_PREAMBLE) for argv to out.  Returns 0 or -1 (full). */
int vol20_encode(enum vol20_kind kind, const proxy_arg *argv, size_t argc,
                 pbuf *out);

#endif
