/*
 * One torture scenario (see torture.h): servers, workers, the fault
 * schedule, the drain, and the checker.
 *
 * The schedule is drawn from one seeded generator: when the next fault
 * comes, which fault, which slot, how long a stop lasts, which proxy
 * setting, when the server restarts.  Which process holds the lock at
 * that moment depends on timing, so a seed reproduces the schedule, not
 * the interleaving.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testsrv.h"
#include "torture.h"

/* After the deadline: workers finish their section and at most one bounded
 * acquire (1 s); whatever still runs this much later is killed and the
 * scenario fails. */
#define GRACE_MS 10000
/* No restart this close to the deadline: the drain sees a server that is up. */
#define RESTART_QUIET_MS 1500

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static long between(rng *r, long lo, long hi)
{
    return hi <= lo ? lo : lo + (long)(next(r) % (uint64_t)(hi - lo + 1));
}

typedef struct ctx {
    const scenario *sc;
    outcome *out;
    slot slots[SLOTS_MAX];
    slotenv env;
    tsrv lock, res;
    tproxy proxy;
    rng r;
    uint64_t reseed_at;      /* drop phase: the next new seed for the proxy; 0 none */
    char log[300], ops[300], errfile[300], conf[300], proxy_err[300];
} ctx;

static void infra(ctx *c, const char *what)
{
    if (!c->out->infra[0])
        snprintf(c->out->infra, sizeof c->out->infra, "%s", what);
}

static int write_file(const char *path, const char *text)
{
    char tmp[340];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fputs(text, f);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

/* The configuration of the `relock run` workers (the library workers get
 * the same settings as options). */
static int write_conf(ctx *c)
{
    char text[512];
    int n = snprintf(text, sizeof text,
                     "# relock-torture: scenario %s\nrelock = {\n  ttl_ms = %ld;\n"
                     "  legacy = { clock_unit = \"%s\";",
                     c->sc->id, c->sc->ttl_ms, c->sc->unit);
    if (c->sc->margin_ms >= 0)
        n += snprintf(text + n, sizeof text - (size_t)n, " skew_margin_ms = %ld;",
                      c->sc->margin_ms);
    snprintf(text + n, sizeof text - (size_t)n, " };\n};\n");
    return write_file(c->conf, text);
}

/* libfaketime must move the wall clock by the skew and leave the monotonic
 * clock (the log's) alone; checked with the probe of torture_section. */
static int check_skew(ctx *c, long skew_ms)
{
    char out[320];
    snprintf(out, sizeof out, "%s.probe", c->log);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0)
            dup2(fd, 1);
        char fake[32];
        snprintf(fake, sizeof fake, "%+.3f", skew_ms / 1000.0);
        setenv("LD_PRELOAD", c->env.paths->faketime, 1);
        setenv("FAKETIME", fake, 1);
        setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
        const char *asan = getenv("ASAN_OPTIONS");
        char opts[512];
        snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", asan ? asan : "",
                 asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        execl(c->env.paths->section, c->env.paths->section, "--clock-probe", (char *)NULL);
        _exit(127);
    }
    uint64_t before = t_now_ns();
    struct timespec real0;
    clock_gettime(CLOCK_REALTIME, &real0);
    int st = -1;
    for (int i = 0; i < 1000 && waitpid(pid, &st, WNOHANG) != pid; i++)
        t_sleep_ms(10);
    uint64_t after = t_now_ns();
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        unlink(out);
        return -1;
    }
    FILE *f = fopen(out, "r");
    unsigned long long mono = 0, real = 0;
    int got = f && fscanf(f, "%llu %llu", &mono, &real) == 2;
    if (f)
        fclose(f);
    unlink(out);
    long long real_before = (long long)real0.tv_sec * 1000000000LL + real0.tv_nsec;
    long long offset_ms = ((long long)real - real_before) / 1000000LL;
    /* The child ran between before and after: its real clock, less the
     * skew, lies in that span too (give 50 ms for the scheduler). */
    long long span_ms = (long long)(after - before) / 1000000LL;
    int mono_ok = got && mono >= before && mono <= after;
    int real_ok = got && offset_ms >= skew_ms - 50 && offset_ms <= skew_ms + span_ms + 50;
    if (!mono_ok || !real_ok) {
        fprintf(stderr,
                "torture: libfaketime check failed for %+ld ms: monotonic %s, wall clock "
                "offset %lld ms\n",
                skew_ms, mono_ok ? "untouched" : "FAKED OR WRONG", offset_ms);
        return -1;
    }
    return 0;
}

