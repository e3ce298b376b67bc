/*
 * clock_step: a step of this process's wall clock, as an NTP step makes.
 * clock_step.c defines clock_gettime, which the library (linked
 * statically) calls, and adds clock_step_ms to CLOCK_REALTIME only; the
 * monotonic clock is never stepped.  Linked into the test programs that
 * step their clock (it is their source, not a library's member, so that
 * no other program gets it).  A test steps the clock inside a forked
 * child, leaving the parent's at 0.
 */
#ifndef RELOCK_TEST_CLOCK_STEP_H
#define RELOCK_TEST_CLOCK_STEP_H

/* Added to CLOCK_REALTIME, in milliseconds; 0 leaves it alone. */
extern volatile long long clock_step_ms;

/* The wall clock without the step, in milliseconds. */
long long clock_true_wall_ms(void);

#endif
