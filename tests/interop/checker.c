/*
 * The interop log checker (see checker.h).
 *
 * Timestamps are CLOCK_MONOTONIC, one clock for every process on the
 * machine.  Each worker takes its "exit" timestamp before it releases and
 * its "enter" timestamp after it acquired, so in a correct run every exit
 * is strictly earlier than the next holder's enter, whatever the
 * scheduling: an intersection of two intervals is a real overlap of
 * critical sections.
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
} interval;

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

int ck_check(const char *path, ck_result *r)
{
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    ivec iv = {NULL, 0, 0};
    long pids[1024];
    size_t npids = 0;
    char line[256];
    int ret = 0;
    int dead_kind = -1; /* the kind of the last holder that died, until the next enter */
    uint64_t dead_at = 0;
    while (fgets(line, sizeof line, f)) {
        r->lines++;
        char ev[16], kind[16], detail[16] = "";
        unsigned long long ns;
        long pid;
        int n = sscanf(line, "%15s %llu %ld %15s %15s", ev, &ns, &pid, kind, detail);
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
            interval *prev = open_of(&iv, pid);
            if (prev) { /* entered twice: close the first where the second began */
                prev->open = 0;
                prev->end = ns;
                r->unterminated++;
            }
            interval *x = push(&iv);
            if (!x) {
                ret = -1;
                break;
            }
            x->start = ns;
            x->end = ns;
            x->pid = pid;
            x->kind = k;
            x->open = 1;
            x->line_start = x->line_end = r->lines;
        } else if (strcmp(ev, "exit") == 0 || strcmp(ev, "die") == 0) {
            interval *x = open_of(&iv, pid);
            if (!x) {
                r->stray++;
                continue;
            }
            x->open = 0;
            x->end = ns;
            x->line_end = r->lines;
            if (ev[0] == 'e') {
                x->completed = 1;
                r->sections++;
                kk->sections++;
                if (strcmp(detail, "overrun") == 0) {
                    x->overrun = 1;
                    kk->overruns++;
                }
            } else {
                r->deaths++;
                kk->deaths++;
                dead_kind = k;
                dead_at = ns;
            }
        } else if (strcmp(ev, "lose") == 0) {
            kk->losers++;
            for (size_t i = iv.n; i-- > 0;) {
                if (iv.v[i].open && iv.v[i].pid != pid) {
                    r->kinds[iv.v[i].kind].losers_over++;
                    break;
                }
            }
        } else if (strcmp(ev, "late") == 0) {
            kk->late++;
        } else if (strcmp(ev, "ambiguous") == 0) {
            kk->ambiguous++;
        } else if (strcmp(ev, "lost") == 0) {
            if (strcmp(detail, "valid") == 0) {
                kk->lost_valid++;
                if (!r->lost_valid_line)
                    r->lost_valid_line = r->lines;
            }
            else
                kk->lost_expired++;
        } else {
            r->bad_lines++;
        }
    }
    fclose(f);
    if (ret != 0) {
        free(iv.v);
        return ret;
    }
    /* A section never closed (its process was killed from outside) is
     * taken to last until the end of the log: it may have held the lock
     * all that time. */
    for (size_t i = 0; i < iv.n; i++) {
        if (iv.v[i].open) {
            r->unterminated++;
            iv.v[i].end = r->t_last;
            iv.v[i].line_end = r->lines;
        }
    }
    qsort(iv.v, iv.n, sizeof *iv.v, by_start);
    for (size_t i = 0; i < iv.n; i++) {
        const interval *a = &iv.v[i];
        for (size_t j = i + 1; j < iv.n && iv.v[j].start < a->end; j++) {
            const interval *b = &iv.v[j];
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
            for (size_t i = 0; i < iv.n; i++) {
                if (iv.v[i].kind != k)
                    continue;
                if (iv.v[i].start < first)
                    first = iv.v[i].start;
                if (iv.v[i].end > last)
                    last = iv.v[i].end;
            }
            if (first > lo)
                lo = first;
            if (last < hi)
                hi = last;
        }
        if (lo < hi) {
            r->window_start = lo;
            r->window_end = hi;
            for (size_t i = 0; i < iv.n; i++)
                if (iv.v[i].completed && iv.v[i].start >= lo && iv.v[i].start <= hi)
                    r->kinds[iv.v[i].kind].contended++;
        }
    }
    free(iv.v);
    return 0;
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
