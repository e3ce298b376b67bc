/* Helpers of the library and the relock command, compiled into each: the
 * shared library exports only relock_*. */
#ifndef RELOCK_RELOCKX_H
#define RELOCK_RELOCKX_H

#include <stddef.h>

/*
 * Parses a duration: a plain number is seconds ("10", "1.5", as for sleep(1)
 * and timeout(1)); otherwise numbers with units ms, s, m, h or d, with
 * fractions and compound forms ("250ms", "0.5s", "1m30s", "1h2m3.5s"),
 * larger units first.  Fractions of a millisecond round up.  Returns 0
 * and sets *ms, or -1 with a reason in why.
 */
int relockx_parse_duration(const char *s, long long *ms, char *why, size_t whylen);

/* Writes |ms| for people, in its two largest units: "3d 4h", "12m 30s",
 * "4s", "850ms". */
void relockx_format_duration(long long ms, char *buf, size_t len);

#endif
