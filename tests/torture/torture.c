/*
 * relock-torture [--short | --long] [--seed S] [--only ID] [--keep]
 *                [--markdown] [--dir DIR]
 *
 * Runs the scenario table (see torture.h and docs/safety.md, "Fault
 * testing"), prints a report per scenario and a table, and exits 0 when
 * every target is met, 1 when one is missed (or a worker crashed, or a
 * scenario ran too few sections to mean anything), 2 when the runner could
 * not do its job (servers, usage).
 *
 *   (default)  the table, about 2 minutes (./dev torture)
 *   --short    scenarios 1, 2 and 4, about 30 s (ctest torture_short)
 *   --long     the table for about 10 minutes (./dev torture --long)
 *
 * The files of every scenario (the shared log, the resource's record, the
 * workers' stderr, the servers' directories) stay in DIR (default: a new
 * /tmp/relock-torture-XXXXXX) when a target is missed or with --keep.
 * Programs: RELOCK_TORTURE_{WORKER,CLASSIC,CLI,PROXY,DRIVER,SECTION} in the
 * environment, else the paths CMake compiled in.
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "torture.h"

volatile int t_interrupted;

/* Every scenario's workers share one lock name and the fenced resource.
 * Leases are short so that a dead or paused holder is overtaken quickly;
 * sections hold the lock 0..20 ms. */

static const scenario s1 = {
    .id = "1", .title = "modern",
    .faults = "holders killed and paused past the TTL, any relock process killed or stopped, "
              "proxy delays, dropped connections and ambiguous replies, restarts with "
              "appendfsync always",
    .mode = "modern", .unit = "ms", .ttl_ms = 300, .margin_ms = -1,
    .nslots = 5, .type = {W_LIB, W_LIB, W_LIB, W_CLI, W_CLI},
    .aof = 1, .restart_ms = {3000, 6000}, .fault_ms = {400, 900},
    .w_hkill = 2, .w_hstop = 3, .w_xkill = 1, .w_xstop = 2, .w_proxy = 5,
    .pause_ms = {450, 900}, .hold_ms = 20, .duration_ms = 25000, .target = T_SAFE};

/* Sections of up to 400 ms, so that restarts find holders inside them. */
static const scenario s1n = {
    .id = "1n", .title = "modern, no persistence",
    .faults = "as 1, but the server restarts without persistence, and sections hold up to "
              "400 ms of a 1 s lease (informational: a restart forgets every lock and fence "
              "counter)",
    .mode = "modern", .unit = "ms", .ttl_ms = 1000, .margin_ms = -1,
    .nslots = 5, .type = {W_LIB, W_LIB, W_LIB, W_CLI, W_CLI},
    .aof = 0, .restart_ms = {1500, 3000}, .fault_ms = {600, 1200},
    .w_hkill = 2, .w_hstop = 3, .w_xkill = 1, .w_xstop = 2, .w_proxy = 5,
    .pause_ms = {1100, 1600}, .hold_ms = 400, .duration_ms = 12000, .target = T_INFO};

/* Seconds, as classic clients keep them: a stop must outlast the lease and
 * the two units the readers add (a value written at t holds until the
 * second after floor(t) + 2 ends). */
static const scenario s2 = {
    .id = "2", .title = "bridge + classic clients",
    .faults = "as 1 (classic clients: killed anywhere, paused only while holding); "
              "clock unit s",
    .mode = "bridge", .unit = "s", .ttl_ms = 1000, .margin_ms = -1,
    .nslots = 5, .type = {W_LIB, W_LIB, W_CLI, W_CLASSIC, W_CLASSIC},
    .aof = 1, .restart_ms = {4000, 7000}, .fault_ms = {1300, 2800},
    .w_hkill = 2, .w_hstop = 2, .w_xkill = 1, .w_xstop = 1, .w_proxy = 4,
    .pause_ms = {3200, 4000}, .hold_ms = 20, .duration_ms = 30000, .target = T_SAFE};

