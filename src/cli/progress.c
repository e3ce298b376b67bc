/*
 * The progress line of -v during a long wait on a terminal: who holds the
 * lock, how long relock has waited, when the holder's lease ends.
 *
 * The wait itself is one blocking call of the library, so the line is kept
 * by a thread of its own with a client of its own: it looks at the key once
 * a second, after the first second, and rewrites one line of stderr in
 * place.  It only informs: a failure to connect or to read the key leaves
 * the line to the time waited, and never changes the outcome of the wait.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define PROGRESS_FIRST_MS 1000 /* a wait shorter than this shows nothing */
#define PROGRESS_EVERY_MS 1000

struct cli_progress {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int stop;
    int shown; /* a line is on the terminal: cleared at the end */
    cli_ctx *ctx;
    char cmd[16];
    const char *name;
    struct timespec t0;
};

static long long since_ms(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The deadline ms after t0, as pthread_cond_timedwait reads it. */
static struct timespec after(const struct timespec *t0, long long ms)
{
    struct timespec d = *t0;
    d.tv_sec += (time_t)(ms / 1000);
    d.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (d.tv_nsec >= 1000000000L) {
        d.tv_sec++;
        d.tv_nsec -= 1000000000L;
    }
    return d;
}

/* One line: "relock: acquire: waiting for job 12s; held by ..., its lease
 * ends in 4s", into line. */
static void describe(struct cli_progress *p, relock_client *c, char *line, size_t len)
{
    char waited[32], holder[256] = "";
    relockx_format_duration(since_ms(&p->t0), waited, sizeof waited);
    relock_inspect_info *in = NULL;
    if (c && relock_inspect(c, p->name, &in) == RELOCK_OK) {
        if (relock_inspect_info_kind(in) == RELOCK_VALUE_NONE) {
            snprintf(holder, sizeof holder, "; free now");
        } else {
            char left[80] = "";
            long long ends = relock_inspect_info_pttl_ms(in);
            if (relock_inspect_info_kind(in) == RELOCK_VALUE_TIMESTAMP) {
                struct timespec rt;
                clock_gettime(CLOCK_REALTIME, &rt);
                long long now_ms = (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
                ends = relock_inspect_info_ts_ms(in) -
                       now_ms; /* the holder's expiry, by this host's clock */
            }
            if (ends >= 0) {
                char d[32];
                relockx_format_duration(ends, d, sizeof d);
                snprintf(left, sizeof left, ", its lease ends in %s", d);
            } else if (relock_inspect_info_kind(in) == RELOCK_VALUE_TIMESTAMP) {
                snprintf(left, sizeof left, ", its lease has ended");
            }
            snprintf(holder, sizeof holder, "; held by %.120s, fence %lld%s",
                     relock_inspect_info_owner(in)[0] ? relock_inspect_info_owner(in)
                                                      : relock_inspect_info_value(in, NULL),
                     relock_inspect_info_fence(in), left);
        }
    }
    relock_inspect_info_free(in);
    snprintf(line, len, "relock: %s: waiting for %s %s%s", p->cmd, p->name, waited, holder);
}

static void *progress_main(void *arg)
{
    struct cli_progress *p = arg;
    relock_client *c = NULL;
    int tried = 0;
    long long next = PROGRESS_FIRST_MS;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct timespec d = after(&p->t0, next);
        while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &d) == 0)
            ;
        if (p->stop)
            break;
        pthread_mutex_unlock(&p->mu);
        if (!tried) {
            tried = 1;
            if (relock_connect(p->ctx->cfg, &c) != RELOCK_OK) {
                relock_client_free(c);
                c = NULL;
            }
        }
        char line[512];
        describe(p, c, line, sizeof line);
        pthread_mutex_lock(&p->mu);
        if (p->stop)
            break;
        /* Under the lock: stop() clears the line only after this one. */
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
        p->shown = 1;
        next = since_ms(&p->t0) + PROGRESS_EVERY_MS;
    }
    pthread_mutex_unlock(&p->mu);
    relock_client_free(c);
    return NULL;
}

cli_progress *cli_progress_start(cli_ctx *ctx, const char *cmd, const char *name, int verbose)
{
    if (!verbose || !isatty(STDERR_FILENO))
        return NULL;
    struct cli_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    p->ctx = ctx;
    snprintf(p->cmd, sizeof p->cmd, "%s", cmd);
    p->name = name;
    clock_gettime(CLOCK_MONOTONIC, &p->t0);
    /* Signals go to the thread that waits for the lock, whose sleep they
     * cut short (hold), never to this one. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&p->thread, NULL, progress_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

void cli_progress_stop(cli_progress *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
