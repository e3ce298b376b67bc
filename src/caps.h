/*
 * Capabilities the probe learns by asking the server rather than from its
 * version (DESIGN §2: forks renumber, and Lua may be left out): the
 * native compare-and-set commands of newer servers.  They continue the
 * RELOCK_CAP_* bits of relock.h, so relock_cap_name() names them and
 * `relock probe` lists them; relock.h does not define them yet, since no
 * caller of the library needs to test them.
 */
#ifndef RELOCK_CAPS_H
#define RELOCK_CAPS_H

/* SET key value IFEQ old PX ms: compare-and-set (Valkey 8.1, Redis 8.4). */
#define RELOCK__CAP_SET_IFEQ 0x80u
/* DELIFEQ key value: compare-and-delete (Valkey 9.0). */
#define RELOCK__CAP_DELIFEQ 0x100u
/* DELEX key IFEQ value: compare-and-delete (Redis 8.4). */
#define RELOCK__CAP_DELEX 0x200u

#include <stddef.h>

#include "relock.h"

/* Modern mode's way of acquiring (with a fence), releasing and extending
 * on c's server, as one line for `relock probe` ("acquire: ..., release:
 * DELIFEQ, extend: SET IFEQ, scripts: none"); modern.c. */
void relock__modern_paths(const relock_client *c, char *out, size_t len);

#endif
