/*
 * personality: which Redis version the proxy pretends to be, and what that
 * version would have refused.
 *
 * Versions are numbers major*10000 + minor*100 + patch (2.6.11 = 20611).
 * Personality "7" emulates nothing: every command goes to the real server
 * untouched, only the control commands and faults remain.
 */
#ifndef RELOCK_PROXY_PERSONALITY_H
#define RELOCK_PROXY_PERSONALITY_H

#include <stddef.h>

#include "resp.h"

#define PV(maj, min, pat) ((maj) * 10000u + (min) * 100u + (pat))

/* Commands of newer servers the proxy carries out itself (native.h). */
#define PN_SET_IFEQ 0x01u /* SET ... IFEQ (Valkey 8.1, Redis 8.4) */
#define PN_SET_IFNE 0x02u /* SET ... IFNE / IFDEQ / IFDNE (Redis 8.4) */
#define PN_DELIFEQ 0x04u  /* DELIFEQ key value (Valkey 9.0) */
#define PN_DELEX 0x08u    /* DELEX key [IFEQ|IFNE|IFDEQ|IFDNE v] (Redis 8.4) */
#define PN_DIGEST 0x10u   /* DIGEST key (Redis 8.4) */

typedef struct personality {
    char name[16];        /* as given on the command line, e.g. "2.6.11" */
    unsigned version;     /* emulated version; PV(7,0,0) means "modern" */
    char version_str[16]; /* what INFO reports; empty = keep the real one */
    unsigned native;      /* PN_* commands answered as the newer server does */
    char server_name[16]; /* INFO server_name line to add ("valkey"), or "" */
    char valkey_version[16]; /* INFO valkey_version line to add, or "" */
} personality;

/* Parse "2.0", "2.2", "2.4", "2.6.0" .. "2.6.11", "7", "valkey-8.1",
 * "valkey-9.0" or "redis-8.4".  Returns 0, or -1
 * with the reason in why. */
int personality_parse(const char *s, personality *out, char *why, size_t whylen);

/* True when the proxy changes anything at all for this personality. */
int personality_emulates(const personality *pp);

/* What the old server would have done with a command before running it. */
typedef struct gate_result {
    char err[320];    /* the error reply text, without '-' and CRLF */
    char counter[64]; /* the name the refusal is counted under */
} gate_result;

/*
 * Decide whether the emulated version refuses argv outright: an unknown
 * command, an unknown subcommand, or arguments (options) the version did
 * not take.  Returns 1 and fills r when refused, 0 when the command is to
 * be forwarded (possibly rewritten elsewhere).
 */
int personality_gate(const personality *pp, const proxy_arg *argv, size_t argc,
                     gate_result *r);

#endif
