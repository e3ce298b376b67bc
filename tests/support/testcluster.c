/* testcluster: see testcluster.h. */
#include "testcluster.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

int testcluster_node(testsrv *s, int *bus)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        char busp[16];
        *bus = testsrv_free_port();
        snprintf(busp, sizeof busp, "%d", *bus);
        const char *args[] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "2000", "--cluster-port", busp, NULL};
        if (testsrv_start(s, args) == 0)
            return 0;
    }
    return -1;
}

int testcluster_await(testsrv *s, const char *cmd, const char *arg, const char *want)
{
    char fmt[64];
    snprintf(fmt, sizeof fmt, "%s %%s", cmd);
    if (testsrv_await(s, 30000, want, fmt, arg) == 0)
        return 0;
    fprintf(stderr, "node on port %d: no \"%s\" in %s %s within 30 s\n", s->port, want, cmd,
            arg);
    return -1;
}

int testcluster_create(const testsrv *masters, int n)
{
    enum { MAX = 16 };
    if (n < 1 || n > MAX)
        return -1;
    char addr[MAX][32];
    const char *argv[MAX + 8] = {"redis-cli", "--cluster", "create"};
    int k = 3;
    for (int i = 0; i < n; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", masters[i].port);
        argv[k++] = addr[i];
    }
    argv[k++] = "--cluster-replicas";
    argv[k++] = "0";
    argv[k++] = "--cluster-yes";
    argv[k] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = tu_wait_child(pid, 60000);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "setup: redis-cli --cluster create failed (status %d)\n", status);
        return -1;
    }
    return 0;
}

static int node_of_port(const testcluster_view *c, int port)
{
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].port == port || (c->fronts && c->fronts[i].port == port))
            return i;
    return -1;
}

int testcluster_owner(const testcluster_view *c, const char *key)
{
    /* nodes[0] answers a read itself or says MOVED. */
    char *v = testsrv_cmd(&c->nodes[0], "EXISTS %s", key);
    assert_non_null(v);
    int who = 0;
    if (strncmp(v, "MOVED ", 6) == 0)
        who = node_of_port(c, atoi(strrchr(v, ':') + 1));
    free(v);
    assert_true(who >= 0);
    return who;
}

void testcluster_name_on(const testcluster_view *c, int want, const char *stem, char *out,
                         size_t len)
{
    for (int i = 0; i < 1000; i++) {
        snprintf(out, len, "%s%d", stem, i);
        if (testcluster_owner(c, out) == want)
            return;
    }
    fail_msg("no name on node %d", want);
}
