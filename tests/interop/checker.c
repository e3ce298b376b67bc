/*
 * The interop log checker (see checker.h).
 *
 * Timestamps are CLOCK_MONOTONIC, one clock for every process on the
 * machine.  Each worker takes its "exit" timestamp before it releases and
 * its "enter" timestamp after it acquired, so in a correct run every exit
 * is strictly earlier than the next holder's enter, whatever the
 * scheduling: an intersection of two intervals is a real overlap of
 * critical sections.
 *
 * The torture runner's analysis (ck_torture_check) reads the same log with
 * the same parser, and joins it with the fenced resource's own record of
 * every operation.
 */
#include <stdlib.h>
#include <string.h>

#include "checker.h"

typedef struct interval {
    uint64_t start, end;
    long pid;
    int kind;
    int overrun;
    int open;
    int completed;
    long line_start, line_end;
    /* The torture analysis. */
    uint64_t lease_end;  /* from the enter line, ns; 0 unknown */
    int lost_run;        /* relock run reported the lock lost (exit 3) */
    int died;            /* ended by die, killed or gone */
    int overtaken;       /* counted once in takeovers_past */
    uint64_t reg_f;      /* resource seq of its first accepted access with a token */
    uint64_t reg_a;      /* ... of its first accepted access, token or not */
    size_t op_first, op_n; /* its operations in the sorted op array */
} interval;

/* What the parser gathers beyond ck_result, for the torture analysis. */
typedef struct extra {
    long kills, kills_holding, pauses, restarts, proxy_changes, gone;
    long lost_run;
    ck_named errors[CK_ERRS_MAX];
    int nerrors;
    /* relock run slots (one id per start of a slot): their last "run" line */
    long *run_pid;
    uint64_t *run_ns;
    size_t nrun, caprun;
} extra;

static void extra_free(extra *x)
{
    if (x) {
        free(x->run_pid);
        free(x->run_ns);
    }
    free(x);
}

typedef struct ivec {
    interval *v;
    size_t n, cap;
} ivec;

static interval *push(ivec *iv)
{
    if (iv->n == iv->cap) {
        size_t cap = iv->cap ? iv->cap * 2 : 256;
        interval *v = realloc(iv->v, cap * sizeof *v);
        if (!v)
            return NULL;
        iv->v = v;
        iv->cap = cap;
    }
    interval *x = &iv->v[iv->n++];
    memset(x, 0, sizeof *x);
    return x;
}

static int kind_index(ck_result *r, const char *name)
{
    for (int i = 0; i < r->nkinds; i++)
        if (strcmp(r->kinds[i].name, name) == 0)
            return i;
    if (r->nkinds == CK_KINDS_MAX)
        return -1;
    ck_kind *k = &r->kinds[r->nkinds];
    snprintf(k->name, sizeof k->name, "%s", name);
    return r->nkinds++;
}

/* The open interval of pid, or NULL. */
static interval *open_of(ivec *iv, long pid)
{
    /* Open intervals are few and recent: search from the end. */
    for (size_t i = iv->n; i-- > 0;)
        if (iv->v[i].open && iv->v[i].pid == pid)
            return &iv->v[i];
    return NULL;
}

