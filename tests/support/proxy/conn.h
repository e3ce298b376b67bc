/*
 * conn: one client connection and its own upstream connection.
 *
 * Each client gets a private connection to the real server, so MULTI,
 * WATCH, SELECT and subscriptions stay per client exactly as they would
 * against a server.  One thread runs one connection (conn_serve) with a
 * ppoll() loop over the client socket, the upstream socket and the
 * shutdown pipe; delayed replies fall due on a microsecond clock.
 *
 * Ordering: every command the client sends gets an entry in a FIFO, in
 * order: "forwarded" (its answer comes from upstream), "local" (the proxy
 * answers: refusals, control commands, protocol errors) or "internal" (a
 * command the proxy sent for its own purposes; its answer is dropped).
 * A reply from upstream answers the oldest forwarded entry; local entries
 * are released as soon as nothing older is outstanding.  Replies that
 * answer no entry (pub/sub messages, MONITOR output) pass straight
 * through.
 */
#ifndef RELOCK_PROXY_CONN_H
#define RELOCK_PROXY_CONN_H

#include <sys/socket.h>

#include "personality.h"

typedef struct proxy_ctx {
    personality pers;                /* what to emulate */
    struct sockaddr_storage up_addr; /* the real server */
    socklen_t up_addrlen;
    char upstream[300];              /* "HOST:PORT" as given, for messages */
    int stop_fd;                     /* readable once the proxy shuts down */
} proxy_ctx;

/* Serve the client on cfd until it or the upstream goes away, a fault
 * closes it, or stop_fd becomes readable.  Closes cfd. */
void conn_serve(const proxy_ctx *ctx, int cfd);

#endif
