/*
 * interop_check LOG: the checker of the interop test on a kept log
 * (INTEROP_KEEP_LOGS=1).  Prints the figures; exit 0 without overlaps, 1
 * with, 2 when the log cannot be read.
 */
#include <stdio.h>

#include "checker.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LOG\n", argv[0]);
        return 2;
    }
    ck_result r;
    if (ck_check(argv[1], &r) != 0) {
        perror(argv[1]);
        return 2;
    }
    printf("%ld lines (%ld unreadable), %ld sections, %ld deaths, %ld overlaps "
           "(+%ld involving an overrun lease), %ld unterminated, %ld stray\n",
           r.lines, r.bad_lines, r.sections, r.deaths, r.overlaps, r.overlaps_overrun,
           r.unterminated, r.stray);
    for (int k = 0; k < r.nkinds; k++) {
        const ck_kind *kk = &r.kinds[k];
        printf("  %-8s %ld sections (%ld in the both-kinds window), %ld deaths, %ld overruns, "
               "%ld GETSET losers, %ld late, %ld lost (%ld with validity left), %ld ambiguous\n",
               kk->name, kk->sections, kk->contended, kk->deaths, kk->overruns, kk->losers,
               kk->late, kk->lost_valid + kk->lost_expired, kk->lost_valid, kk->ambiguous);
    }
    if (r.overlaps) {
        printf("first overlap: %s\n", r.ov_desc);
        long lo = r.ov_line_lo > 3 ? r.ov_line_lo - 3 : 1;
        ck_print_lines(stdout, argv[1], lo, r.ov_line_hi + 3, 40);
    }
    return r.overlaps ? 1 : 0;
}
