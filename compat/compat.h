/*
 * What compat/ offers the layers above it: the legacy settings' check and
 * the timestamp algorithms' machines.  src/base/ and src/algo/ never reach
 * into compat/ (docs/architecture.md).
 */
#ifndef RELOCK_COMPAT_H
#define RELOCK_COMPAT_H

#include "handle.h"

/* Checks that the legacy settings fit the connected server (gc_expire is
 * refused on 2.0, clock = "server" needs TIME). */
relock_status relock__legacy_check(relock_client *c);

/* The timestamp algorithms' machines, for the operation core (compat/legacy.c). */
extern const struct relock__machines relock__ts_machines;

#endif
