/*
 * The lock formats of the classic libraries fleets run beside relock
 * (legacy.peer, docs/legacy.md "Peers"): the unit and kind of the values
 * each writes, how it compares one with its clock, what it adds to now +
 * timeout, and its keys.  They fill in the legacy settings and key_prefix
 * the configuration does not give.
 */
#include <stdio.h>
#include <string.h>

#include "base.h"

/* Read from each library's own code (its facts: docs/legacy.md).  The
 * last field: its parser fails on "V:token" (bridge.value_suffix).  Ruby's
 * to_i and to_f and JavaScript's parseFloat read the leading number, .NET's
 * TryParse none (the bridge key's TTL ends it); Java's Long.parseLong and
 * Python's float() throw. */
static const relock__peer profiles[] = {
    {"classic", "classic SETNX/GETSET", 0, 0, 0, 1, "{name}", 0},
    {"resque-lock-timeout", "resque-lock-timeout", 0, 0, 0, 0, "resque:lock:{name}", 0},
    {"redis-mutex", "redis-mutex", 0, 1, 1, 0, "RedisMutex:{name}", 0},
    {"redis-objects", "redis-objects", 0, 1, 1, 1, "{name}_lock", 0},
    {"redis-py-2", "redis-py < 2.10", 0, 1, 2, 0, "{name}", 1},
    {"jedis-lock", "jedis-lock", 1, 0, 0, 1, "{name}", 1},
    {"servicestack", "ServiceStack.Redis", 1, 0, 1, 1, "{name}", 0},
    {"redis-lock-js", "npm redis-lock 0.0.x", 1, 0, 1, 1, "lock.{name}", 0},
};

#define NPROFILES ((int)(sizeof profiles / sizeof profiles[0]))

int relock__peer_count(void)
{
    return NPROFILES;
}

const relock__peer *relock__peer_at(int i)
{
    return i >= 0 && i < NPROFILES ? &profiles[i] : NULL;
}

int relock__peer_find(const char *name, size_t len)
{
    for (int i = 0; i < NPROFILES; i++)
        if (strlen(profiles[i].name) == len && strncmp(profiles[i].name, name, len) == 0)
            return i;
    return -1;
}

void relock__peer_names(char *out, size_t len)
{
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < NPROFILES && n >= 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - (size_t)n, "%s\"%s\"", i ? ", " : "", profiles[i].name);
}

/* The length of the key prefix p implies: its template's part before
 * "{name}", which every template holds. */
static size_t template_prefix(const relock__peer *p)
{
    return (size_t)(strstr(p->key_template, "{name}") - p->key_template);
}

static const char *const reader_words[] = {"whole", "fractional", "both"};

int relock__peers_apply(relock__settings *s, char *why, size_t whylen)
{
    struct {
        int unit_ms, frac_values, readers;
        long offset;
    } want = {0, 1, 0, 0};
    const relock__peer *first = NULL;
    int same_prefix = 1;
    for (int i = 0; i < s->legacy.npeers; i++) {
        const relock__peer *p = &profiles[s->legacy.peers[i]]; /* relock__peer_find()'s */
        if (first && p->unit_ms != first->unit_ms)
            return relock__reason(why, whylen,
                                  "legacy.peer: \"%s\" writes %s and \"%s\" %s: clients that share "
                                  "lock keys must share a unit",
                                  first->name, first->unit_ms ? "milliseconds" : "seconds", p->name,
                                  p->unit_ms ? "milliseconds" : "seconds");
        size_t plen = template_prefix(p);
        if (first && (plen != template_prefix(first) ||
                      strncmp(p->key_template, first->key_template, plen) != 0))
            same_prefix = 0;
        first = first ? first : p;
        want.unit_ms = p->unit_ms;
        /* Fractions only where every peer parses them (a Java parseLong
         * throws on "1795812032.473"). */
        want.frac_values &= p->frac_values;
        want.readers |= (p->frac_reader ? RELOCK__READER_FRAC : 0) |
                        (p->frac_reader != 1 ? RELOCK__READER_WHOLE : 0);
        if (p->offset > want.offset)
            want.offset = p->offset;
        if (p->suffix_fails && s->bridge.value_suffix)
            return relock__reason(why, whylen,
                                  "bridge.value_suffix: \"%s\" parses lock values with a parser "
                                  "that fails on \"V:token\" (leave the suffix off)",
                                  p->name);
    }
    /* With no profile, the settings given (or defaults) describe the fleet. */
    if (first) {
        unsigned set = s->legacy.set;
        int have = s->legacy.reader_clock + 1;
        if (!(set & RELOCK__SET_UNIT))
            s->legacy.unit_ms = want.unit_ms;
        else if (s->legacy.unit_ms != want.unit_ms)
            return relock__reason(why, whylen,
                                  "legacy.clock_unit = \"%s\" contradicts legacy.peer \"%s\", "
                                  "which writes %s",
                                  s->legacy.unit_ms ? "ms" : "s", first->name,
                                  want.unit_ms ? "milliseconds" : "seconds");
        if (!(set & RELOCK__SET_OFFSET))
            s->legacy.expiry_offset = want.offset;
        if (!(set & RELOCK__SET_VALUES))
            s->legacy.frac_values = want.frac_values;
        else if (s->legacy.frac_values && !want.frac_values)
            return relock__reason(why, whylen,
                                  "legacy.values = \"fractional\": a peer of legacy.peer parses "
                                  "whole numbers only (use \"integer\")");
        if (!(set & RELOCK__SET_READER))
            s->legacy.reader_clock = want.readers - 1;
        else if ((have & want.readers) != want.readers)
            return relock__reason(why, whylen,
                                  "legacy.reader_clock = \"%s\" leaves out a peer of legacy.peer, "
                                  "whose clock compares %s (use \"%s\")",
                                  reader_words[s->legacy.reader_clock],
                                  (want.readers & ~have) & RELOCK__READER_FRAC ? "fractions"
                                                                                : "whole units",
                                  reader_words[(have | want.readers) - 1]);
        /* A prefix not given is the peers' common one, or none. */
        if (!(set & RELOCK__SET_PREFIX))
            snprintf(s->key_prefix, sizeof s->key_prefix, "%.*s",
                     same_prefix ? (int)template_prefix(first) : 0, first->key_template);
    }
    s->legacy.readers = s->legacy.reader_clock + 1;
    if (s->legacy.frac_values && s->legacy.unit_ms)
        return relock__reason(why, whylen,
                              "legacy.values = \"fractional\" needs legacy.clock_unit = \"s\" (a "
                              "fraction of a millisecond is finer than any clock here)");
    if (s->legacy.frac_values && s->bridge.value_suffix)
        return relock__reason(why, whylen,
                              "bridge.value_suffix cannot be combined with legacy.values = "
                              "\"fractional\": a value is a fraction or carries a suffix, not "
                              "both");
    return 0;
}
