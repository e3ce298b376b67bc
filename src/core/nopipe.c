/*
 * The asynchronous client's writes without SIGPIPE (decision 241), in a
 * file of their own so that a test can link the library without them.
 *
 * hiredis 0.14 writes with write().  With SIGPIPE blocked in the calling
 * thread, a write to a closed connection fails with EPIPE and leaves
 * SIGPIPE pending here, taken back with a zero-timeout sigtimedwait()
 * before the mask is restored.  A SIGPIPE pending before the call is not
 * ours and stays; no disposition is changed: the program's choice stays.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "loop.h"

void relock__write_nopipe(void (*fn)(void *), void *arg)
{
    sigset_t pipe_only, saved, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe_only, &saved) != 0 || sigismember(&saved, SIGPIPE) == 1) {
        /* Blocked by the thread already (the blocking client's renewal
         * thread blocks every signal): a SIGPIPE the write raises stays
         * pending there, where it harms nothing, as the thread chose. */
        fn(arg);
        return;
    }
    int before = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    fn(arg);
    if (!before && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        const struct timespec zero = {0, 0};
        int got;
        do
            got = sigtimedwait(&pipe_only, NULL, &zero);
        while (got < 0 && errno == EINTR);
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
}