static int alive(const slot *s)
{
    return s->pid > 0;
}

/* A random slot that is running, not stopped, and (when relock_only) not a
 * classic client; -1 when none. */
static int pick(ctx *c, int relock_only, int no_pending)
{
    int cand[SLOTS_MAX], n = 0;
    for (int i = 0; i < c->sc->nslots; i++) {
        const slot *s = &c->slots[i];
        if (!alive(s) || s->cont_at)
            continue;
        if (relock_only && s->type == W_CLASSIC)
            continue;
        if (no_pending && access(s->fault_file, F_OK) == 0)
            continue;
        cand[n++] = i;
    }
    return n ? cand[between(&c->r, 0, n - 1)] : -1;
}

static void stop_slot(ctx *c, slot *s, const char *why)
{
    long len = between(&c->r, c->sc->pause_ms[0], c->sc->pause_ms[1]);
    s->cont_at = t_now_ms() + (uint64_t)len;
    char detail[48];
    snprintf(detail, sizeof detail, "%s:%ldms", why, len);
    t_log(c->log, "stop", (long)s->pid, s->kind, detail);
}

static void proxy_fault(ctx *c)
{
    long kind = between(&c->r, 0, 99);
    long delay = 0;
    double before = 0, after = 0;
    if (kind < 30) {
        /* calm */
    } else if (kind < 55) {
        delay = between(&c->r, 1, 15);
    } else if (kind < 80) {
        before = between(&c->r, 5, 30) / 1000.0;
    } else {
        after = between(&c->r, 5, 30) / 1000.0;
    }
    unsigned long long seed = next(&c->r) >> 1;
    char *r = testsrv_cmd_port(c->proxy.port,
                               "RELOCK-PROXY FAULT delay-ms %ld close-before-reply %.3f "
                               "close-after-reply %.3f seed %llu",
                               delay, before, after, seed);
    char detail[96];
    snprintf(detail, sizeof detail, "delay=%ld,before=%.3f,after=%.3f", delay, before, after);
    t_log(c->log, "proxy", 0, "runner", detail);
    if (!r || strcmp(r, "OK") != 0)
        infra(c, "the proxy refused a FAULT setting");
    free(r);
    /* The proxy seeds every new connection alike, so processes that send
     * the same commands (each `relock run`) would meet a drop at the same
     * step for the whole phase: a new seed every few hundred ms. */
    c->reseed_at = before > 0 || after > 0 ? t_now_ms() + (uint64_t)between(&c->r, 150, 300) : 0;
}

static void reseed(ctx *c)
{
    free(testsrv_cmd_port(c->proxy.port, "RELOCK-PROXY FAULT seed %llu",
                          (unsigned long long)(next(&c->r) >> 1)));
    c->reseed_at = t_now_ms() + (uint64_t)between(&c->r, 150, 300);
}

