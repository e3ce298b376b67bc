/*
 * hiredis's contexts on the program's loop, which watches descriptors as
 * curl's socket callback does (nothing public names hiredis): a context's
 * event hooks tell it what to watch; it reports a ready one through
 * relock_async_socket_action().
 *
 * hiredis may free a context after the client that owned it (a free asked
 * for within a reply's callback waits for its return), so a socket keeps
 * its own copy of the loop's watch function and data, and lives until a
 * relock_async_socket_action() running on it ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/sds.h>

#include "loop.h"

struct relock_async_socket {
    redisAsyncContext *ac; /* NULL once hiredis let go of the connection */
    int (*watch)(void *data, relock_async_socket *s, int fd, int events, void **sockp);
    void *data;  /* the loop's data */
    void *sockp; /* the loop's pointer for this descriptor */
    int fd;
    int events; /* what the loop watches: RELOCK_IO_READ, RELOCK_IO_WRITE */
    int busy;   /* relock_async_socket_action() runs on it */
};

int relock__loop_valid(const relock_async_loop *loop)
{
    /* size: fields added later read as NULL for an older program (decision
     * 242); a loop built for relock 0.3 is below the smallest size taken. */
    return loop && loop->size >= RELOCK_ASYNC_LOOP_SIZE_2 &&
           loop->version == RELOCK_ASYNC_LOOP_VERSION && loop->watch && loop->timer_start &&
           loop->timer_stop;
}

/* Tells the loop what to watch, when it changed: hiredis calls its hooks
 * far more often than the answer changes (a read after each read). */
static void tell(relock_async_socket *s, int events)
{
    if (events == s->events)
        return;
    s->events = events;
    /* A failure after the first call cannot be acted on (hooks return
     * nothing to hiredis); the interface says it should not happen. */
    (void)s->watch(s->data, s, s->fd, events, &s->sockp);
}

/* hiredis's four hooks: each sets (on) or clears one event of what is watched. */
#define HOOK(name, event, on)                                                                  \
    static void name(void *p)                                                                  \
    {                                                                                          \
        relock_async_socket *s = p;                                                            \
        tell(s, on ? s->events | event : s->events & ~event);                                  \
    }
HOOK(add_read, RELOCK_IO_READ, 1)
HOOK(del_read, RELOCK_IO_READ, 0)
HOOK(add_write, RELOCK_IO_WRITE, 1)
HOOK(del_write, RELOCK_IO_WRITE, 0)

/* hiredis lets go of the context; the descriptor is closed right after. */
static void cleanup(void *p)
{
    relock_async_socket *s = p;
    redisAsyncContext *ac = s->ac;
    if (ac) /* a second cleanup, or a hook after this one, finds nothing */
        memset(&ac->ev, 0, sizeof ac->ev);
    s->ac = NULL;
    (void)s->watch(s->data, s, s->fd, RELOCK_IO_REMOVE, &s->sockp);
    if (!s->busy)
        free(s);
}

int relock__loop_attach(const relock_async_loop *loop, redisAsyncContext *ac)
{
    if (!ac || ac->ev.data)
        return -1; /* attached already */
    relock_async_socket *s = malloc(sizeof *s);
    if (!s)
        return -1;
    *s = (relock_async_socket){.ac = ac, .watch = loop->watch, .data = loop->data,
                               .fd = ac->c.fd, .events = RELOCK_IO_READ | RELOCK_IO_WRITE};
    if (s->watch(s->data, s, s->fd, s->events, &s->sockp) != 0) {
        free(s);
        return -1;
    }
    ac->ev.data = s;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    return 0;
}

/* An output buffer up to this size is kept once written whole. */
#define OBUF_KEEP 16384

/* Writes a connected context's output with send(MSG_NOSIGNAL), as
 * redisBufferWrite() would with write(), but without touching the signal
 * mask (four system calls fewer per batch).  0 when written, or when the
 * socket takes no more for now; -1 when the send failed or was not tried:
 * hiredis's own write then meets the failure (relock__write_nopipe()). */
static int send_own(redisAsyncContext *ac)
{
    redisContext *c = &ac->c;
    if (c->err || !(c->flags & REDIS_CONNECTED))
        return -1;
    size_t len = sdslen(c->obuf);
    if (len == 0)
        return 0;
    /* (MSG_DONTWAIT: the blocking API's socket may be a blocking one,
     * pollloop.c, BLOCK_SLICE_MS) */
    ssize_t n = send(c->fd, c->obuf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    if ((size_t)n == len && sdsalloc(c->obuf) <= OBUF_KEEP) {
        /* The buffer is kept for the next command, saving a blocking round
         * trip three allocator calls; wiped first, as a login's password
         * passes through here. */
        memset(c->obuf, 0, len);
        sdsclear(c->obuf);
    } else if ((size_t)n == len) {
        sdsfree(c->obuf);
        c->obuf = sdsempty();
    } else if (n > 0) {
        sdsrange(c->obuf, (int)n, -1);
    }
    return 0;
}

static void handle_write(void *ac)
{
    /* ac may be freed inside (a failed write disconnects, and callbacks
     * run): nothing after it looks at it again. */
    redisAsyncHandleWrite(ac);
}

void relock_async_socket_action(relock_async_socket *s, int events)
{
    if (!s || !s->ac)
        return;
    s->busy++;
    if (events & RELOCK_IO_READ)
        redisAsyncHandleRead(s->ac);
    /* The read may have ended the connection (s->ac is then NULL). */
    if ((events & RELOCK_IO_WRITE) && s->ac) {
        /* hiredis's handler then only updates what is watched (its write
         * finds the output empty), or meets the failure itself */
        if (send_own(s->ac) == 0 && s->ac->c.obuf && sdslen(s->ac->c.obuf) == 0)
            redisAsyncHandleWrite(s->ac);
        else
            relock__write_nopipe(handle_write, s->ac);
    }
    if (--s->busy == 0 && !s->ac)
        free(s);
}
