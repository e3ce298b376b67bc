/* The asynchronous client's connections on the program's loop (loop.c),
 * and its writes without SIGPIPE (nopipe.c). */
#ifndef RELOCK_CORE_LOOP_H
#define RELOCK_CORE_LOOP_H

#include <hiredis/async.h>

#include "relock_async.h"

/* Whether relock_async_new() takes loop: its size and version, and every
 * function present. */
int relock__loop_valid(const relock_async_loop *loop);

/* Hands ac's descriptor to loop: installs hiredis's event hooks on ac and
 * asks the loop to watch the descriptor (for reading and writing: the
 * connect ends at its first event, either way).  0, or -1 when the loop
 * refused it or memory ran out: ac is then as it was, and the caller frees
 * it. */
int relock__loop_attach(const relock_async_loop *loop, redisAsyncContext *ac);

/* Runs fn(arg), a write to a socket, with SIGPIPE blocked in the calling
 * thread, and takes back a SIGPIPE it raised. */
void relock__write_nopipe(void (*fn)(void *), void *arg);

#endif
