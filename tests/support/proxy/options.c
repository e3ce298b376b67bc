/*
 * options: command-line parsing (see options.h).
 */
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"

const char *options_usage(void)
{
    return "usage: relock-compat-proxy --upstream HOST:PORT [--listen PORT]\n"
           "           [--personality 2.0|2.2|2.4|2.6.0..2.6.11|7|valkey-8.1|\n"
           "                          valkey-9.0|redis-8.4]\n"
           "           [--delay-ms N] [--delay-us N] [--close-before-reply P]\n"
           "           [--close-after-reply P] [--seed S] [--no-lua]\n"
           "Listens on 127.0.0.1, prints \"port N\" once listening, and relays to the\n"
           "Redis server at HOST:PORT while answering as the chosen old version.\n"
           "See docs/proxy.md.\n";
}

static int parse_port(const char *s, int allow_zero, int *out)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || end == NULL || *end != '\0' || errno != 0 ||
        v < (allow_zero ? 0 : 1) || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

/* HOST:PORT, or [IPv6]:PORT. */
static int parse_upstream(const char *s, proxy_options *o, char *why, size_t whylen)
{
    const char *colon;
    const char *host = s;
    size_t hostlen;
    int port;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':') {
            snprintf(why, whylen, "'%s' is not HOST:PORT", s);
            return -1;
        }
        host = s + 1;
        hostlen = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL) {
            snprintf(why, whylen, "'%s' is not HOST:PORT", s);
            return -1;
        }
        hostlen = (size_t)(colon - s);
    }
    if (hostlen == 0 || hostlen >= sizeof(o->upstream_host)) {
        snprintf(why, whylen, "'%s': the host is empty or too long", s);
        return -1;
    }
    if (parse_port(colon + 1, 0, &port) < 0) {
        snprintf(why, whylen, "'%s': the port is not a number from 1 to 65535", s);
        return -1;
    }
    memcpy(o->upstream_host, host, hostlen);
    o->upstream_host[hostlen] = '\0';
    snprintf(o->upstream_port, sizeof(o->upstream_port), "%d", port);
    snprintf(o->upstream, sizeof(o->upstream), "%s", s);
    return 0;
}

int options_parse(int argc, char **argv, proxy_options *o, char *err, size_t errlen)
{
    char why[256];
    int have_upstream = 0;
    int i;

    memset(o, 0, sizeof(o[0]));
    o->seed = 1;
    if (personality_parse("7", &o->pers, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "--personality: %s", why);
        return -1;
    }
    for (i = 1; i < argc; i++) { /* bounded by argc */
        const char *opt = argv[i];
        const char *val = NULL;
        char name[40];
        const char *eq = strchr(opt, '=');

        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            o->help = 1;
            return 0;
        }
        if (strcmp(opt, "--no-lua") == 0) { /* a switch: takes no value */
            o->no_lua = 1;
            continue;
        }
        if (strncmp(opt, "--", 2) != 0) {
            snprintf(err, errlen, "%s: unexpected argument (options start with --)", opt);
            return -1;
        }
        /* --name=value or --name value */
        if (eq != NULL) {
            size_t nl = (size_t)(eq - opt);

            if (nl >= sizeof(name))
                nl = sizeof(name) - 1;
            memcpy(name, opt, nl);
            name[nl] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", opt);
            if (i + 1 >= argc) {
                snprintf(err, errlen, "%s: missing value", name);
                return -1;
            }
            val = argv[++i];
        }
        if (strcmp(name, "--upstream") == 0) {
            if (parse_upstream(val, o, why, sizeof(why)) < 0)
                goto bad;
            have_upstream = 1;
        } else if (strcmp(name, "--listen") == 0) {
            if (parse_port(val, 1, &o->listen_port) < 0) {
                snprintf(why, sizeof(why), "'%s' is not a port from 0 to 65535", val);
                goto bad;
            }
        } else if (strcmp(name, "--personality") == 0) {
            if (personality_parse(val, &o->pers, why, sizeof(why)) < 0)
                goto bad;
        } else if (strcmp(name, "--delay-ms") == 0) {
            if (faults_parse_delay_ms(val, &o->delay_us, why, sizeof(why)) < 0)
                goto bad;
        } else if (strcmp(name, "--delay-us") == 0) {
            if (faults_parse_delay_us(val, &o->delay_us, why, sizeof(why)) < 0)
                goto bad;
        } else if (strcmp(name, "--close-before-reply") == 0) {
            if (faults_parse_prob(val, &o->p_before, why, sizeof(why)) < 0)
                goto bad;
        } else if (strcmp(name, "--close-after-reply") == 0) {
            if (faults_parse_prob(val, &o->p_after, why, sizeof(why)) < 0)
                goto bad;
        } else if (strcmp(name, "--seed") == 0) {
            if (faults_parse_seed(val, &o->seed, why, sizeof(why)) < 0)
                goto bad;
        } else {
            snprintf(err, errlen, "%s: unknown option (see --help)", name);
            return -1;
        }
        continue;
bad:
        snprintf(err, errlen, "%s: %s", name, why);
        return -1;
    }
    if (!have_upstream) {
        snprintf(err, errlen, "--upstream: missing (HOST:PORT of the real server)");
        return -1;
    }
    return 0;
}