static const scenario s3 = {
    .id = "3", .title = "legacy, skew <= margin",
    .faults = "clocks +0, +150, +300, +300 ms, legacy.skew_margin_ms = 300; as 1 otherwise; "
              "clock unit ms",
    .mode = "legacy", .unit = "ms", .ttl_ms = 300, .margin_ms = 300,
    .nslots = 4, .type = {W_LIB, W_LIB, W_LIB, W_CLI}, .skew_ms = {0, 150, 300, 300},
    .aof = 1, .restart_ms = {3000, 6000}, .fault_ms = {600, 1200},
    .w_hkill = 2, .w_hstop = 3, .w_xkill = 1, .w_xstop = 2, .w_proxy = 5,
    .pause_ms = {800, 1300}, .hold_ms = 20, .duration_ms = 20000, .target = T_NO_OVERLAP};

static const scenario s4 = {
    .id = "4", .title = "legacy, skew > margin",
    .faults = "clocks +2000 ms on one library and one relock run worker, "
              "legacy.skew_margin_ms = 100, a classic client; no other fault "
              "(negative control); clock unit ms",
    .mode = "legacy", .unit = "ms", .ttl_ms = 300, .margin_ms = 100,
    .nslots = 5, .type = {W_LIB, W_LIB, W_LIB, W_CLI, W_CLASSIC},
    .skew_ms = {0, 0, 2000, 2000, 0},
    .aof = 1, .hold_ms = 20, .duration_ms = 10000, .target = T_OVERLAPS};

typedef struct form_entry {
    const scenario *sc;
    long ms;
} form_entry;

static const form_entry table_form[] = {{&s1, 25000}, {&s1n, 12000}, {&s2, 30000},
                                        {&s3, 20000}, {&s4, 10000}};
static const form_entry short_form[] = {{&s1, 9000}, {&s2, 12000}, {&s4, 5000}};
static const form_entry long_form[] = {{&s1, 150000}, {&s1n, 60000}, {&s2, 180000},
                                       {&s3, 120000}, {&s4, 45000}};

#ifndef TORTURE_WORKER_PATH
#define TORTURE_WORKER_PATH "relock_worker"
#define TORTURE_CLASSIC_PATH "classic_lock"
#define TORTURE_CLI_PATH "relock"
#define TORTURE_PROXY_PATH "relock-compat-proxy"
#define TORTURE_DRIVER_PATH "torture_cli"
#define TORTURE_SECTION_PATH "torture_section"
#endif

static const char *path_of(const char *env, const char *built)
{
    const char *p = getenv(env);
    return p && *p ? p : built;
}

