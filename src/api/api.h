/*
 * Between the files of the API layer (src/api/): the owner record
 * (owner.c) and new lock handles (lock.c).  Nothing below src/api/
 * includes this header.
 */
#ifndef RELOCK_API_H
#define RELOCK_API_H

#include "base.h"

/* owner.c: with owner_info, write (after acquire and extend) or delete
 * (before release) the holder's host, pid and start time beside the lock,
 * with the lease as its TTL, only while the lock key still holds l's value
 * (and fence): a stale handle never touches another holder's record.
 * Informational: failures are ignored. */
void relock__owner_note(relock_lock *l, int held);
/* Checks an owner pid and text (relock_config_set_owner()): RELOCK_OK, or
 * RELOCK_EINVAL recorded in e. */
relock_status relock__owner_check(relock__err *e, long pid, const char *text);

/* A new lock handle for NAME (checked as relock_acquire() checks it). */
relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
                               relock_lock **out);

#endif
