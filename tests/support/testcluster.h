/*
 * testcluster: the Redis Cluster the Cluster tests start themselves (both
 * clients'), node by node on free loopback ports.
 */
#ifndef RELOCK_TESTCLUSTER_H
#define RELOCK_TESTCLUSTER_H

#include "testsrv.h"

/* Starts s as a Cluster node (node timeout 2 s) with its bus on a free
 * port, written to *bus (a free port plus 10000, the default, may be out
 * of range); three tries.  0, or -1. */
int testcluster_node(testsrv *s, int *bus);
/* Waits (bounded to 30 s) until s's reply to "cmd arg" contains want;
 * 0, or -1 with a line on stderr. */
int testcluster_await(testsrv *s, const char *cmd, const char *arg, const char *want);
/* redis-cli --cluster create over the n masters (no replicas), bounded to
 * 60 s.  0, or -1 with a line on stderr. */
int testcluster_create(const testsrv *masters, int n);

#endif
