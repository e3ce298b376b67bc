/*
 * Preloaded into a redis-server by tests (LD_PRELOAD): its wall clock
 * (gettimeofday, time, clock_gettime of the real-time clocks) runs
 * RELOCK_TEST_CLOCK_AHEAD_MS milliseconds ahead; its monotonic clock is
 * left alone.  The real clock is read by the system call itself, so that
 * nothing here calls malloc or the dynamic loader (the server's jemalloc
 * reads the clock while it starts, before any of that is usable).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long ahead_ms(void)
{
    static long long v = -1;
    if (v < 0) {
        const char *e = getenv("RELOCK_TEST_CLOCK_AHEAD_MS");
        v = e ? atoll(e) : 0;
    }
    return v;
}

static int real_now(clockid_t id, struct timespec *ts)
{
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static void add_ahead(struct timespec *ts)
{
    long long ns = (long long)ts->tv_nsec + (ahead_ms() % 1000) * 1000000LL;
    ts->tv_sec += (time_t)(ahead_ms() / 1000 + ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = real_now(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        add_ahead(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz;
    struct timespec ts;
    if (real_now(CLOCK_REALTIME, &ts) != 0)
        return -1;
    add_ahead(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t)
{
    struct timespec ts;
    if (real_now(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    add_ahead(&ts);
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
