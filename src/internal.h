/*
 * All of the library core's private headers at once (prefix relock__;
 * nothing here is exported), for the tests and for files that want every
 * layer.  The library's own files include the header of each layer they
 * use instead: base.h (leaves), handle.h (the handles), routing.h,
 * engine/engine.h (the engine), algo.h (what the API layer
 * calls); src/api/api.h and compat/compat.h are above the core and not
 * included here.
 */
#ifndef RELOCK_INTERNAL_H
#define RELOCK_INTERNAL_H

#include "base.h"
#include "handle.h"
#include "routing.h"
#include "algo.h"

#endif
