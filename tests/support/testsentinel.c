/* testsentinel: see testsentinel.h. */
#include "testsentinel.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

int testsentinel_start(testsrv *master, testsrv *replica, testsrv *sent, int nsent)
{
    if (testsrv_start(master, NULL) != 0)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", master->port);
    const char *rargs[] = {"--replicaof", "127.0.0.1", port, NULL};
    if (testsrv_start(replica, rargs) != 0)
        return -1;
    if (testsrv_await(replica, 15000, "master_link_status:up", "INFO %s",
                              "replication") != 0) {
        fprintf(stderr, "setup: the replica did not sync within 15 s\n");
        return -1;
    }
    for (int i = 0; i < nsent; i++)
        if (testsrv_start_sentinel(&sent[i], "m", master->port) != 0)
            return -1;
    /* A failover needs every sentinel to know the replica and the others
     * (hello messages every 2 s): wait for that, bounded. */
    char others[48];
    snprintf(others, sizeof others, "num-other-sentinels %d ", nsent - 1);
    for (int i = 0; i < nsent; i++) {
        if (testsrv_await(&sent[i], 30000, "num-slaves 1 ", "SENTINEL MASTER %s", "m") !=
                0 ||
            testsrv_await(&sent[i], 30000, others, "SENTINEL MASTER %s", "m") != 0) {
            fprintf(stderr, "setup: sentinel %d did not discover the others within 30 s\n", i);
            return -1;
        }
    }
    return 0;
}

void testsentinel_stop(testsrv *master, testsrv *replica, testsrv *sent, int nsent)
{
    for (int i = 0; i < nsent; i++)
        testsrv_stop(&sent[i]);
    testsrv_stop(master);
    testsrv_stop(replica);
}

relock_config *testsentinel_config(const testsrv *sent, int dead_port, const char *name)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char addrs[128];
    snprintf(addrs, sizeof addrs, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             dead_port, sent[0].port, sent[1].port, sent[2].port);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "500"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "connect_timeout_ms", "500"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", name), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", addrs), RELOCK_OK);
    return cfg;
}
