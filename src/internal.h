/*
 * All of the library core's private headers at once, for the tests; the
 * library's own files include the header of each layer they use instead.
 * src/api/api.h and compat/compat.h are above the core and not included.
 */
#ifndef RELOCK_INTERNAL_H
#define RELOCK_INTERNAL_H

#include "base.h"
#include "handle.h"
#include "routing.h"
#include "algo.h"

#endif
