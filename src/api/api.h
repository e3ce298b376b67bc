/* Between the files of the API layer (src/api/); no lower layer includes it. */
#ifndef RELOCK_API_H
#define RELOCK_API_H

#include "base.h"

/* A new lock handle for NAME (checked as relock_acquire() checks it). */
relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
                               relock_lock **out);

/* Fills a new client (zeroed) from cfg: its settings, scripts and random
 * seed (salt tells apart clients made in the same millisecond). */
void relock__client_init(relock_client *c, const relock_config *cfg, const void *salt);

/* Refuses, on a quorum, the settings it cannot honour (durability,
 * lock_delay_ms). */
relock_status relock__quorum_check(relock_client *c);

#endif
