/*
 * forwarder: a byte forwarder between a client and a server, in a process
 * of its own, that resets every client connection on SIGUSR1: it
 * half-closes them (a FIN: the client's socket goes to CLOSE_WAIT), waits
 * reset_pause_us, then resets them (an RST: in CLOSE_WAIT the client's
 * kernel records EPIPE), so that the client's next write() raises SIGPIPE,
 * as a server that closed a connection and then went away does.  For the
 * SIGPIPE tests of both clients.
 */
#ifndef RELOCK_TEST_FORWARDER_H
#define RELOCK_TEST_FORWARDER_H

#include <sys/types.h>

/* A socket listening on a free loopback port, *port its port (a cmocka
 * failure when none). */
int forwarder_listen(int *port);
/* Forks the forwarder, which accepts on lfd (up to 32 connections at a
 * time) and forwards to upstream_port; it ends with its parent, whatever
 * kills it.  Its pid. */
pid_t forwarder_start(int lfd, int upstream_port, long reset_pause_us);

#endif
