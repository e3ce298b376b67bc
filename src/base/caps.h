/* Capabilities the probe learns by asking the server, not from its version
 * (design.md §3.3: forks renumber, Lua may be left out). */
#ifndef RELOCK_CAPS_H
#define RELOCK_CAPS_H

#include "relock.h"

/* SET key value IFEQ old PX ms: compare-and-set (Valkey 8.1, Redis 8.4). */
#define RELOCK__CAP_SET_IFEQ RELOCK_CAP_SET_IFEQ
/* DELIFEQ key value: compare-and-delete (Valkey 9.0). */
#define RELOCK__CAP_DELIFEQ RELOCK_CAP_DELIFEQ
/* DELEX key IFEQ value: compare-and-delete (Redis 8.4). */
#define RELOCK__CAP_DELEX RELOCK_CAP_DELEX

/* The opaque relock_paths of relock.h: one static string per
 * relock_path. */
#define RELOCK__NPATHS 4
struct relock_paths {
    const char *path[RELOCK__NPATHS];
};

/* Modern mode's way of acquiring (with a fence), releasing and extending
 * on c's server as it is connected now (relock_client_paths(), and the
 * end of the mode reason); modern.c. */
void relock__modern_paths(const relock_client *c, relock_paths *out);

#endif
