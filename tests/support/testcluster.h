/*
 * testcluster: the Redis Cluster the Cluster tests start themselves (both
 * clients'), node by node on free loopback ports.
 */
#ifndef RELOCK_TESTCLUSTER_H
#define RELOCK_TESTCLUSTER_H

#include <stddef.h>

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

/* A test's Cluster for the look-ups below: nodes[0] is asked where a key
 * lives, and the port of its MOVED reply is found among nodes[i].port
 * and, where fronts is not NULL, fronts[i].port (a node's proxy, which
 * the node announces). */
typedef struct {
    testsrv *nodes;
    const testsrv *fronts;
    int n;
} testcluster_view;

/* The index of the node serving key now (a cmocka failure when none). */
int testcluster_owner(const testcluster_view *c, const char *key);
/* Writes to out a lock name, stem followed by a number, whose key node
 * want serves (a cmocka failure when none of 1000 is). */
void testcluster_name_on(const testcluster_view *c, int want, const char *stem, char *out,
                         size_t len);

#endif
