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

/* ---------------------------------------------------------------------
 * The torture runner's analysis (tests/torture/): the same log, with the
 * runner's own lines (killed, stop, cont, gone, and "runner" lines for
 * restarts and proxy faults), `relock run` sections ("run", "lost ... cli"),
 * leases at enter, and the fenced resource's record of every operation
 * ("SEQ OP OK TOKEN ID SENT_NS VALUE" per line, worker.c).
 *
 * A holder is *within its lease* at a moment if the lease end it logged
 * at enter lies after it (library and classic workers know it exactly);
 * a `relock run` section cannot know its lease, and counts as within it
 * unless relock run reported the lock lost (exit 3).
 *
 * An access to the resource is *stale* when a newer holder (one whose
 * section began after this one's, or after this holder's lease had ended)
 * had already been accepted by the resource (the resource's own order).
 * With working fencing tokens every stale access of a holder with a token
 * is refused.
 */
#define CK_ERRS_MAX 32

typedef struct ck_named {
    char name[48];
    long n;
} ck_named;

typedef struct ck_torture {
    ck_result base;          /* the interop figures of the same log */
    long sections;           /* completed (exit lines) */
    long ended_otherwise;    /* died, killed, or ended by relock run's lost lock */
    /* Pairs of intersecting sections of different processes. */
    long overlaps;           /* both holders within their leases: mutual exclusion failed */
    long ov_caught;          /* ...and the resource refused the older holder's access after
                                the newer holder's first */
    long ov_accepted;        /* ...and accepted it (no token on one side, or a fence failure) */
    long ov_quiet;           /* ...and the older did not touch it after the newer */
    long overlaps_past;      /* one holder past its lease (paused, stalled, lost) */
    long past_caught;        /* ...and the resource refused its access after the newer one's */
    long past_accepted;      /* ...and the resource accepted it */
    long past_quiet;         /* ...and it did not touch the resource after the newer one */
    /* The resource's operations. */
    long ops, ops_unmatched; /* recorded; not inside any section of the log */
    long accepted, refused;
    long writes_accepted;
    long stale_accepted;     /* stale accesses with a token, accepted: the fence failed */
    long stale_refused;      /* stale accesses with a token, refused: the fence worked */
    long stale_tokenless;    /* stale accesses the fence cannot judge, accepted: by a
                                client without a token, or after one */
    long refused_current;    /* refused although no newer holder had been accepted and
                                the lease remained: the token counter went back */
    long long final_value;   /* the resource's value after the last accepted write */
    long lost_updates;       /* accepted writes that the final value does not count */
    long takeovers_dead;     /* sections entered next after a holder died holding */
    long takeovers_past;     /* holders past their lease that another holder overtook */
    long kills;              /* die and killed lines (any process, holding or not) */
    long kills_holding;      /* of them, while holding */
    long pauses;             /* pause and stop lines */
    long restarts;           /* runner restart lines */
    long proxy_changes;      /* runner proxy lines */
    long lost_valid;         /* releases LOST while the validity remained */
    ck_named errors[CK_ERRS_MAX]; /* by "what:STATUS", most frequent first */
    int nerrors;
    /* The first overlap within leases and the first stale access
     * accepted: log lines to show, and a description. */
    long ov_lo, ov_hi;
    char ov_desc[600];
    long st_lo, st_hi;
    char st_desc[600];
} ck_torture;

/* Checks the log and the resource's operations (ops may be NULL: no
 * resource).  0 on success, -1 when a file cannot be read. */
int ck_torture_check(const char *log, const char *ops, ck_torture *t);

#endif
