/* Clocks, sleeping, randomness and lock tokens (the backoff's arithmetic
 * is the wait planner's, src/algo/engine/waitplan.c). */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "handle.h"

uint64_t relock__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

long long relock__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void relock__sleep_ms(long long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    /* Bounded: each EINTR resumes with the time that remains. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int fill_random(void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t got = 0;
    for (int tries = 0; got < len && tries < 100; tries++) {
        ssize_t n = getrandom(p + got, len - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno != EINTR)
            return -1;
    }
    return got == len ? 0 : -1;
}

int relock__token_hex(const unsigned char raw[16], char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
    /* A letter is a nibble above 9: one that carries into bit 4 when 6
     * is added, eight bytes' nibbles at a time (no byte's sum reaches the
     * next byte). */
    const uint64_t low = 0x0f0f0f0f0f0f0f0full, six = 0x0606060606060606ull;
    uint64_t w[2], sums = 0;
    memcpy(w, raw, sizeof w);
    for (int i = 0; i < 2; i++)
        sums |= ((w[i] & low) + six) | (((w[i] >> 4) & low) + six);
    return (sums & 0x1010101010101010ull) != 0;
}

/* How many forks made this process, counted in each child as it starts:
 * state a child copied from its parent knows itself by an older count. */
static unsigned long forks;
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    forks++;
}

static void forks_watch(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

unsigned long relock__forks(void)
{
    pthread_once(&forks_once, forks_watch);
    return forks;
}

/* A token's 16 random bytes: from c's store, filled from the kernel 16
 * tokens at a time (a system call per token was a fifth of an uncontended
 * cycle's system calls), never handed out twice, and emptied in a forked
 * child so that parent and child draw different tokens; c NULL: the kernel's. */
static int token_raw(relock_client *c, unsigned char raw[16])
{
    if (!c)
        return fill_random(raw, 16);
    unsigned long f = relock__forks();
    if (c->rnd_left < 16 || c->rnd_forks != f) {
        if (fill_random(c->rnd, sizeof c->rnd) != 0)
            return -1;
        c->rnd_left = (int)sizeof c->rnd;
        c->rnd_forks = f;
    }
    unsigned char *p = c->rnd + sizeof c->rnd - c->rnd_left;
    memcpy(raw, p, 16);
    memset(p, 0, 16);
    c->rnd_left -= 16;
    return 0;
}

static int token(relock_client *c, char out[33])
{
    /* A token of only digits would read as a timestamp (design.md §4.4); the
     * chance is (10/16)^32, so a few tries always suffice. */
    for (int tries = 0; tries < 16; tries++) {
        unsigned char raw[16];
        if (token_raw(c, raw) != 0)
            return -1;
        if (relock__token_hex(raw, out))
            return 0;
    }
    return -1;
}

int relock__token(char out[33])
{
    return token(NULL, out);
}

relock_status relock__token_for(relock_client *c, const char *op, const char *name, char out[33])
{
    if (token(c, out) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "%s %s: no random bytes for a token", op, name);
    return RELOCK_OK;
}

uint64_t relock__rand64(uint64_t *state)
{
    /* xorshift64*: jitter only, never security. */
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}
