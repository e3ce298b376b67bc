/*
 * Bridge mode, the migration shim.  Its lock algorithm is the timestamp
 * algorithm of legacy.c with a TTL on every value (see there).  The marker
 * of legacy writers that `relock scan` reads, which bridge and modern
 * clients write alike, is written by the operation core
 * (src/core/operation.c), not here.
 */
#include "compat.h"
