/*
 * The server probe's step machine (probe.c, design.md §3.1): INFO for the
 * version (or, where INFO is refused, which harmless commands are), then
 * COMMAND DOCS for Lua and the native compare-and-set commands.  It writes
 * what it learns into l->c->conn (version, major, minor, patch, caps).
 */
#ifndef RELOCK_PROBE_H
#define RELOCK_PROBE_H

#include "engine/engine.h"

typedef struct relock__probe_m {
    relock__mhead h;
} relock__probe_m;

void relock__probe_init(relock__probe_m *m);
relock__step relock__probe_step(void *m, relock_lock *l, const relock__feed *in,
                                relock__batch *out);

#endif
