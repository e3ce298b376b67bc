/*
 * relock_sim: the deterministic simulator's command line (./dev sim).
 *
 *   relock_sim --list
 *   relock_sim --seed S [--scenario NAME] [--trace]     one run, replayed exactly
 *   relock_sim [--seeds N] [--minutes M] [--scenario NAME] [--first S]
 *   relock_sim --explore [--scenario NAME] [--depth D] [--faults K] [--max-runs R]
 *   relock_sim --path 0,2,1 --scenario NAME [--depth D] [--faults K]   one DFS path
 *   relock_sim --boundaries [--scenario NAME]   every fault at every command
 *   relock_sim --at STEP:FAULT --scenario NAME [--trace]   one of those runs
 *   relock_sim --short       what ctest runs: exploration, seeds, negative controls
 *   relock_sim --negative    the negative controls alone (each must fail)
 *
 * Exit status: 0 when nothing was violated (or, with --expect-violation
 * and for the negative controls, when a violation was found), 1 otherwise,
 * 2 for a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

/* The short run (ctest sim_short).  Under AddressSanitizer each switch of
 * coroutine costs several times more: a smaller share, same kinds. */
#if defined(__SANITIZE_ADDRESS__)
#define SHORT_EXPLORE 80
#define SHORT_BOUNDARIES 12
#define SHORT_SEEDS 60
#else
#define SHORT_EXPLORE 250
#define SHORT_BOUNDARIES 30
#define SHORT_SEEDS 150
#endif

