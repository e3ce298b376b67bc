/*
 * native: the compare-and-set commands of newer servers, carried out on the
 * real (7.0) server behind the proxy, and the switch that takes Lua away.
 *
 *   Valkey 8.1   SET key value IFEQ old [GET] [EX|PX|EXAT|PXAT|KEEPTTL]
 *   Valkey 9.0   the above, and DELIFEQ key value
 *   Redis 8.4    SET ... IFEQ|IFNE (IFDEQ|IFDNE refused, see below),
 *                DELEX key [IFEQ v|IFNE v], DIGEST key
 *
 * Each conditional command becomes one Lua script the real server runs
 * atomically, so another client never sees the compare apart from the
 * write: by EVALSHA once SCRIPT LOAD on the connection has told its SHA-1
 * (as a client that caches its scripts would send it), else by EVAL.  DIGEST becomes a GET whose reply the proxy hashes (XXH3-64, as
 * Redis 8.4), when the proxy was built with xxhash.h.  The digest
 * conditions IFDEQ/IFDNE would need that hash inside the script, which the
 * real server's Lua cannot compute: they are answered with an error of the
 * proxy's own (docs/proxy.md).
 *
 * With Lua switched off (--no-lua, RELOCK-PROXY LUA off) EVAL, EVALSHA,
 * SCRIPT and FUNCTION are unknown commands, as on a Valkey 9.1 started
 * without its Lua engine; the proxy's own scripts still run.
 */
#ifndef RELOCK_PROXY_NATIVE_H
#define RELOCK_PROXY_NATIVE_H

#include <stddef.h>

#include "buf.h"
#include "personality.h"
#include "resp.h"

/* Lua on or off, process-wide (every connection, at once). */
void native_set_lua(int on);
int native_lua_on(void);

/* The personality's native commands on or off, process-wide: off, the
 * proxy answers as personality 7 would (no native command, nothing about
 * them in COMMAND INFO / DOCS); INFO still names the newer server.  Lets a
 * benchmark connect a client that finds no native command to the same
 * proxy process as one that does. */
void native_set_natives(int on);
/* pp->native, or 0 while the native commands are off. */
unsigned native_mask(const personality *pp);

/* Whether the proxy was built with XXH3 (DIGEST). */
int native_have_digest(void);

/* The SHA-1 of the proxy's two scripts on one upstream connection, as the
 * real server returned them to SCRIPT LOAD; "" while not known (then the
 * scripts go as EVAL with their text). */
typedef struct native_shas {
    char set[41];
    char del[41];
} native_shas;

/* Append SCRIPT LOAD of the set script (which 0) or the delete script
 * (which 1).  Returns 0 or -1 (full). */
int native_load_command(pbuf *up, int which);

enum native_plan {
    NATIVE_NONE = 0, /* not a native command: go on as usual */
    NATIVE_SENT,     /* the replacement is in the upstream buffer */
    NATIVE_ERROR     /* answer err locally; nothing is sent */
};

/*
 * Plan a client command for personality pp.  NATIVE_SENT: the command to
 * send upstream was appended to up and *fix says how to rewrite its reply
 * (FIX_DIGEST or FIX_NONE).  NATIVE_ERROR: err holds the error line
 * (without '-' and CRLF) and counter the name to count it under, or "".
 * Returns -1 when up is full.
 */
int native_plan(const personality *pp, const native_shas *shas, const proxy_arg *argv,
                size_t argc, pbuf *up, unsigned *fix, char *err, size_t errlen, char *counter,
                size_t counterlen);

/* Append a command that makes the real server answer with the error line
 * err when it runs (a script returning it).  Returns 0 or -1 (full). */
int native_error_command(pbuf *up, const char *err);

/*
 * Lua switched off: whether argv is refused as an unknown command, with the
 * server's error in err (the modern form, or for an emulated old version
 * the old one) and the counter name in counter.
 */
int native_lua_refused(const personality *pp, const proxy_arg *argv, size_t argc, char *err,
                       size_t errlen, char *counter, size_t counterlen);

/*
 * COMMAND INFO / COMMAND DOCS naming commands the real server does not
 * know but the personality has (or that Lua switched off removes).
 * Returns 0 when the command needs no help.  Otherwise the plan (one
 * letter per name asked for: 'k' asked upstream, 'n' unknown here, or the
 * native command's letter) goes to plan (NUL-terminated), and either the
 * reduced command was appended to up (returns 1) or no name is left for
 * upstream and the whole reply was built in local (returns 2).  -1: full.
 */
int native_command_docs(const personality *pp, const proxy_arg *argv, size_t argc, pbuf *up,
                        char *plan, size_t plancap, pbuf *local);

/* Build the client's reply to a planned COMMAND INFO / DOCS from the
 * upstream reply p..p+n (NULL for a reply built without one).  Returns 1
 * (written to out), 0 (relay unchanged) or -1. */
int native_command_reply(int docs, const char *plan, const char *p, size_t n, pbuf *out);

/* DIGEST: turn the GET reply p..p+n into the digest reply.  Returns 1
 * (written to out), 0 (relay unchanged: nil or an error) or -1. */
int native_digest_reply(const char *p, size_t n, pbuf *out);

#endif
