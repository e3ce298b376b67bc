/*
 * The blocking API's quorum calls over the operation core (pollloop.c): a
 * quorum client's private poll loop, made by relock_connect() and freed
 * by relock_client_free().
 */
#ifndef RELOCK_CORE_POLL_H
#define RELOCK_CORE_POLL_H

#include "handle.h"

/* Prepares c->q (the inner core client is made at the first call); 0, or
 * -1 out of memory. */
int relock__qpoll_new(relock_client *c);
/* Closes the quorum's connections and frees c->q; accepts none. */
void relock__qpoll_free(relock_client *c);
/* relock__fan_drive() (drive.h) runs on this loop. */

#endif