static void fault(ctx *c)
{
    const scenario *sc = c->sc;
    int total = sc->w_hkill + sc->w_hstop + sc->w_xkill + sc->w_xstop + sc->w_proxy;
    if (total <= 0)
        return;
    long d = between(&c->r, 0, total - 1);
    if ((d -= sc->w_hkill) < 0) {
        /* The holder dies at its next section, right after its fenced read. */
        int i = pick(c, 0, 1);
        if (i >= 0 && write_file(c->slots[i].fault_file, "die") == 0)
            c->slots[i].die_pending = 1;
    } else if ((d -= sc->w_hstop) < 0) {
        /* The holder stops its process group at its next section; the stop
         * is seen below, and lasts past its lease. */
        int i = pick(c, 0, 1);
        if (i >= 0)
            write_file(c->slots[i].fault_file, "stop");
    } else if ((d -= sc->w_xkill) < 0) {
        /* Any worker, wherever it is: acquiring, holding, releasing. */
        int i = pick(c, 0, 0);
        if (i >= 0) {
            slot *s = &c->slots[i];
            pid_t pid = s->pid;
            slot_kill(s);
            t_log(c->log, "killed", (long)pid, s->kind, NULL);
            s->pid = 0;
            s->start_at = t_now_ms() + (uint64_t)between(&c->r, 20, 150);
        }
    } else if ((d -= sc->w_xstop) < 0) {
        /* Any relock worker, wherever it is.  Not the classic client: paused
         * between its clock reading and its GETSET it writes an earlier
         * expiry over a new holder's, or between its expiry check and its
         * DEL it deletes a new holder's lock, flaws of the classic pattern
         * itself (docs/legacy.md, safety conditions); relock's takeover and
         * release are single atomic steps. */
        int i = pick(c, 1, 0);
        if (i >= 0) {
            slot *s = &c->slots[i];
            kill(-s->pid, SIGSTOP);
            stop_slot(c, s, "any");
        }
    } else {
        proxy_fault(c);
    }
}

static void restart(ctx *c)
{
    t_log(c->log, "restart", 0, "runner", c->lock.aof ? "aof" : "none");
    if (tsrv_restart(&c->lock) != 0)
        infra(c, "the lock server did not come back after a restart");
}

/* Reaps the slots that changed: stops they made themselves, ends. */
static void reap(ctx *c, int running)
{
    for (int i = 0; i < c->sc->nslots; i++) {
        slot *s = &c->slots[i];
        if (!s->pid)
            continue;
        int st;
        pid_t r = waitpid(s->pid, &st, WNOHANG | WUNTRACED);
        if (r != s->pid)
            continue;
        if (WIFSTOPPED(st)) {
            if (!s->cont_at)
                stop_slot(c, s, "holder"); /* it stopped itself: a "stop" fault */
            if (!running)
                s->cont_at = t_now_ms(); /* the drain: wake it at once */
            continue;
        }
        pid_t pgid = s->pid;
        /* Whatever of the group outlived its leader goes too. */
        kill(-pgid, SIGKILL);
        slot_reap_group(pgid);
        t_log(c->log, "gone", (long)pgid, s->kind, NULL);
        s->pid = 0;
        int expected = 0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            expected = 1; /* its deadline */
        } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && s->die_pending &&
                   access(s->fault_file, F_OK) != 0) {
            expected = 1; /* the "die" fault it claimed */
            s->die_pending = 0;
        }
        if (!expected) {
            c->out->bad_exits++;
            if (!c->out->bad_desc[0])
                snprintf(c->out->bad_desc, sizeof c->out->bad_desc,
                         "%s worker (slot %d, pid %ld) ended with %s %d", s->kind, i, (long)pgid,
                         WIFEXITED(st) ? "exit code" : "signal",
                         WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        }
        if (running)
            s->start_at = t_now_ms() + (uint64_t)between(&c->r, 20, 150);
    }
}

