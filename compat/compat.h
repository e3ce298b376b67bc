/*
 * What compat/ offers the layers above it: the legacy settings' check and
 * the bridge value's suffix (the legacy and bridge algorithm tables, whose
 * machines are compat/'s, are src/core/run_ts.c's, declared in
 * src/core/algo.h).  src/api/ and src/core/run_ts.c
 * include this header; src/base/ and src/algo/ never reach into compat/
 * (docs/architecture.md).
 */
#ifndef RELOCK_COMPAT_H
#define RELOCK_COMPAT_H

#include "handle.h"

/* Checks that the legacy settings fit the connected server (gc_expire is
 * refused on 2.0, clock = "server" needs TIME). */
relock_status relock__legacy_check(relock_client *c);
/* A bridge value's suffix token into out (33 bytes) when bridge.value_suffix
 * asks for one, else ""; a failure is "OP NAME: no random bytes ...". */
relock_status relock__bridge_suffix(relock_lock *l, const char *op, char *out);

/* The timestamp algorithms' machines, for the operation core (compat/legacy.c). */
extern const struct relock__machines relock__ts_machines;

#endif
