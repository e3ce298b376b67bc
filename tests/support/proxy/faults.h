/*
 * faults: the fault-injection settings (process-wide, changeable at run
 * time by the control command) and the per-connection random draws.
 *
 * Determinism: every connection draws from its own generator, seeded with
 * the current seed when the connection opens and again whenever any fault
 * setting changes.  So a given seed and a given sequence of commands on a
 * connection give the same faults, whatever other connections do.
 */
#ifndef RELOCK_PROXY_FAULTS_H
#define RELOCK_PROXY_FAULTS_H

#include <stddef.h>
#include <stdint.h>

/* The longest delay, one hour, in either unit. */
#define FAULT_MAX_DELAY_MS 3600000LL
#define FAULT_MAX_DELAY_US (FAULT_MAX_DELAY_MS * 1000)

typedef struct fault_settings {
    long long delay_us; /* added before relaying each reply (microseconds) */
    double p_before;    /* probability of closing instead of relaying */
    double p_after;     /* probability of closing right after relaying */
    uint64_t seed;      /* seed of the per-connection generators */
    unsigned gen;       /* bumped by every change */
} fault_settings;

/* Set the start-up values (before any connection exists). */
void faults_init(long long delay_us, double p_before, double p_after, uint64_t seed);

/* Copy the current settings. */
void faults_get(fault_settings *out);

/* The change counter alone (cheap: lets a connection notice changes). */
unsigned faults_generation(void);

/*
 * Change settings from name/value pairs ("delay-ms", "delay-us",
 * "close-before-reply", "close-after-reply", "seed"), in order, so when both
 * delay-ms and delay-us are given the last one wins; all or nothing.
 * Returns 0, or -1 with the reason in why.
 */
int faults_update(const char *const *names, const char *const *values,
                  size_t n, char *why, size_t whylen);

/* Delay 0 and both probabilities 0 (the seed is kept); the fault at the
 * Nth reply is disarmed. */
void faults_off(void);

/*
 * A fault at one command boundary, for tests that enumerate them: the Nth
 * reply to a client command counted across all connections from the
 * moment the fault was set ("at-reply N", 1-based), once.  Kinds:
 *   AT_HOLD          relay it after at-hold-ms (another client may write
 *                    between command N and N+1 meanwhile);
 *   AT_CLOSE_AFTER   relay it (after at-hold-ms, if set), then close the
 *                    client's connection: command N+1 meets a dead one;
 *   AT_CLOSE_BEFORE  command N ran, but its reply is never relayed: the
 *                    connection closes instead (a lost reply);
 *   AT_ERROR         the Nth client command (counted as commands, not
 *                    replies) never reaches the server and is answered
 *                    -LOADING, as a command a server rejects before running
 *                    it (inside MULTI, as the personality treats a refused
 *                    command).
 */
enum at_kind { AT_HOLD = 0, AT_CLOSE_AFTER, AT_CLOSE_BEFORE, AT_ERROR };

/* The error AT_ERROR answers with (without '-' and CRLF). */
#define AT_ERROR_TEXT "LOADING Redis is loading the dataset in memory"

typedef struct at_fault {
    int fire;          /* 1: this reply is the one */
    enum at_kind kind;
    long long hold_us; /* extra delay before relaying it */
} at_fault;

/* Counts one reply to a client command and says whether the fault fires
 * on it. */
void faults_count_reply(at_fault *out);

/* Counts one client command and says whether an AT_ERROR fault fires on
 * it. */
void faults_count_command(at_fault *out);

/* Replies counted since the last at-reply setting (or start). */
long long faults_replies(void);

/* Parsers shared with the command line.  Return 0, or -1 with why.  Both
 * delay parsers store microseconds: delay-ms N is N * 1000 us. */
int faults_parse_delay_ms(const char *s, long long *out_us, char *why, size_t whylen);
int faults_parse_delay_us(const char *s, long long *out_us, char *why, size_t whylen);
int faults_parse_prob(const char *s, double *out, char *why, size_t whylen);
int faults_parse_seed(const char *s, uint64_t *out, char *why, size_t whylen);

/* A connection's generator (splitmix64). */
typedef struct fault_rng {
    uint64_t state;
} fault_rng;

void fault_rng_seed(fault_rng *r, uint64_t seed);

/* Uniform in [0, 1). */
double fault_rng_next(fault_rng *r);

#endif
