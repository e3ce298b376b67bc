/*
 * The lost-update experiment: two processes each add 1 to one counter N
 * times by GET, +1, SET.  Without a lock their reads and writes interleave
 * and updates are lost; with relock around each increment the count is
 * exact.
 *
 *   relock-demo redis://127.0.0.1:6379 2000
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "relock.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int worker(const char *url, const char *host, int port, long n, int locked)
{
    redisContext *rc = redisConnect(host, port);
    if (!rc || rc->err) {
        fprintf(stderr, "relock-demo: cannot connect to %s:%d\n", host, port);
        return 4;
    }
    relock_client *c = NULL;
    if (locked) {
        relock_config *cfg = relock_config_new();
        if (!cfg || relock_config_set_url(cfg, url) != RELOCK_OK ||
            relock_config_set(cfg, "mode", "modern") != RELOCK_OK) {
            fprintf(stderr, "relock-demo: bad URL %s\n", url);
            return 2;
        }
        relock_status st = relock_connect(cfg, &c);
        relock_config_free(cfg);
        if (st != RELOCK_OK) {
            fprintf(stderr, "relock-demo: %s\n", c ? relock_client_error(c)->message : "no memory");
            return 4;
        }
    }
    for (long i = 0; i < n; i++) {
        relock_lock *l = NULL;
        if (locked) {
            relock_status st = relock_acquire(c, "demo-counter", 5000, 30000, &l);
            if (st != RELOCK_OK) {
                fprintf(stderr, "relock-demo: acquire: %s\n", relock_client_error(c)->message);
                return 1;
            }
        }
        redisReply *r = redisCommand(rc, "GET demo-counter-value");
        long v = (r && r->type == REDIS_REPLY_STRING) ? atol(r->str) : 0;
        if (r)
            freeReplyObject(r);
        r = redisCommand(rc, "SET demo-counter-value %ld", v + 1);
        if (r)
            freeReplyObject(r);
        if (locked) {
            if (relock_release(l) != RELOCK_OK) {
                fprintf(stderr, "relock-demo: release: %s\n", relock_client_error(c)->message);
                return 3;
            }
            relock_lock_free(l);
        }
    }
    relock_client_free(c);
    redisFree(rc);
    return 0;
}

static long run(const char *url, const char *host, int port, long n, int locked, double *secs)
{
    redisContext *rc = redisConnect(host, port);
    if (!rc || rc->err)
        return -1;
    redisReply *r = redisCommand(rc, "SET demo-counter-value 0");
    if (r)
        freeReplyObject(r);
    double t0 = now_s();
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0)
            _exit(worker(url, host, port, n, locked));
    }
    int failed = 0;
    for (int k = 0; k < 2; k++) {
        int status = 0;
        waitpid(kids[k], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    *secs = now_s() - t0;
    r = redisCommand(rc, "GET demo-counter-value");
    long v = (r && r->type == REDIS_REPLY_STRING) ? atol(r->str) : -1;
    if (r)
        freeReplyObject(r);
    redisFree(rc);
    return failed ? -1 : v;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: relock-demo redis://HOST:PORT N\n");
        return 2;
    }
    const char *url = argv[1];
    long n = atol(argv[2]);
    char host[128];
    int port = 0;
    if (n <= 0 || sscanf(url, "redis://%127[^:]:%d", host, &port) != 2) {
        fprintf(stderr, "relock-demo: expected redis://HOST:PORT and N > 0\n");
        return 2;
    }
    double t_plain, t_locked;
    long plain = run(url, host, port, n, 0, &t_plain);
    long locked = run(url, host, port, n, 1, &t_locked);
    if (plain < 0 || locked < 0) {
        fprintf(stderr, "relock-demo: a worker failed\n");
        return 1;
    }
    printf("  2 processes x %ld increments, expected %ld\n", n, 2 * n);
    printf("  without a lock: %6ld  (%ld updates lost)  %.2f s\n", plain, 2 * n - plain, t_plain);
    printf("  with relock:    %6ld  (%ld updates lost)  %.2f s\n", locked, 2 * n - locked,
           t_locked);
    return locked == 2 * n ? 0 : 1;
}
