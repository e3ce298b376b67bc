#!/bin/sh
# A cron job that must never run twice at once, across all the machines
# that schedule it: relock run holds the lock while the job runs, renews it
# in the background, and gives up at once if another machine has it.
#
#   */5 * * * *  RELOCK_URL=redis://redis.internal:6379 /usr/local/bin/cron-job.sh
#
# Exit codes: the job's own; 75 (EX_TEMPFAIL) when another run holds the
# lock, so cron mail says "skipped", not "failed"; 3 if the lock was lost
# while the job ran (the job was then sent SIGTERM).
set -eu
exec relock -m "${RELOCK_MODE:-auto}" run -n -E 75 -t 2m nightly-report -- sh -c '
    echo "report run $RELOCK_FENCE starting on $(hostname)"
    # Hand the fence to anything that stores results, so a stale run that
    # was paused past its lease can be refused there.
    sleep "${JOB_SECONDS:-1}"
    echo "report run $RELOCK_FENCE done"
'