static const char *faketime_lib(void)
{
    static const char *const paths[] = {
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], R_OK) == 0)
            return paths[i];
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
    t_interrupted = 1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void judge(const scenario *sc, outcome *o)
{
    const ck_torture *t = &o->t;
    o->met = 0;
    if (!o->ran) {
        snprintf(o->verdict, sizeof o->verdict, "NOT RUN: %s", o->infra);
        return;
    }
    if (o->bad_exits) {
        snprintf(o->verdict, sizeof o->verdict, "FAILED: %d worker(s) crashed or failed: %s",
                 o->bad_exits, o->bad_desc);
        return;
    }
    if (o->stragglers) {
        snprintf(o->verdict, sizeof o->verdict,
                 "FAILED: %d worker(s) still running %d s after the deadline", o->stragglers,
                 10);
        return;
    }
    if (t->ops != o->resource_accepted + o->resource_refused) {
        snprintf(o->verdict, sizeof o->verdict,
                 "FAILED: the resource counted %lld operations, its record holds %ld",
                 o->resource_accepted + o->resource_refused, t->ops);
        return;
    }
    /* Too little work proves nothing; a kind of worker that never got in
     * (a broken command line, say) leaves its part of the claim untested. */
    if (sc->target != T_INFO && t->sections < 20) {
        snprintf(o->verdict, sizeof o->verdict, "FAILED: only %ld sections completed",
                 t->sections);
        return;
    }
    for (int k = 0; sc->target != T_INFO && k < t->base.nkinds; k++) {
        if (t->base.kinds[k].sections == 0) {
            snprintf(o->verdict, sizeof o->verdict,
                     "FAILED: the %s workers completed no section", t->base.kinds[k].name);
            return;
        }
    }
    switch (sc->target) {
    case T_SAFE:
        o->met = t->overlaps == 0 && t->stale_accepted == 0;
        snprintf(o->verdict, sizeof o->verdict, "0 overlaps, 0 stale writes accepted: %s",
                 o->met ? "met" : "MISSED");
        break;
    case T_NO_OVERLAP:
        o->met = t->overlaps == 0;
        snprintf(o->verdict, sizeof o->verdict, "0 overlaps: %s", o->met ? "met" : "MISSED");
        break;
    case T_OVERLAPS:
        o->met = t->overlaps > 0;
        snprintf(o->verdict, sizeof o->verdict, "overlaps expected (negative control): %s",
                 o->met ? "seen" : "NONE SEEN");
        break;
    case T_INFO:
        o->met = 1;
        snprintf(o->verdict, sizeof o->verdict, "informational");
        break;
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: relock-torture [--short | --long] [--seed S] [--only ID] [--keep]\n"
               "                      [--markdown] [--dir DIR]\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"short", no_argument, NULL, 's'},     {"long", no_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 'S'}, {"only", required_argument, NULL, 'o'},
        {"keep", no_argument, NULL, 'k'},      {"markdown", no_argument, NULL, 'm'},
        {"dir", required_argument, NULL, 'd'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const form_entry *form = table_form;
    size_t nform = sizeof table_form / sizeof table_form[0];
    const char *form_name = "table";
    uint64_t seed = 1;
    const char *only = NULL, *dir = NULL;
    int keep = 0, markdown = 0, opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            form = short_form;
            nform = sizeof short_form / sizeof short_form[0];
            form_name = "short";
            break;
        case 'l':
            form = long_form;
            nform = sizeof long_form / sizeof long_form[0];
            form_name = "long";
            break;
        case 'S': {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end) {
                usage(stderr);
                return 2;
            }
            break;
        }
        case 'o':
            only = optarg;
            break;
        case 'k':
            keep = 1;
            break;
        case 'm':
            markdown = 1;
            break;
        case 'd':
            dir = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    /* Children inherit stdout: nothing buffered must be written twice. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    tpaths paths = {
        path_of("RELOCK_TORTURE_WORKER", TORTURE_WORKER_PATH),
        path_of("RELOCK_TORTURE_CLASSIC", TORTURE_CLASSIC_PATH),
        path_of("RELOCK_TORTURE_CLI", TORTURE_CLI_PATH),
        path_of("RELOCK_TORTURE_PROXY", TORTURE_PROXY_PATH),
        path_of("RELOCK_TORTURE_DRIVER", TORTURE_DRIVER_PATH),
        path_of("RELOCK_TORTURE_SECTION", TORTURE_SECTION_PATH),
        faketime_lib(),
    };
    /* Processes a killed worker leaves behind come to us, to be reaped. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        perror("relock-torture: PR_SET_CHILD_SUBREAPER");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char base[256];
    if (dir) {
        snprintf(base, sizeof base, "%s", dir);
    } else {
        snprintf(base, sizeof base, "/tmp/relock-torture-XXXXXX");
        if (!mkdtemp(base)) {
            perror("relock-torture: mkdtemp");
            return 2;
        }
    }
    const scenario *ran[16];
    outcome *outs = calloc(nform, sizeof *outs);
    if (!outs)
        return 2;
    int n = 0, missed = 0, infra = 0;
    printf("relock-torture: %s form, seed %llu, files in %s\n", form_name,
           (unsigned long long)seed, base);
    for (size_t i = 0; i < nform && !t_interrupted; i++) {
        const scenario *sc = form[i].sc;
        if (only && strcmp(only, sc->id) != 0)
            continue;
        printf("\n== scenario %s: %s (%.0f s)\n", sc->id, sc->title, form[i].ms / 1000.0);
        run_scenario(sc, form[i].ms, seed, &paths, base, &outs[n]);
        judge(sc, &outs[n]);
        report_scenario(stdout, sc, &outs[n]);
        if (!outs[n].ran)
            infra = 1;
        else if (!outs[n].met)
            missed = 1;
        ran[n++] = sc;
    }
    printf("\n");
    report_table(stdout, ran, outs, n, markdown);
    int rc = infra ? 2 : missed ? 1 : 0;
    if (rc == 0 && !keep && !dir) {
        nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    } else {
        printf("\nfiles kept in %s (per scenario: sections.log, resource.ops, workers.err)\n",
               base);
    }
    if (rc)
        printf("relock-torture: %s\n", infra ? "could not run every scenario" : "a target was missed");
    free(outs);
    return rc;
}