static int by_start(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int pid_seen(const long *pids, size_t n, long pid)
{
    for (size_t i = 0; i < n; i++)
        if (pids[i] == pid)
            return 1;
    return 0;
}

static ck_named *find_named(ck_named *v, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return &v[i];
    return NULL;
}

static void count_named(ck_named *v, int *n, const char *name)
{
    ck_named *e = find_named(v, *n, name);
    if (!e && *n >= CK_ERRS_MAX - 1) {
        name = "other"; /* the last slot gathers the rest */
        e = find_named(v, *n, name);
    }
    if (!e) {
        e = &v[(*n)++];
        snprintf(e->name, sizeof e->name, "%s", name);
        e->n = 0;
    }
    e->n++;
}

/* Where the time of pid's last "run" line is kept; NULL out of memory. */
static uint64_t *run_slot(extra *x, long pid)
{
    /* Recent slots are at the end. */
    for (size_t i = x->nrun; i-- > 0;)
        if (x->run_pid[i] == pid)
            return &x->run_ns[i];
    if (x->nrun == x->caprun) {
        size_t cap = x->caprun ? x->caprun * 2 : 64;
        long *p = realloc(x->run_pid, cap * sizeof *p);
        if (!p)
            return NULL;
        x->run_pid = p;
        uint64_t *t = realloc(x->run_ns, cap * sizeof *t);
        if (!t)
            return NULL;
        x->run_ns = t;
        x->caprun = cap;
    }
    x->run_pid[x->nrun] = pid;
    x->run_ns[x->nrun] = 0;
    return &x->run_ns[x->nrun++];
}

/* The most recent interval of pid, open or not, or NULL. */
static interval *last_of(ivec *iv, long pid)
{
    for (size_t i = iv->n; i-- > 0;)
        if (iv->v[i].pid == pid)
            return &iv->v[i];
    return NULL;
}

/*
 * Reads the log into r and the intervals (closed at the end of the log if
 * still open, in log order).  The interop events are handled exactly as
 * they always were; the torture runner's events only add to x.
 */
static int parse(const char *path, ck_result *r, ivec *iv, extra *x)
{
    memset(r, 0, sizeof *r);
    memset(x, 0, sizeof *x);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long pids[1024];
    size_t npids = 0;
    char line[256];
    int ret = 0;
    int dead_kind = -1; /* the kind of the last holder that died, until the next enter */
    uint64_t dead_at = 0;
    while (fgets(line, sizeof line, f)) {
        r->lines++;
        char ev[16], kind[16], detail[64] = "";
        unsigned long long ns;
        long pid;
        int n = sscanf(line, "%15s %llu %ld %15s %63s", ev, &ns, &pid, kind, detail);
        /* The runner's own lines about the servers: no process, no kind. */
        if (n >= 4 && strcmp(kind, "runner") == 0) {
            if (strcmp(ev, "restart") == 0)
                x->restarts++;
            else if (strcmp(ev, "proxy") == 0)
                x->proxy_changes++;
            continue;
        }
        int k = n >= 4 ? kind_index(r, kind) : -1;
        if (k < 0) {
            r->bad_lines++;
            continue;
        }
        if (!r->t_first)
            r->t_first = ns;
        r->t_last = ns;
        if (!pid_seen(pids, npids, pid) && npids < sizeof pids / sizeof pids[0]) {
            pids[npids++] = pid;
            r->kinds[k].pids++;
        }
        ck_kind *kk = &r->kinds[k];
        if (strcmp(ev, "enter") == 0) {
            if (dead_kind >= 0) {
                r->takeovers[dead_kind][k]++;
                if (ns > dead_at && ns - dead_at > r->takeover_max_ns)
                    r->takeover_max_ns = ns - dead_at;
                dead_kind = -1;
            }
            interval *prev = open_of(iv, pid);
            if (prev) { /* entered twice: close the first where the second began */
                prev->open = 0;
                prev->end = ns;
                r->unterminated++;
            }
            interval *v = push(iv);
            if (!v) {
                ret = -1;
                break;
            }
            v->start = ns;
            v->end = ns;
            v->pid = pid;
            v->kind = k;
            v->open = 1;
            v->line_start = v->line_end = r->lines;
            v->lease_end = strtoull(detail, NULL, 10);
        } else if (strcmp(ev, "exit") == 0 || strcmp(ev, "die") == 0) {
            interval *v = open_of(iv, pid);
            if (ev[0] == 'd') {
                x->kills++;
                if (v)
                    x->kills_holding++;
            }
            if (!v) {
                r->stray++;
                continue;
            }
            v->open = 0;
            v->end = ns;
            v->line_end = r->lines;
            if (ev[0] == 'e') {
                v->completed = 1;
                r->sections++;
                kk->sections++;
                if (strcmp(detail, "overrun") == 0) {
                    v->overrun = 1;
                    kk->overruns++;
                }
            } else {
                v->died = 1;
                r->deaths++;
                kk->deaths++;
                dead_kind = k;
                dead_at = ns;
            }
        } else if (strcmp(ev, "killed") == 0 || strcmp(ev, "gone") == 0) {
            /* The runner killed the process, or reaped one that ended on its
             * own: a section still open ended then (no line can follow). */
            interval *v = open_of(iv, pid);
            if (ev[0] == 'k')
                x->kills++;
            else
                x->gone++;
            if (v) {
                v->open = 0;
                v->end = ns;
                v->line_end = r->lines;
                v->died = 1;
                if (ev[0] == 'k') {
                    x->kills_holding++;
                    dead_kind = k;
                    dead_at = ns;
                }
            }
        } else if (strcmp(ev, "pause") == 0 || strcmp(ev, "stop") == 0) {
            x->pauses++;
        } else if (strcmp(ev, "cont") == 0) {
            /* counted with its stop */
        } else if (strcmp(ev, "run") == 0) {
            uint64_t *at = run_slot(x, pid);
            if (!at) {
                ret = -1;
                break;
            }
            *at = ns;
        } else if (strcmp(ev, "error") == 0) {
            count_named(x->errors, &x->nerrors, detail[0] ? detail : "?");
        } else if (strcmp(ev, "lose") == 0) {
            kk->losers++;
            for (size_t i = iv->n; i-- > 0;) {
                if (iv->v[i].open && iv->v[i].pid != pid) {
                    r->kinds[iv->v[i].kind].losers_over++;
                    break;
                }
            }
        } else if (strcmp(ev, "late") == 0) {
            kk->late++;
        } else if (strcmp(ev, "ambiguous") == 0) {
            kk->ambiguous++;
            count_named(x->errors, &x->nerrors, "release:EAMBIGUOUS");
        } else if (strcmp(ev, "lost") == 0) {
            if (strcmp(detail, "valid") == 0) {
                kk->lost_valid++;
                if (!r->lost_valid_line)
                    r->lost_valid_line = r->lines;
            }
            else
                kk->lost_expired++;
            if (strcmp(detail, "cli") == 0) {
                /* relock run exited 3: the lock of its section (the one
                 * begun after its "run" line) was lost at some point. */
                x->lost_run++;
                count_named(x->errors, &x->nerrors, "run:LOST");
                uint64_t *at = run_slot(x, pid);
                interval *v = last_of(iv, pid);
                if (v && at && v->start >= *at) {
                    v->lost_run = 1;
                    v->overrun = 1;
                    if (v->open) {
                        v->open = 0;
                        v->end = ns;
                        v->line_end = r->lines;
                    }
                }
            } else {
                count_named(x->errors, &x->nerrors,
                            strcmp(detail, "valid") == 0 ? "release:LOST(valid)"
                                                         : "release:LOST");
            }
        } else {
            r->bad_lines++;
        }
    }
    fclose(f);
    if (ret != 0)
        return ret;
    /* A section never closed (its process was killed from outside) is
     * taken to last until the end of the log: it may have held the lock
     * all that time. */
    for (size_t i = 0; i < iv->n; i++) {
        if (iv->v[i].open) {
            r->unterminated++;
            iv->v[i].end = r->t_last;
            iv->v[i].line_end = r->lines;
        }
    }
    return 0;
}

/* The interop figures from parsed intervals; sorts them by start. */
static void figures(ck_result *r, ivec *iv)
{
    qsort(iv->v, iv->n, sizeof *iv->v, by_start);
    for (size_t i = 0; i < iv->n; i++) {
        const interval *a = &iv->v[i];
        for (size_t j = i + 1; j < iv->n && iv->v[j].start < a->end; j++) {
            const interval *b = &iv->v[j];
            if (b->pid == a->pid)
                continue;
            if (a->overrun || b->overrun) {
                r->overlaps_overrun++;
                continue;
            }
            if (r->overlaps++ == 0) {
                r->ov_line_lo = a->line_start < b->line_start ? a->line_start : b->line_start;
                r->ov_line_hi = a->line_end > b->line_end ? a->line_end : b->line_end;
                snprintf(r->ov_desc, sizeof r->ov_desc,
                         "%s pid %ld [%llu, %llu] (lines %ld-%ld) and %s pid %ld [%llu, %llu] "
                         "(lines %ld-%ld) intersect for %llu us",
                         r->kinds[a->kind].name, a->pid, (unsigned long long)a->start,
                         (unsigned long long)a->end, a->line_start, a->line_end,
                         r->kinds[b->kind].name, b->pid, (unsigned long long)b->start,
                         (unsigned long long)b->end, b->line_start, b->line_end,
                         (unsigned long long)(((a->end < b->end ? a->end : b->end) - b->start) /
                                              1000u));
            }
        }
    }
    /* The window in which every kind was at work: from the latest first
     * enter to the earliest last end among the kinds. */
    if (r->nkinds > 1) {
        uint64_t lo = 0, hi = UINT64_MAX;
        for (int k = 0; k < r->nkinds; k++) {
            uint64_t first = UINT64_MAX, last = 0;
            for (size_t i = 0; i < iv->n; i++) {
                if (iv->v[i].kind != k)
                    continue;
                if (iv->v[i].start < first)
                    first = iv->v[i].start;
                if (iv->v[i].end > last)
                    last = iv->v[i].end;
            }
            if (first > lo)
                lo = first;
            if (last < hi)
                hi = last;
        }
        if (lo < hi) {
            r->window_start = lo;
            r->window_end = hi;
            for (size_t i = 0; i < iv->n; i++)
                if (iv->v[i].completed && iv->v[i].start >= lo && iv->v[i].start <= hi)
                    r->kinds[iv->v[i].kind].contended++;
        }
    }
}

int ck_check(const char *path, ck_result *r)
{
    ivec iv = {NULL, 0, 0};
    extra *x = calloc(1, sizeof *x);
    if (!x)
        return -1;
    int ret = parse(path, r, &iv, x);
    if (ret == 0)
        figures(r, &iv);
    free(iv.v);
    extra_free(x);
    return ret;
}

void ck_print_lines(FILE *out, const char *path, long lo, long hi, long max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[256];
    long n = 0, printed = 0;
    while (fgets(line, sizeof line, f) && printed < max) {
        n++;
        if (n < lo)
            continue;
        if (n > hi)
            break;
        fprintf(out, "  %6ld  %s", n, line);
        printed++;
    }
    fclose(f);
}

long ck_count(const char *path, const char *event, long pid)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    long count = 0;
    size_t elen = strlen(event);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, event, elen) != 0 || line[elen] != ' ')
            continue;
        unsigned long long ns;
        long p;
        if (sscanf(line + elen, "%llu %ld", &ns, &p) == 2 && p == pid)
            count++;
    }
    fclose(f);
    return count;
}

