/*
 * Modern mode's algorithm table: its machines (src/algo/modern.c), which
 * the operation core runs for both APIs.  The quorum's,
 * relock__algo_quorum, is in pollloop.c; legacy's and bridge's in
 * run_ts.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "durable.h"
#include "fence.h"
#include "modern.h"
#include "quorum.h"
#include "drive.h"

const relock__algo relock__algo_modern = {"modern", NULL, &relock__modern_machines};
