/*
 * A fake RESP server for fuzz_replies: it listens on 127.0.0.1 inside the
 * fuzzer process and answers every request of every connection with the
 * next reply taken from the fuzz input, so the library meets whatever a
 * broken, hostile or simply unusual server could send.
 *
 * One server thread per input: fz_server_begin() starts it,
 * fz_server_end() stops it and waits for it, so nothing it allocated is
 * left when the input ends (libFuzzer's leak check runs then).
 *
 * Requests are read whole (RESP arrays of bulk strings, as hiredis writes
 * them) and answered one by one, also when pipelined.  INFO is answered
 * with a fixed text naming the chosen version, unless raw_info is set (then
 * the input answers it too).  When the input runs out, every connection is
 * closed as soon as it asks for more; a reply that does not parse as RESP
 * is sent as it is, with the rest of the input, and the connection closed.
 *
 * Built without coverage instrumentation: its branches say nothing about
 * the library and would only distract the fuzzer.
 */
#ifndef RELOCK_FAKE_SERVER_H
#define RELOCK_FAKE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct fz_server fz_server;

/* The process's server: listens on a free loopback port on first use.
 * NULL (after a message on stderr) when that fails. */
fz_server *fz_server_get(void);
/* The port the library should connect to. */
int fz_server_port(const fz_server *s);

/*
 * Record mode, for making seed inputs from a real server: requests are
 * relayed to upstream_port on 127.0.0.1 (one upstream connection per
 * client connection) and each reply is appended to rec as well as sent to
 * the client.  INFO is still answered with the fixed text unless raw_info.
 * upstream_port 0 turns record mode off.
 */
void fz_server_record(fz_server *s, int upstream_port, FILE *rec);

/* Serves one input: data[0, size) holds the replies (borrowed until
 * fz_server_end()), info[0, info_len) the whole RESP reply to INFO.
 * 0 on success, -1 when the thread cannot start. */
int fz_server_begin(fz_server *s, const uint8_t *data, size_t size, const char *info,
                    size_t info_len, int raw_info);
/* Closes every connection, drops connections not yet accepted, and joins
 * the thread.  Returns how many bytes of the input were served. */
size_t fz_server_end(fz_server *s);

/*
 * The length of the one complete RESP2 reply at the start of p[0, n):
 * > 0 its length, 0 when incomplete, -1 when it is not RESP2 (or nests
 * deeper than hiredis accepts anyway).
 */
long fz_resp_span(const uint8_t *p, size_t n);

#endif