static int setup(ctx *c, const char *base, uint64_t seed)
{
    const scenario *sc = c->sc;
    outcome *out = c->out;
    snprintf(out->dir, sizeof out->dir, "%s/scenario-%s", base, sc->id);
    char lockdir[300], resdir[300];
    snprintf(lockdir, sizeof lockdir, "%s/lock-server", out->dir);
    snprintf(resdir, sizeof resdir, "%s/resource-server", out->dir);
    if (mkdir(out->dir, 0755) != 0 || mkdir(lockdir, 0755) != 0 || mkdir(resdir, 0755) != 0) {
        infra(c, "cannot make the scenario's directories");
        return -1;
    }
    snprintf(c->log, sizeof c->log, "%s/sections.log", out->dir);
    snprintf(c->ops, sizeof c->ops, "%s/resource.ops", out->dir);
    snprintf(c->errfile, sizeof c->errfile, "%s/workers.err", out->dir);
    snprintf(c->conf, sizeof c->conf, "%s/relock.conf", out->dir);
    snprintf(c->proxy_err, sizeof c->proxy_err, "%s/proxy.err", out->dir);
    if (write_conf(c) != 0) {
        infra(c, "cannot write the configuration");
        return -1;
    }
    /* The resource lives on a server no fault touches. */
    if (tsrv_start(&c->res, resdir, 0) != 0) {
        infra(c, "cannot start the resource's redis-server");
        return -1;
    }
    if (tsrv_start(&c->lock, lockdir, sc->aof) != 0) {
        infra(c, "cannot start the lock's redis-server");
        return -1;
    }
    if (tproxy_start(&c->proxy, c->env.paths->proxy, c->lock.port, c->proxy_err) != 0) {
        infra(c, "cannot start the proxy");
        return -1;
    }
    for (int i = 0; i < sc->nslots; i++) {
        if (sc->skew_ms[i] && !c->env.paths->faketime) {
            infra(c, "libfaketime not found (apt-get install faketime)");
            return -1;
        }
        if (sc->skew_ms[i] && check_skew(c, sc->skew_ms[i]) != 0) {
            infra(c, "libfaketime does not skew the wall clock alone");
            return -1;
        }
    }
    c->env.sc = sc;
    c->env.log = c->log;
    c->env.conf = c->conf;
    c->env.errfile = c->errfile;
    c->env.lock_port = c->proxy.port;
    c->env.resource_port = c->res.port;
    c->env.seed = seed;
    for (int i = 0; i < sc->nslots; i++) {
        slot *s = &c->slots[i];
        memset(s, 0, sizeof *s);
        s->type = sc->type[i];
        s->skew_ms = sc->skew_ms[i];
        /* The log's kinds: the library worker logs its mode's name. */
        if (s->type == W_CLI)
            snprintf(s->kind, sizeof s->kind, "run-%s", sc->mode);
        else
            snprintf(s->kind, sizeof s->kind, "%s", s->type == W_CLASSIC ? "classic" : sc->mode);
        snprintf(s->fault_file, sizeof s->fault_file, "%s/slot-%d.fault", out->dir, i);
        s->start_at = 1; /* at once */
    }
    return 0;
}

static void teardown(ctx *c)
{
    for (int i = 0; i < c->sc->nslots; i++) {
        slot *s = &c->slots[i];
        if (s->pid) {
            pid_t pid = s->pid;
            slot_kill(s);
            t_log(c->log, "killed", (long)pid, s->kind, "teardown");
            s->pid = 0;
        }
    }
    tproxy_stop(&c->proxy);
    tsrv_stop(&c->lock);
    tsrv_stop(&c->res);
}

static long long counter(int port, const char *key)
{
    char *v = testsrv_cmd_port(port, "GET %s", key);
    long long n = v && strcmp(v, "(nil)") != 0 ? atoll(v) : 0;
    free(v);
    return n;
}

