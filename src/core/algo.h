/*
 * What the drivers offer the API (src/api/): the algorithm tables and the
 * choice of mode (mode.c), the wait planner's input.
 */
#ifndef RELOCK_ALGO_H
#define RELOCK_ALGO_H

#include "engine/waitplan.h"
#include "durable.h"
#include "routing.h"

extern const relock__algo relock__algo_modern;
extern const relock__algo relock__algo_quorum;
extern const relock__algo relock__algo_legacy;
extern const relock__algo relock__algo_bridge;

/* Several servers (pollloop.c, the quorum): checks the mode and prepares the
 * servers. */
relock_status relock__quorum_setup(relock_client *c);

/* The wait planner's input (waitplan.h) as far as the client's settings
 * and lock l give it, with fresh random bits: the waiter (notice.c) fills
 * in the attempt's own fields. */
relock__wait_in relock__wait_in_of(relock_lock *l);

/* The algorithm for c's mode, once its connection is probed (design.md
 * §4.1; src/core/mode.c). */
relock_status relock__select_mode(relock_client *c);

#endif
