/*
 * options: the command line of relock-compat-proxy.
 */
#ifndef RELOCK_PROXY_OPTIONS_H
#define RELOCK_PROXY_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "personality.h"

typedef struct proxy_options {
    char upstream_host[256]; /* from --upstream HOST:PORT */
    char upstream_port[8];
    char upstream[300];      /* the whole argument, for messages */
    int listen_port;         /* --listen; 0 = any free port */
    personality pers;        /* --personality; default 7 */
    long long delay_us;      /* --delay-ms or --delay-us, in us: the last wins */
    double p_before;         /* --close-before-reply */
    double p_after;          /* --close-after-reply */
    uint64_t seed;           /* --seed; default 1 */
    int no_lua;              /* --no-lua: EVAL, EVALSHA, SCRIPT, FUNCTION unknown */
    int help;                /* --help was given */
} proxy_options;

/*
 * Parse argv.  Returns 0, or -1 with "<what>: <why>" in err (the caller
 * prefixes the program name and exits 2).
 */
int options_parse(int argc, char **argv, proxy_options *o, char *err, size_t errlen);

/* The usage text. */
const char *options_usage(void);

#endif
