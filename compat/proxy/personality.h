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

typedef struct personality {
    char name[16];        /* as given on the command line, e.g. "2.6.11" */
    unsigned version;     /* emulated version; PV(7,0,0) means "modern" */
    char version_str[16]; /* what INFO reports; empty = keep the real one */
} personality;

/* Parse "2.0", "2.2", "2.4", "2.6.0" .. "2.6.11" or "7".  Returns 0, or -1
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
