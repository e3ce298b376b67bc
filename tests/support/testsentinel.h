/*
 * testsentinel: the Sentinel setup the Sentinel tests start themselves
 * (both clients'): a master "m", its replica and NSENT sentinels, each on
 * a free loopback port.
 */
#ifndef RELOCK_TESTSENTINEL_H
#define RELOCK_TESTSENTINEL_H

#include "relock.h"
#include "testsrv.h"

/* Starts the master, its replica (synced) and nsent sentinels that know
 * each other and the replica (a failover needs that); 0, or -1 with a line
 * on stderr. */
int testsentinel_start(testsrv *master, testsrv *replica, testsrv *sent, int nsent);
void testsentinel_stop(testsrv *master, testsrv *replica, testsrv *sent, int nsent);
/* Modern mode, 500 ms timeouts, master name through the sentinels at
 * dead_port (nothing listens there: a sentinel that is down) and sent[0..2]. */
relock_config *testsentinel_config(const testsrv *sent, int dead_port, const char *name);

#endif
