/*
 * The transport (transport.c): one server's connection and nothing more:
 * connect, log in, send and read, the stale check, close (the words of a
 * bad reply are the engine's, engine/engine.h).  Calls nothing above it.
 */
#ifndef RELOCK_TRANSPORT_H
#define RELOCK_TRANSPORT_H

#include "handle.h"

/* A fresh blocking context to host:port with the given timeouts, or NULL
 * with the status in *st and "connect to HOST:PORT: reason" in why. */
redisContext *relock__connect_ctx(const char *host, int port, long long connect_ms,
                                  long long command_ms, relock_status *st, char *why,
                                  size_t whylen);

/* Sends AUTH and SELECT as srv says on ctx. */
relock_status relock__conn_login(relock_client *c, redisContext *ctx, const relock__server *srv);
/* Sends the formatted command cmd (len bytes) on c's open connection and
 * reads its reply (transport.c); on failure records it, closes the
 * connection and returns NULL with *sent = 1. */
redisReply *relock__conn_send(relock_client *c, int *sent, const char *name, const char *cmd,
                              size_t len);

void relock__conn_close(relock__conn *conn);
/* Whether ctx, idle since *last_used (which becomes now), was closed or
 * written to by the server meanwhile: then it is not to be reused. */
int relock__ctx_stale(redisContext *ctx, uint64_t *last_used);

#endif
