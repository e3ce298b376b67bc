/* Small helpers shared by the integration tests. */
#ifndef RELOCK_TESTUTIL_H
#define RELOCK_TESTUTIL_H

#include <stdint.h>
#include <sys/types.h>

/* Monotonic milliseconds. */
uint64_t tu_now_ms(void);
void tu_sleep_ms(long ms);

/* A pipe a forked child uses to report one line to its parent. */
typedef struct tu_chan {
    int rd, wr;
} tu_chan;
int tu_chan_open(tu_chan *ch);
/* Child side: write one line (NUL-terminated text). */
void tu_chan_send(tu_chan *ch, const char *line);
/* Parent side: read one line within timeout_ms into buf; 0 on success. */
int tu_chan_recv(tu_chan *ch, char *buf, size_t len, long timeout_ms);
void tu_chan_close(tu_chan *ch);

/* Waits up to timeout_ms for pid to exit; returns its wait status, or -1
 * (and SIGKILLs it) when it did not. */
int tu_wait_child(pid_t pid, long timeout_ms);

#endif
