/* Small helpers shared by the integration tests (see testutil.h). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

uint64_t tu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void tu_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int tu_chan_open(tu_chan *ch)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    ch->rd = fds[0];
    ch->wr = fds[1];
    return 0;
}

void tu_chan_send(tu_chan *ch, const char *line)
{
    size_t len = strlen(line);
    ssize_t n = write(ch->wr, line, len);
    (void)n;
    n = write(ch->wr, "\n", 1);
    (void)n;
}

int tu_chan_recv(tu_chan *ch, char *buf, size_t len, long timeout_ms)
{
    size_t got = 0;
    uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
    while (got + 1 < len) {
        uint64_t now = tu_now_ms();
        if (now >= end)
            return -1;
        struct pollfd p = {ch->rd, POLLIN, 0};
        int r = poll(&p, 1, (int)(end - now));
        if (r <= 0)
            continue;
        ssize_t n = read(ch->rd, buf + got, 1);
        if (n <= 0)
            return -1;
        if (buf[got] == '\n') {
            buf[got] = '\0';
            return 0;
        }
        got++;
    }
    buf[got] = '\0';
    return 0;
}

void tu_chan_close(tu_chan *ch)
{
    close(ch->rd);
    close(ch->wr);
}

int tu_wait_child(pid_t pid, long timeout_ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)timeout_ms;
    int status;
    while (tu_now_ms() < end) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        tu_sleep_ms(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}
