/*
 * Between the files of the API layer (src/api/): the owner's checks
 * (owner.c) and new lock handles (lock.c).  Nothing below src/api/
 * includes this header.
 */
#ifndef RELOCK_API_H
#define RELOCK_API_H

#include "base.h"

/* Checks an owner pid and text (relock_config_set_owner()): RELOCK_OK, or
 * RELOCK_EINVAL recorded in e. */
relock_status relock__owner_check(relock__err *e, long pid, const char *text);

/* A new lock handle for NAME (checked as relock_acquire() checks it). */
relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
                               relock_lock **out);

#endif
