/*
 * What compat/ offers the layer above it: the legacy and bridge
 * algorithms, chosen by src/api/mode.c.  Only src/api/ includes this
 * header; the library core in src/ never reaches into compat/ (design.md §2.2,
 * docs/architecture.md).
 */
#ifndef RELOCK_COMPAT_H
#define RELOCK_COMPAT_H

#include "handle.h"

extern const relock__algo relock__algo_legacy;
extern const relock__algo relock__algo_bridge;

/* Checks that the legacy settings fit the connected server (gc_expire is
 * refused on 2.0, clock = "server" needs TIME). */
relock_status relock__legacy_check(relock_client *c);
/* A bridge value's suffix token into out (33 bytes) when bridge.value_suffix
 * asks for one, else ""; a failure is "OP NAME: no random bytes ...". */
relock_status relock__bridge_suffix(relock_lock *l, const char *op, char *out);

#endif