/* ---------------------------------------------------------------------
 * The torture analysis (checker.h): the log's sections joined with the
 * fenced resource's record of its operations.
 */

typedef struct op {
    uint64_t seq;      /* the resource's order */
    char what;         /* 'R' or 'W' */
    int ok;            /* accepted */
    long long token;   /* 0: a client without one */
    long id;
    uint64_t sent;     /* the sender's monotonic clock before sending */
    long long value;
    size_t iv;         /* its section (index of the sorted intervals), or SIZE_MAX */
} op;

typedef struct pidx {
    long pid;
    uint64_t start;
    size_t i;
} pidx;

static int by_pid_start(const void *a, const void *b)
{
    const pidx *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_iv_seq(const void *a, const void *b)
{
    const op *x = a, *y = b;
    if (x->iv != y->iv)
        return x->iv < y->iv ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_count(const void *a, const void *b)
{
    const ck_named *x = a, *y = b;
    return x->n > y->n ? -1 : x->n < y->n;
}

/* The section of pid that contains sent, or SIZE_MAX. */
static size_t section_of(const ivec *iv, const pidx *px, size_t n, long pid, uint64_t sent)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (px[mid].pid < pid || (px[mid].pid == pid && px[mid].start <= sent))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || px[lo - 1].pid != pid)
        return SIZE_MAX;
    const interval *v = &iv->v[px[lo - 1].i];
    return sent <= v->end ? px[lo - 1].i : SIZE_MAX;
}

