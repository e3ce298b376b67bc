/*
 * torture_section: the critical section that `relock run` runs as CMD in
 * the torture runner's `relock run` workers (run_driver.c).  It is the
 * section of the library and classic workers (wk_section_fenced() in
 * tests/interop/worker.c): enter line, fenced read with the token relock
 * gave it (RELOCK_FENCE), the fault the runner asked for, hold, fenced
 * write, exit line.
 *
 *   torture_section --log FILE --kind K --resource-port P --counter C
 *                   --hold-ms MS --seed S [--fault-file F]
 *   torture_section --clock-probe
 *
 * Its log lines carry its process group as their id: the group of the
 * slot's driver, which also holds relock run, so that the runner's kills
 * and stops of a slot and the lines of its sections name the same id.
 * CMD cannot know its lease (relock renews it in the background): the
 * enter line says 0, and the checker learns from relock run's exit code
 * whether the lock was lost (run_driver.c logs "lost ... cli").
 *
 * --clock-probe prints "MONO_NS REAL_NS" and exits: the runner checks
 * that libfaketime moves the wall clock of a skewed worker and leaves its
 * monotonic clock, the log's one clock, alone.
 *
 * Exit codes: 0 done, 2 usage, 70 the resource server failed (not 1, 3 or
 * 4, which relock run uses for its own outcomes).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "worker.h"

static int lease_unknown(void *ctx)
{
    (void)ctx;
    return 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: torture_section --log FILE --kind K --resource-port P --counter C "
                    "--hold-ms MS --seed S [--fault-file F]\n"
                    "       torture_section --clock-probe\n");
    exit(2);
}

static long long number(const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        usage();
    return v;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"log", required_argument, NULL, 'l'},        {"kind", required_argument, NULL, 'k'},
        {"resource-port", required_argument, NULL, 'R'}, {"counter", required_argument, NULL, 'c'},
        {"hold-ms", required_argument, NULL, 'H'},    {"seed", required_argument, NULL, 's'},
        {"fault-file", required_argument, NULL, 'F'}, {"clock-probe", no_argument, NULL, 'P'},
        {NULL, 0, NULL, 0}};
    wk_opts o;
    memset(&o, 0, sizeof o);
    o.hold_ms = -1;
    o.skew_margin_ms = -1;
    const char *kind = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            o.log = optarg;
            break;
        case 'k':
            kind = optarg;
            break;
        case 'R':
            o.resource_port = (int)number(optarg, 1, 65535);
            break;
        case 'c':
            o.counter = optarg;
            break;
        case 'H':
            o.hold_ms = (long)number(optarg, 0, 60000);
            break;
        case 's':
            o.seed = (uint64_t)number(optarg, 0, (long long)(~0ULL >> 1));
            break;
        case 'F':
            o.fault_file = optarg;
            break;
        case 'P': {
            struct timespec real;
            clock_gettime(CLOCK_REALTIME, &real);
            printf("%llu %llu\n", (unsigned long long)wk_mono_ns(),
                   (unsigned long long)real.tv_sec * 1000000000ULL +
                       (unsigned long long)real.tv_nsec);
            return 0;
        }
        default:
            usage();
        }
    }
    if (optind != argc || !o.log || !kind || !o.resource_port || !o.counter)
        usage();
    const char *fence = getenv("RELOCK_FENCE");
    if (!fence || !*fence) {
        fprintf(stderr, "torture_section: RELOCK_FENCE is not set (run me under relock run)\n");
        return 2;
    }
    long long token = number(fence, 0, (long long)(~0ULL >> 1));
    wk_worker w;
    wk_init(&w, &o, kind);
    /* The id of the lines: the worker's, which its "run" and "lost" lines
     * carry: relock run's process group (CMD has a group of its own). */
    pid_t g = getpgid(getppid());
    w.id = (long)(g > 0 ? g : getpgrp());
    redisContext *res = wk_try_connect(o.resource_port);
    if (!res)
        return 70;
    int st = wk_section_fenced(&w, res, token, 0, lease_unknown, NULL);
    redisFree(res);
    return st == 0 ? 0 : 70;
}