static double secs(void)
{
    struct timespec ts;
    /* The simulator's clock_gettime answers the real clock outside runs. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int count_scenarios(int negative)
{
    int n = 0;
    for (const sim_scenario *s = sim_scenarios; s->name; s++)
        n += s->negative == negative && !s->manual;
    return n;
}

/* Seeds that name no scenario pick one of the positive ones. */
static const sim_scenario *scenario_of_seed(unsigned long long seed)
{
    int n = count_scenarios(0), want = (int)(seed % (unsigned long long)n);
    for (const sim_scenario *s = sim_scenarios; s->name; s++)
        if (!s->negative && !s->manual && want-- == 0)
            return s;
    return NULL;
}

/* A seeded run varies what the scenario leaves open: the time per command,
 * how often faults come and how many a run may have (the same seed, the
 * same variation, so --seed replays it). */
static void vary(sim_scenario *sc, sim_opts *o, unsigned long long seed)
{
    static const long ticks[] = {1, 1, 2, 5};
    static const double rates[] = {0.03, 0.06, 0.06, 0.12};
    static const int faults[] = {1, 3, 3, 6};
    unsigned long long x = seed * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    sc->tick_ms = sc->tick_ms > 1 ? sc->tick_ms : ticks[x % 4];
    o->fault_rate = rates[(x >> 8) % 4];
    o->max_faults = faults[(x >> 16) % 4];
}

static void print_path(const sim_result *r)
{
    printf("choice path (--path):");
    for (int i = 0; i < r->nchoices; i++)
        printf("%s%d", i ? "," : " ", r->picks[i]);
    printf("\n");
}

static void default_opts(sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->depth = 24;
    o->max_faults = 1;
    o->fault_rate = 0.06;
    o->max_steps = 3000;
    o->fault_step = -1;
}

/* Every fault at every command of the default schedule (choice 0
 * everywhere), up to max_step commands: what it_boundaries does against
 * real servers, here for every scenario.  Returns the violations. */
static int boundaries(const sim_scenario *sc, long max_step, int quiet, long *runs_out)
{
    double t0 = secs();
    sim_result *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    sim_opts o;
    default_opts(&o);
    o.dfs = 1;
    o.depth = 0;
    o.seed = 1;
    /* The default schedule itself, without a fault, first. */
    int bad = sim_run(sc, &o, r, 1) != 0;
    long n = r->steps < max_step ? r->steps : max_step;
    long runs = 1;
    if (bad && !quiet) {
        o.fault_step = 0;
        o.fault_kind = SF_NONE;
        sim_run(sc, &o, r, 0);
        printf("sim: VIOLATION in scenario %s, without a fault: %s\n", sc->name, r->msg);
        printf("replay: ./dev sim --scenario %s --at 0:0 --trace\n", sc->name);
    }
    for (long k = 0; k < n && !bad; k++) {
        for (int f = 1; f < SF_COUNT && !bad; f++) {
            if (!(sc->faults & SF_BIT(f)))
                continue;
            o.fault_step = k;
            o.fault_kind = f;
            runs++;
            if (sim_run(sc, &o, r, 1)) {
                bad = 1;
                if (!quiet) {
                    sim_run(sc, &o, r, 0);
                    printf("sim: VIOLATION in scenario %s, fault %d at command %ld: %s\n",
                           sc->name, f, k, r->msg);
                    printf("replay: ./dev sim --scenario %s --at %ld:%d --trace\n", sc->name, k,
                           f);
                }
            }
        }
    }
    double dt = secs() - t0;
    if (!quiet)
        printf("sim: %s: every fault at each of %ld command boundaries: %ld runs in %.1f s, "
               "%.0f runs/minute%s\n",
               sc->name, n, runs, dt, dt > 0 ? runs * 60.0 / dt : 0.0, bad ? ", VIOLATION" : "");
    free(r);
    if (runs_out)
        *runs_out = runs;
    return bad;
}

/* Random runs from seed first on: returns the number of violations. */
static int run_seeds(const sim_scenario *only, unsigned long long first, long nseeds,
                     double minutes, int expect, int quiet, long *runs_out, double *took)
{
    double t0 = secs();
    long runs = 0;
    int bad = 0;
    unsigned long long commands = 0;
    for (unsigned long long seed = first;; seed++) {
        if (nseeds > 0 && runs >= nseeds)
            break;
        if (nseeds <= 0 && secs() - t0 >= minutes * 60)
            break;
        sim_scenario var = *(only ? only : scenario_of_seed(seed));
        const sim_scenario *sc = &var;
        sim_opts o;
        default_opts(&o);
        o.seed = seed;
        vary(&var, &o, seed);
        sim_result *r = calloc(1, sizeof *r);
        if (!r)
            return 1;
        int v = sim_run(sc, &o, r, 1);
        runs++;
        commands += r->commands;
        if (v) {
            bad++;
            if (!expect) {
                /* The same seed again, keeping the trace this time. */
                if (!quiet)
                    sim_run(sc, &o, r, 0);
                printf("sim: VIOLATION in scenario %s, seed %llu: %s\n", sc->name, seed, r->msg);
                printf("replay: ./dev sim --seed %llu%s%s --trace\n", seed,
                       only ? " --scenario " : "", only ? sc->name : "");
                free(r);
                break;
            }
        }
        free(r);
        if (expect && bad)
            break;
    }
    double dt = secs() - t0;
    if (!quiet)
        printf("sim: %ld seeded runs (%llu commands) in %.1f s: %.0f runs/minute, %d violation%s\n",
               runs, commands, dt, dt > 0 ? runs * 60.0 / dt : 0.0, bad, bad == 1 ? "" : "s");
    if (runs_out)
        *runs_out = runs;
    if (took)
        *took = dt;
    return bad;
}

/* Depth-first over every choice up to the depth bound.  Returns the
 * number of violations (it stops at the first). */
static int explore(const sim_scenario *sc, int depth, int faults, long max_runs, int quiet,
                   int expect, long *runs_out, int *complete_out)
{
    static int path[4096];
    int npath = 0;
    long runs = 0;
    int bad = 0, complete = 0;
    long long choices = 0;
    double t0 = secs();
    sim_result *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    for (;;) {
        sim_opts o;
        default_opts(&o);
        o.dfs = 1;
        o.depth = depth;
        o.max_faults = faults;
        o.path = path;
        o.npath = npath;
        o.seed = 1;
        int v = sim_run(sc, &o, r, 1);
        runs++;
        choices += r->nchoices;
        if (v) {
            bad++;
            if (!expect) {
                if (!quiet)
                    sim_run(sc, &o, r, 0);
                printf("sim: VIOLATION in scenario %s (exploration run %ld): %s\n", sc->name, runs,
                       r->msg);
                print_path(r);
                printf("replay: ./dev sim --scenario %s --depth %d --faults %d --trace --path ",
                       sc->name, depth, faults);
                for (int i = 0; i < r->nchoices; i++)
                    printf("%s%d", i ? "," : "", r->picks[i]);
                printf("\n");
            }
            break;
        }
        /* The next path: the deepest choice with an alternative left. */
        int i = r->nchoices - 1;
        while (i >= 0 && r->picks[i] + 1 >= r->ns[i])
            i--;
        if (i < 0) {
            complete = 1;
            break;
        }
        for (int j = 0; j < i; j++)
            path[j] = r->picks[j];
        path[i] = r->picks[i] + 1;
        npath = i + 1;
        if (max_runs > 0 && runs >= max_runs)
            break;
    }
    double dt = secs() - t0;
    if (!quiet)
        printf("sim: %s: explored %ld executions (%lld choice points, depth %d, %d fault%s): %s "
               "in %.1f s, %.0f executions/minute%s\n",
               sc->name, runs, choices, depth, faults, faults == 1 ? "" : "s",
               complete ? "every path" : "bounded by --max-runs", dt,
               dt > 0 ? runs * 60.0 / dt : 0.0, bad ? ", VIOLATION" : "");
    free(r);
    if (runs_out)
        *runs_out = runs;
    if (complete_out)
        *complete_out = complete;
    return bad;
}

/* Replay: the same seeds run again, in the other order, after other runs,
 * must take the same choices and send the same commands.  0 when they do. */
static int replays(void)
{
    enum { N = 24 };
    unsigned long long sig[N];
    sim_result *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < N; j++) {
            int i = pass ? N - 1 - j : j;
            unsigned long long seed = 7001 + (unsigned long long)i * 7919;
            sim_scenario var = *scenario_of_seed(seed);
            sim_opts o;
            default_opts(&o);
            o.seed = seed;
            vary(&var, &o, seed);
            sim_run(&var, &o, r, 1);
            unsigned long long h = r->commands * 1000003ULL + (unsigned long long)r->steps;
            for (int k = 0; k < r->nchoices; k++)
                h = h * 31 + (unsigned long long)r->picks[k];
            if (pass == 0) {
                sig[i] = h;
            } else if (sig[i] != h) {
                printf("sim: seed %llu did not replay the same way\n", seed);
                bad = 1;
            }
        }
    }
    free(r);
    printf("sim: %d seeds replayed the same way, in the other order%s\n", N,
           bad ? ": NO" : "");
    return bad;
}

