/*
 * The interop log checker: reads the shared log of the workers (format in
 * worker.h), builds each process's intervals ([enter, exit] or
 * [enter, die]) and counts the overlaps between intervals of different
 * processes.
 */
#ifndef INTEROP_CHECKER_H
#define INTEROP_CHECKER_H

#include <stdint.h>
#include <stdio.h>

#define CK_KINDS_MAX 8

typedef struct ck_kind {
    char name[16];
    long sections;     /* completed: exit lines */
    long deaths;       /* die lines */
    long overruns;     /* sections that ended after the worker's own lease */
    long losers;       /* classic GETSET takeovers that lost */
    long losers_over;  /* GETSET losers that wrote while this kind held the lock */
    long late;         /* classic releases skipped because expired */
    long lost_valid;   /* relock releases LOST although validity remained */
    long lost_expired; /* relock releases LOST after validity ended */
    long ambiguous;    /* relock releases that reported ambiguity */
    long contended;    /* sections begun while every kind was active */
    int pids;          /* processes of this kind seen */
} ck_kind;

typedef struct ck_result {
    long lines, bad_lines;
    long sections, deaths;
    long overlaps;         /* pairs of intersecting intervals, neither overran */
    long overlaps_overrun; /* pairs where at least one side had overrun its lease */
    long unterminated;     /* enter without exit or die */
    long stray;            /* exit or die without enter */
    uint64_t t_first, t_last;               /* ns of the first and last lines */
    uint64_t window_start, window_end;      /* when every kind was active */
    ck_kind kinds[CK_KINDS_MAX];
    int nkinds;
    /* Dead holders taken over: [kind that died][kind that entered next],
     * and the longest wait from a death to the next enter (ns). */
    long takeovers[CK_KINDS_MAX][CK_KINDS_MAX];
    uint64_t takeover_max_ns;
    /* The first overlap found (earliest start): log line numbers (1-based)
     * of both intervals' first and last lines, and a description. */
    long ov_line_lo, ov_line_hi;
    char ov_desc[256];
    /* The line of the first "lost ... valid" (a release that said LOST
     * while its validity remained), or 0. */
    long lost_valid_line;
} ck_result;

/* Checks the log at path.  0 on success, -1 when it cannot be read. */
int ck_check(const char *path, ck_result *r);

/* Prints lines lo..hi (1-based, at most max of them) of the file to out,
 * each prefixed with its number. */
void ck_print_lines(FILE *out, const char *path, long lo, long hi, long max);

/* Counts the lines of one event written by one pid (e.g. "exit"). */
long ck_count(const char *path, const char *event, long pid);

#endif
