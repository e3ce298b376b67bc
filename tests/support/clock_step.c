/* clock_step: see clock_step.h. */
#include "clock_step.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

volatile long long clock_step_ms;

int clock_gettime(clockid_t id, struct timespec *ts)
{
    long rc = syscall(SYS_clock_gettime, id, ts);
    if (rc != 0 || id != CLOCK_REALTIME || clock_step_ms == 0)
        return (int)rc;
    long long ns =
        (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + clock_step_ms * 1000000LL;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    return 0;
}

long long clock_true_wall_ms(void)
{
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