static int negatives(int quiet)
{
    int failed = 0;
    for (const sim_scenario *s = sim_scenarios; s->name; s++) {
        if (!s->negative)
            continue;
        long runs = 0, more = 0;
        int found = run_seeds(s, 1, 50, 0, 1, 1, &runs, NULL);
        if (!found && s->faults) {
            found = boundaries(s, 100000, 1, &more);
            runs += more;
        }
        if (!quiet || !found)
            printf("sim: negative control %s: %s after %ld run%s\n", s->name,
                   found ? "violation found, as it must be" : "NO VIOLATION FOUND", runs,
                   runs == 1 ? "" : "s");
        if (!found)
            failed = 1;
    }
    return failed;
}

static int parse_path(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0)
            return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: relock_sim [--list] [--scenario NAME] [--seed S | --seeds N | --minutes M]\n"
            "                  [--explore [--depth D] [--faults K] [--max-runs R]] [--path P]\n"
            "                  [--boundaries] [--at STEP:FAULT]\n"
            "                  [--short] [--negative] [--trace] [--expect-violation]\n");
}

int main(int argc, char **argv)
{
    const sim_scenario *only = NULL;
    unsigned long long seed = 0, first = 1;
    int have_seed = 0, do_explore = 0, do_short = 0, do_neg = 0, trace = 0, expect = 0;
    long nseeds = 0, max_runs = 20000;
    double minutes = 0;
    int depth = 24, faults = 1, do_bound = 0, at_fault = 0;
    long at_step = -1;
    static int path[4096];
    int npath = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--list") == 0) {
            for (const sim_scenario *s = sim_scenarios; s->name; s++)
                printf("%-20s %-11s %s\n", s->name, s->personality, s->what);
            return 0;
        } else if (strcmp(a, "--scenario") == 0 && v) {
            only = sim_scenario_find(v);
            if (!only) {
                fprintf(stderr, "relock_sim: no scenario %s (--list names them)\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            seed = strtoull(v, NULL, 10);
            have_seed = 1;
            i++;
        } else if (strcmp(a, "--first") == 0 && v) {
            first = strtoull(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--seeds") == 0 && v) {
            nseeds = atol(v);
            i++;
        } else if (strcmp(a, "--minutes") == 0 && v) {
            minutes = atof(v);
            i++;
        } else if (strcmp(a, "--depth") == 0 && v) {
            depth = atoi(v);
            i++;
        } else if (strcmp(a, "--faults") == 0 && v) {
            faults = atoi(v);
            i++;
        } else if (strcmp(a, "--max-runs") == 0 && v) {
            max_runs = atol(v);
            i++;
        } else if (strcmp(a, "--path") == 0 && v) {
            npath = parse_path(v, path, 4096);
            if (npath < 0) {
                usage();
                return 2;
            }
            i++;
        } else if (strcmp(a, "--at") == 0 && v) {
            if (sscanf(v, "%ld:%d", &at_step, &at_fault) != 2) {
                usage();
                return 2;
            }
            i++;
        } else if (strcmp(a, "--boundaries") == 0) {
            do_bound = 1;
        } else if (strcmp(a, "--explore") == 0) {
            do_explore = 1;
        } else if (strcmp(a, "--short") == 0) {
            do_short = 1;
        } else if (strcmp(a, "--negative") == 0) {
            do_neg = 1;
        } else if (strcmp(a, "--trace") == 0) {
            trace = 1;
        } else if (strcmp(a, "--expect-violation") == 0) {
            expect = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (at_step >= 0) {
        if (!only) {
            fprintf(stderr, "relock_sim: --at needs --scenario\n");
            return 2;
        }
        sim_opts o;
        default_opts(&o);
        o.dfs = 1;
        o.depth = 0;
        o.seed = 1;
        o.fault_step = at_step;
        o.fault_kind = at_fault;
        o.trace = trace;
        sim_result *r = calloc(1, sizeof *r);
        int v = r ? sim_run(only, &o, r, 0) : 1;
        printf("sim: %s, fault %d at command %ld: %s%s\n", only->name, at_fault, at_step,
               v ? "VIOLATION: " : "no violation", v && r ? r->msg : "");
        free(r);
        return expect ? !v : v;
    }
    if (do_bound) {
        int bad = 0;
        for (const sim_scenario *s = sim_scenarios; s->name && !bad; s++) {
            if ((only && s != only) || (!only && (s->negative || s->manual)))
                continue;
            bad += boundaries(s, 100000, 0, NULL);
        }
        return bad != 0;
    }
    if (npath >= 0) {
        if (!only) {
            fprintf(stderr, "relock_sim: --path needs --scenario\n");
            return 2;
        }
        sim_opts o;
        default_opts(&o);
        o.dfs = 1;
        o.depth = depth;
        o.max_faults = faults;
        o.path = path;
        o.npath = npath;
        o.seed = 1;
        o.trace = trace;
        sim_result *r = calloc(1, sizeof *r);
        int v = r ? sim_run(only, &o, r, 0) : 1;
        printf("sim: %s: %s%s\n", only->name, v ? "VIOLATION: " : "no violation",
               v && r ? r->msg : "");
        free(r);
        return expect ? !v : v;
    }
    if (have_seed) {
        sim_scenario var = *(only ? only : scenario_of_seed(seed));
        const sim_scenario *sc = &var;
        sim_opts o;
        default_opts(&o);
        o.seed = seed;
        vary(&var, &o, seed);
        o.trace = trace;
        sim_result *r = calloc(1, sizeof *r);
        int v = r ? sim_run(sc, &o, r, 0) : 1;
        printf("sim: scenario %s, seed %llu: %ld commands, %d fault%s: %s%s\n", sc->name, seed,
               r ? r->steps : 0, r ? r->faults_used : 0, r && r->faults_used == 1 ? "" : "s",
               v ? "VIOLATION: " : "no violation", v && r ? r->msg : "");
        free(r);
        return expect ? !v : v;
    }
    if (do_neg)
        return negatives(0);
    if (do_explore) {
        int bad = 0;
        for (const sim_scenario *s = sim_scenarios; s->name; s++) {
            if ((only && s != only) || (!only && (s->negative || s->manual)))
                continue;
            bad += explore(s, depth, faults, max_runs, 0, expect, NULL, NULL);
            if (bad && !expect)
                break;
        }
        return expect ? !bad : bad != 0;
    }
    if (do_short) {
        /* Every short scenario explored to a small depth with one fault,
         * a few seeds of every scenario, and the negative controls. */
        int bad = 0;
        for (const sim_scenario *s = sim_scenarios; s->name && !bad; s++) {
            if (!s->in_short)
                continue;
            bad += explore(s, 6, 1, SHORT_EXPLORE, 0, 0, NULL, NULL);
            if (!bad)
                bad += boundaries(s, SHORT_BOUNDARIES, 0, NULL);
        }
        if (!bad)
            bad += run_seeds(NULL, 1, SHORT_SEEDS, 0, 0, 0, NULL, NULL);
        if (!bad)
            bad += replays();
        if (!bad)
            bad += negatives(0);
        return bad != 0;
    }
    if (nseeds <= 0 && minutes <= 0)
        nseeds = 200;
    int bad = run_seeds(only, first, nseeds, minutes, expect, 0, NULL, NULL);
    return expect ? !bad : bad != 0;
}
