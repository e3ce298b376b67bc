/*
 * Between the files of the API layer (src/api/): the choice of algorithm
 * (mode.c) and the owner record (owner.c).  Nothing below src/api/
 * includes this header.
 */
#ifndef RELOCK_API_H
#define RELOCK_API_H

#include "base.h"

/* Mode selection from configuration and probe (design.md §4.1). */
relock_status relock__select_mode(relock_client *c);

/* owner.c: with owner_info, write (after acquire and extend) or delete
 * (before release) the holder's host, pid and start time beside the lock,
 * with the lease as its TTL, only while the lock key still holds l's value
 * (and fence): a stale handle never touches another holder's record.
 * Informational: failures are ignored. */
void relock__owner_note(relock_lock *l, int held);
/* The text of l's owner record (owner_info): host, pid, the time the lock
 * was won (or now) and the owner's text, for the owner-record machine
 * (ownrec.h).  Reads the host name, the pid and the wall clock. */
void relock__owner_info(const relock_lock *l, char *info, size_t n);
/* Checks an owner pid and text (relock_config_set_owner()): RELOCK_OK, or
 * RELOCK_EINVAL recorded in e. */
relock_status relock__owner_check(relock__err *e, long pid, const char *text);

/* Fairness after a release that woke waiters (lock.c): the releaser stays
 * away from that lock for a moment.  relock__yield_note() after such a
 * release; relock__yield_ms(): how long an acquire of l waits first. */
void relock__yield_note(relock_lock *l);
long long relock__yield_ms(const relock_lock *l);
/* A new lock handle for NAME (checked as relock_acquire() checks it). */
relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
                               relock_lock **out);

#endif