/* Reads the resource's operations; *n of them in *out (caller frees). */
static int read_ops(const char *path, op **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t cap = 0;
    char line[256];
    int ret = 0;
    while (fgets(line, sizeof line, f)) {
        op o;
        unsigned long long seq, sent;
        char what[4];
        if (sscanf(line, "%llu %3s %d %lld %ld %llu %lld", &seq, what, &o.ok, &o.token, &o.id,
                   &sent, &o.value) != 7)
            continue;
        o.seq = seq;
        o.sent = sent;
        o.what = what[0];
        o.iv = SIZE_MAX;
        if (*n == cap) {
            size_t c = cap ? cap * 2 : 1024;
            op *v = realloc(*out, c * sizeof *v);
            if (!v) {
                ret = -1;
                break;
            }
            *out = v;
            cap = c;
        }
        (*out)[(*n)++] = o;
    }
    fclose(f);
    return ret;
}

/* Where the newer holders of interval k begin: the first sorted index whose
 * section began after k's, or after k's lease ended if that came first (a
 * holder paused between its acquisition and its enter line). */
static size_t newer_from(const ivec *iv, size_t k)
{
    const interval *v = &iv->v[k];
    uint64_t key = v->lease_end && v->lease_end < v->start ? v->lease_end : v->start;
    size_t lo = 0, hi = iv->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (iv->v[mid].start <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The earliest accepted access (fenced: with a token; any) of the holders
 * newer than interval k. */
static void newer_reg(const ivec *iv, const uint64_t *suf_f, const uint64_t *suf_a, size_t k,
                      uint64_t *f, uint64_t *a)
{
    size_t j = newer_from(iv, k);
    if (j > k) {
        *f = suf_f[j];
        *a = suf_a[j];
        return;
    }
    /* k itself is not newer than k. */
    *f = suf_f[k + 1];
    *a = suf_a[k + 1];
    for (size_t i = j; i < k; i++) {
        if (iv->v[i].reg_f < *f)
            *f = iv->v[i].reg_f;
        if (iv->v[i].reg_a < *a)
            *a = iv->v[i].reg_a;
    }
}

static double rel_s(const ck_torture *t, uint64_t ns)
{
    return ns >= t->base.t_first ? (double)(ns - t->base.t_first) / 1e9 : 0.0;
}

static void describe(const ck_torture *t, const interval *v, char *buf, size_t len)
{
    char lease[48];
    if (v->lease_end)
        snprintf(lease, sizeof lease, "lease to %.3f s", rel_s(t, v->lease_end));
    else
        snprintf(lease, sizeof lease, "%s", v->lost_run ? "lock lost (relock run)" : "lease kept");
    snprintf(buf, len, "%s %ld [%.3f s, %.3f s; %s; lines %ld-%ld]", t->base.kinds[v->kind].name,
             v->pid, rel_s(t, v->start), rel_s(t, v->end), lease, v->line_start, v->line_end);
}

/* What the resource did with the accesses of old after newer's first
 * accepted one: 0 there were none, 1 it refused one, 2 it accepted all. */
static int fenced_after(const op *ops, const interval *old, const interval *newer)
{
    int after = 0, refused = 0;
    for (size_t q = old->op_first; q < old->op_first + old->op_n; q++) {
        if (ops[q].seq > newer->reg_a) {
            after++;
            if (!ops[q].ok)
                refused++;
        }
    }
    return !after ? 0 : refused ? 1 : 2;
}

int ck_torture_check(const char *log, const char *ops_path, ck_torture *t)
{
    memset(t, 0, sizeof *t);
    ivec iv = {NULL, 0, 0};
    extra *x = calloc(1, sizeof *x);
    op *ops = NULL;
    size_t nops = 0;
    pidx *px = NULL;
    uint64_t *suf_f = NULL, *suf_a = NULL;
    int ret = -1;
    if (!x || parse(log, &t->base, &iv, x) != 0)
        goto out;
    figures(&t->base, &iv); /* sorts iv by start */
    if (ops_path && read_ops(ops_path, &ops, &nops) != 0)
        goto out;
    size_t n = iv.n;
    px = malloc((n + 1) * sizeof *px);
    suf_f = malloc((n + 1) * sizeof *suf_f);
    suf_a = malloc((n + 1) * sizeof *suf_a);
    if (!px || !suf_f || !suf_a)
        goto out;
    for (size_t i = 0; i < n; i++) {
        px[i] = (pidx){iv.v[i].pid, iv.v[i].start, i};
        iv.v[i].reg_f = iv.v[i].reg_a = UINT64_MAX;
    }
    qsort(px, n, sizeof *px, by_pid_start);

    /* Each operation to its section; the first accepted access of each. */
    uint64_t last_w = 0;
    for (size_t i = 0; i < nops; i++) {
        op *o = &ops[i];
        t->ops++;
        if (o->ok)
            t->accepted++;
        else
            t->refused++;
        if (o->ok && o->what == 'W') {
            t->writes_accepted++;
            if (o->seq >= last_w) {
                last_w = o->seq;
                t->final_value = o->value;
            }
        }
        o->iv = section_of(&iv, px, n, o->id, o->sent);
        if (o->iv == SIZE_MAX) {
            t->ops_unmatched++;
            continue;
        }
        interval *v = &iv.v[o->iv];
        if (o->ok && o->seq < v->reg_a)
            v->reg_a = o->seq;
        if (o->ok && o->token > 0 && o->seq < v->reg_f)
            v->reg_f = o->seq;
    }
    t->lost_updates = t->writes_accepted - (long)t->final_value;
    qsort(ops, nops, sizeof *ops, by_iv_seq);
    for (size_t i = 0; i < nops; i++) {
        if (ops[i].iv == SIZE_MAX)
            break;
        interval *v = &iv.v[ops[i].iv];
        if (v->op_n++ == 0)
            v->op_first = i;
    }
    suf_f[n] = suf_a[n] = UINT64_MAX;
    for (size_t i = n; i-- > 0;) {
        suf_f[i] = iv.v[i].reg_f < suf_f[i + 1] ? iv.v[i].reg_f : suf_f[i + 1];
        suf_a[i] = iv.v[i].reg_a < suf_a[i + 1] ? iv.v[i].reg_a : suf_a[i + 1];
    }

    /* Every access against the newer holders' first accepted ones. */
    for (size_t k = 0; k < n; k++) {
        interval *v = &iv.v[k];
        if (v->completed)
            t->sections++;
        else
            t->ended_otherwise++;
        if (!v->op_n)
            continue;
        uint64_t nf, na;
        newer_reg(&iv, suf_f, suf_a, k, &nf, &na);
        for (size_t i = v->op_first; i < v->op_first + v->op_n; i++) {
            const op *o = &ops[i];
            if (o->token > 0 && nf < o->seq) {
                if (!o->ok) {
                    t->stale_refused++;
                    continue;
                }
                if (t->stale_accepted++ == 0) {
                    /* Name the newer holder the resource had accepted. */
                    const interval *w = NULL;
                    for (size_t j = 0; j < n && !w; j++)
                        if (j != k && iv.v[j].reg_f == nf)
                            w = &iv.v[j];
                    char a[200], b[200] = "?";
                    describe(t, v, a, sizeof a);
                    if (w)
                        describe(t, w, b, sizeof b);
                    snprintf(t->st_desc, sizeof t->st_desc,
                             "%c with token %lld at resource seq %llu by %s, after the newer "
                             "%s had been accepted at seq %llu",
                             o->what, o->token, (unsigned long long)o->seq, a, b,
                             (unsigned long long)nf);
                    t->st_lo = v->line_start;
                    t->st_hi = v->line_end;
                    if (w && w->line_start < t->st_lo)
                        t->st_lo = w->line_start;
                    if (w && w->line_end > t->st_hi)
                        t->st_hi = w->line_end;
                }
            } else if (na < o->seq && (o->ok || o->token == 0)) {
                t->stale_tokenless++;
            } else if (!o->ok) {
                int past = (v->lease_end && o->sent > v->lease_end) || v->lost_run;
                if (past)
                    t->stale_refused++;
                else
                    t->refused_current++;
            }
        }
    }

    /* Intersecting sections. */
    for (size_t i = 0; i < n; i++) {
        interval *a = &iv.v[i];
        for (size_t j = i + 1; j < n && iv.v[j].start < a->end; j++) {
            interval *b = &iv.v[j];
            if (b->pid == a->pid)
                continue;
            int a_in = a->lease_end ? b->start < a->lease_end : !a->lost_run;
            int b_in = b->lease_end ? b->start < b->lease_end : !b->lost_run;
            if (a_in && b_in) {
                if (t->overlaps++ == 0) {
                    char da[200], db[200];
                    describe(t, a, da, sizeof da);
                    describe(t, b, db, sizeof db);
                    snprintf(t->ov_desc, sizeof t->ov_desc, "%s and %s intersect for %llu us",
                             da, db,
                             (unsigned long long)(((a->end < b->end ? a->end : b->end) -
                                                   b->start) / 1000u));
                    t->ov_lo = a->line_start < b->line_start ? a->line_start : b->line_start;
                    t->ov_hi = a->line_end > b->line_end ? a->line_end : b->line_end;
                }
                /* Both held the lock: the older is the one to fence. */
                switch (fenced_after(ops, a, b)) {
                case 0: t->ov_quiet++; break;
                case 1: t->ov_caught++; break;
                default: t->ov_accepted++; break;
                }
                continue;
            }
            t->overlaps_past++;
            interval *stale = a_in ? b : a, *newer = a_in ? a : b;
            if (!stale->overtaken) {
                stale->overtaken = 1;
                t->takeovers_past++;
            }
            switch (fenced_after(ops, stale, newer)) {
            case 0: t->past_quiet++; break;
            case 1: t->past_caught++; break;
            default: t->past_accepted++; break;
            }
        }
    }

    for (int a = 0; a < t->base.nkinds; a++)
        for (int b = 0; b < t->base.nkinds; b++)
            t->takeovers_dead += t->base.takeovers[a][b];
    t->kills = x->kills;
    t->kills_holding = x->kills_holding;
    t->pauses = x->pauses;
    t->restarts = x->restarts;
    t->proxy_changes = x->proxy_changes;
    t->lost_valid = 0;
    for (int k = 0; k < t->base.nkinds; k++)
        t->lost_valid += t->base.kinds[k].lost_valid;
    memcpy(t->errors, x->errors, sizeof t->errors);
    t->nerrors = x->nerrors;
    qsort(t->errors, (size_t)t->nerrors, sizeof t->errors[0], by_count);
    ret = 0;
out:
    free(iv.v);
    extra_free(x);
    free(ops);
    free(px);
    free(suf_f);
    free(suf_a);
    return ret;
}
