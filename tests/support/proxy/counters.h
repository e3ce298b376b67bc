/*
 * counters: how many commands the proxy refused in the old server's name,
 * process-wide (every connection thread counts into the same table).
 */
#ifndef RELOCK_PROXY_COUNTERS_H
#define RELOCK_PROXY_COUNTERS_H

#include "buf.h"
#include "resp.h"

/* Count one refusal under name (at most 63 bytes are kept). */
void counters_add(const char *name);

/* Refusals since start or since the last reset. */
long long counters_total(void);

/* Append the RESP array of "NAME count" bulk strings, in the order the
 * names were first refused.  Returns 0 or -1 (full). */
int counters_list(pbuf *out);

/* Count one client command (control commands excepted) under its name,
 * upper-cased: the commands a client really sent, whatever the proxy then
 * made of them. */
void counters_command(const proxy_arg *name);

/* Commands counted since start or the last reset. */
long long counters_commands_total(void);

/* The RESP array of "NAME count" bulk strings of counted commands, in the
 * order first seen.  Returns 0 or -1 (full). */
int counters_commands_list(pbuf *out);

/* Forget all counts (refusals and commands). */
void counters_reset(void);

#endif
