/*
 * Preloaded into a redis-server by tests (LD_PRELOAD): its wall clock
 * (gettimeofday, time, clock_gettime of the real-time clocks) runs
 * RELOCK_TEST_CLOCK_AHEAD_MS milliseconds ahead (negative: behind); its
 * monotonic clock is left alone.  With RELOCK_TEST_CLOCK_AHEAD_FILE the
 * shift is read from that file (a decimal number of ms) instead, at most
 * every 5 ms, so that a test steps the server's clock while it runs.  The
 * real clock and the file are read by system calls themselves, so that
 * nothing here calls malloc or the dynamic loader (the server's jemalloc
 * reads the clock while it starts, before any of that is usable).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int real_now(clockid_t id, struct timespec *ts)
{
    return (int)syscall(SYS_clock_gettime, id, ts);
}

/* The shift in the file, or keep when it cannot be read. */
static long long read_shift(const char *file, long long keep)
{
    char buf[32];
    long fd = syscall(SYS_openat, AT_FDCWD, file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return keep;
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return keep;
    long long v = 0;
    int i = 0, neg = buf[0] == '-';
    for (i = neg; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
        v = v * 10 + (buf[i] - '0');
    if (i == neg)
        return keep;
    return neg ? -v : v;
}

static long long ahead_ms(void)
{
    static long long v;
    static int init;
    static const char *file;
    static long long read_at = -1000;
    if (!init) {
        const char *e = getenv("RELOCK_TEST_CLOCK_AHEAD_MS");
        v = e ? atoll(e) : 0;
        file = getenv("RELOCK_TEST_CLOCK_AHEAD_FILE");
        init = 1;
    }
    if (file) {
        struct timespec m;
        if (real_now(CLOCK_MONOTONIC, &m) == 0) {
            long long now = (long long)m.tv_sec * 1000 + m.tv_nsec / 1000000;
            if (now - read_at >= 5) {
                v = read_shift(file, v);
                read_at = now;
            }
        }
    }
    return v;
}

static void add_ahead(struct timespec *ts)
{
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ahead_ms() * 1000000LL;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
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