void run_scenario(const scenario *sc, long duration_ms, uint64_t seed, const tpaths *paths,
                  const char *base, outcome *out)
{
    memset(out, 0, sizeof *out);
    ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(out->infra, sizeof out->infra, "out of memory");
        return;
    }
    c->sc = sc;
    c->out = out;
    c->env.paths = paths;
    /* Each scenario its own schedule for one seed. */
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = sc->id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    c->r.s = seed * 0x2545f4914f6cdd1dULL + h;
    out->duration_s = duration_ms / 1000.0;
    if (setup(c, base, seed) != 0) {
        teardown(c);
        free(c);
        return;
    }
    uint64_t t0 = t_now_ms();
    /* One deadline for every worker: no acquisition starts after it. */
    uint64_t until = t0 + (uint64_t)duration_ms;
    c->env.until_ms = until;
    uint64_t next_fault = sc->fault_ms[0]
                              ? t_now_ms() + (uint64_t)between(&c->r, sc->fault_ms[0], sc->fault_ms[1])
                              : 0;
    uint64_t next_restart =
        sc->restart_ms[0] ? t_now_ms() + (uint64_t)between(&c->r, sc->restart_ms[0], sc->restart_ms[1])
                          : 0;
    int draining = 0;
    /* Bounded by the deadline and the grace: every pass sleeps 2 ms. */
    for (long pass = 0; pass < (duration_ms + 1000 + GRACE_MS) / 2 + 1000000; pass++) {
        uint64_t now = t_now_ms();
        if (t_interrupted) {
            infra(c, "interrupted");
            break;
        }
        if (now >= until + GRACE_MS || out->infra[0])
            break;
        int running = now < until;
        if (!running && !draining) {
            draining = 1;
            /* Calm network, everyone awake: the workers stop on their own. */
            free(testsrv_cmd_port(c->proxy.port, "RELOCK-PROXY FAULT off"));
            for (int i = 0; i < sc->nslots; i++) {
                slot *s = &c->slots[i];
                unlink(s->fault_file); /* no fault strikes during the drain */
                if (s->pid && s->cont_at) {
                    kill(-s->pid, SIGCONT);
                    t_log(c->log, "cont", (long)s->pid, s->kind, "drain");
                    s->cont_at = 0;
                }
                s->start_at = 0;
            }
        }
        reap(c, running);
        int any = 0;
        for (int i = 0; i < sc->nslots; i++) {
            slot *s = &c->slots[i];
            if (running && !s->pid && s->start_at && now >= s->start_at) {
                if (slot_start(s, i, &c->env) < 0) {
                    infra(c, "fork failed");
                    break;
                }
                s->start_at = 0;
            }
            if (s->pid && s->cont_at && now >= s->cont_at) {
                kill(-s->pid, SIGCONT);
                t_log(c->log, "cont", (long)s->pid, s->kind, NULL);
                s->cont_at = 0;
            }
            any |= s->pid != 0;
        }
        if (running && next_fault && now >= next_fault) {
            fault(c);
            next_fault = t_now_ms() + (uint64_t)between(&c->r, sc->fault_ms[0], sc->fault_ms[1]);
        }
        if (running && c->reseed_at && now >= c->reseed_at)
            reseed(c);
        if (running && next_restart && now >= next_restart) {
            if (now + RESTART_QUIET_MS < until)
                restart(c);
            next_restart =
                t_now_ms() + (uint64_t)between(&c->r, sc->restart_ms[0], sc->restart_ms[1]);
        }
        if (draining && !any)
            break;
        t_sleep_ms(2);
    }
    for (int i = 0; i < sc->nslots; i++)
        if (c->slots[i].pid)
            out->stragglers++;
    out->wall_s = (double)(t_now_ms() - t0) / 1000.0;
    if (!out->infra[0]) {
        if (t_dump_list(c->res.port, "res:ops", c->ops) < 0)
            infra(c, "cannot read the resource's record");
        out->resource_accepted = counter(c->res.port, "res:accepted");
        out->resource_refused = counter(c->res.port, "res:refused");
    }
    teardown(c);
    if (!out->infra[0]) {
        if (ck_torture_check(c->log, c->ops, &out->t) != 0)
            infra(c, "cannot read the log");
        else
            out->ran = 1;
    }
    free(c);
}
