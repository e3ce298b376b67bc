/*
 * faults: settings behind a mutex, generation counter, generator
 * (see faults.h).
 */
#include "faults.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fault_settings current = {0, 0.0, 0.0, 1, 0};
static _Atomic unsigned generation;

/* The fault at the Nth reply (see faults.h).  at_n 0: disarmed. */
static _Atomic long long replies;
static _Atomic long long commands;
static long long at_n;
static enum at_kind at_kind_set = AT_HOLD;
static long long at_hold_us;

void faults_count_reply(at_fault *out)
{
    long long k = atomic_fetch_add(&replies, 1) + 1;

    out->fire = 0;
    pthread_mutex_lock(&lock);
    if (at_n > 0 && k == at_n && at_kind_set != AT_ERROR) {
        out->fire = 1;
        out->kind = at_kind_set;
        out->hold_us = at_hold_us;
        at_n = 0; /* once */
    }
    pthread_mutex_unlock(&lock);
}

void faults_count_command(at_fault *out)
{
    long long k = atomic_fetch_add(&commands, 1) + 1;

    out->fire = 0;
    pthread_mutex_lock(&lock);
    if (at_n > 0 && k == at_n && at_kind_set == AT_ERROR) {
        out->fire = 1;
        out->kind = AT_ERROR;
        out->hold_us = 0;
        at_n = 0; /* once */
    }
    pthread_mutex_unlock(&lock);
}

long long faults_replies(void)
{
    return atomic_load(&replies);
}

static int parse_at_kind(const char *s, enum at_kind *out, char *why, size_t whylen)
{
    if (strcmp(s, "hold") == 0)
        *out = AT_HOLD;
    else if (strcmp(s, "close-after") == 0)
        *out = AT_CLOSE_AFTER;
    else if (strcmp(s, "close-before") == 0)
        *out = AT_CLOSE_BEFORE;
    else if (strcmp(s, "error") == 0)
        *out = AT_ERROR;
    else {
        snprintf(why, whylen, "'%s' is not hold, close-after, close-before or error", s);
        return -1;
    }
    return 0;
}

void faults_init(long long delay_us, double p_before, double p_after, uint64_t seed)
{
    pthread_mutex_lock(&lock);
    current.delay_us = delay_us;
    current.p_before = p_before;
    current.p_after = p_after;
    current.seed = seed;
    current.gen = atomic_fetch_add(&generation, 1) + 1;
    pthread_mutex_unlock(&lock);
}

void faults_get(fault_settings *out)
{
    pthread_mutex_lock(&lock);
    *out = current;
    pthread_mutex_unlock(&lock);
}

unsigned faults_generation(void)
{
    return atomic_load(&generation);
}

/* An integer from 0 to max, in the unit the caller names. */
static int parse_delay(const char *s, long long max, long long *out, char *why,
                       size_t whylen)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (s[0] == '\0' || end == NULL || *end != '\0' || errno != 0 || v < 0 || v > max) {
        snprintf(why, whylen, "'%s' is not an integer from 0 to %lld", s, max);
        return -1;
    }
    *out = v;
    return 0;
}

int faults_parse_delay_ms(const char *s, long long *out_us, char *why, size_t whylen)
{
    long long ms;

    if (parse_delay(s, FAULT_MAX_DELAY_MS, &ms, why, whylen) < 0)
        return -1;
    *out_us = ms * 1000; /* at most FAULT_MAX_DELAY_US: no overflow */
    return 0;
}

int faults_parse_delay_us(const char *s, long long *out_us, char *why, size_t whylen)
{
    return parse_delay(s, FAULT_MAX_DELAY_US, out_us, why, whylen);
}

int faults_parse_prob(const char *s, double *out, char *why, size_t whylen)
{
    char *end = NULL;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (s[0] == '\0' || end == NULL || *end != '\0' || errno != 0 ||
        !isfinite(v) || v < 0.0 || v > 1.0) {
        snprintf(why, whylen, "'%s' is not a probability from 0 to 1", s);
        return -1;
    }
    *out = v;
    return 0;
}

int faults_parse_seed(const char *s, uint64_t *out, char *why, size_t whylen)
{
    char *end = NULL;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || end == NULL || *end != '\0' || errno != 0) {
        snprintf(why, whylen, "'%s' is not an unsigned 64-bit integer", s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int faults_update(const char *const *names, const char *const *values,
                  size_t n, char *why, size_t whylen)
{
    fault_settings next;
    char reason[160];
    size_t i;
    long long n_at = -1;
    long long hold = -1;
    enum at_kind kind = AT_HOLD;
    int kind_set = 0;

    faults_get(&next);
    for (i = 0; i < n; i++) {
        int rc;

        /* Both delay settings write the same field: the last one wins. */
        if (strcmp(names[i], "delay-ms") == 0) {
            rc = faults_parse_delay_ms(values[i], &next.delay_us, reason, sizeof(reason));
        } else if (strcmp(names[i], "delay-us") == 0) {
            rc = faults_parse_delay_us(values[i], &next.delay_us, reason, sizeof(reason));
        } else if (strcmp(names[i], "close-before-reply") == 0) {
            rc = faults_parse_prob(values[i], &next.p_before, reason, sizeof(reason));
        } else if (strcmp(names[i], "close-after-reply") == 0) {
            rc = faults_parse_prob(values[i], &next.p_after, reason, sizeof(reason));
        } else if (strcmp(names[i], "seed") == 0) {
            rc = faults_parse_seed(values[i], &next.seed, reason, sizeof(reason));
        } else if (strcmp(names[i], "at-reply") == 0) {
            rc = parse_delay(values[i], 1000000000LL, &n_at, reason, sizeof(reason));
        } else if (strcmp(names[i], "at-kind") == 0) {
            rc = parse_at_kind(values[i], &kind, reason, sizeof(reason));
            kind_set = 1;
        } else if (strcmp(names[i], "at-hold-ms") == 0) {
            rc = faults_parse_delay_ms(values[i], &hold, reason, sizeof(reason));
        } else {
            snprintf(why, whylen,
                     "unknown fault setting '%s' (delay-ms, delay-us, "
                     "close-before-reply, close-after-reply, seed, at-reply, "
                     "at-kind, at-hold-ms, off)", names[i]);
            return -1;
        }
        if (rc < 0) {
            snprintf(why, whylen, "%s: %s", names[i], reason);
            return -1;
        }
    }
    pthread_mutex_lock(&lock);
    current.delay_us = next.delay_us;
    current.p_before = next.p_before;
    current.p_after = next.p_after;
    current.seed = next.seed;
    current.gen = atomic_fetch_add(&generation, 1) + 1;
    if (n_at >= 0) {
        /* Counting starts again: N is the Nth reply from now. */
        at_n = n_at;
        at_kind_set = kind_set ? kind : AT_HOLD;
        at_hold_us = hold > 0 ? hold : 0;
        atomic_store(&replies, 0);
        atomic_store(&commands, 0);
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

void faults_off(void)
{
    pthread_mutex_lock(&lock);
    current.delay_us = 0;
    current.p_before = 0.0;
    current.p_after = 0.0;
    current.gen = atomic_fetch_add(&generation, 1) + 1;
    at_n = 0;
    pthread_mutex_unlock(&lock);
}

void fault_rng_seed(fault_rng *r, uint64_t seed)
{
    r->state = seed;
}

double fault_rng_next(fault_rng *r)
{
    uint64_t z;

    r->state += 0x9e3779b97f4a7c15ULL;
    z = r->state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
