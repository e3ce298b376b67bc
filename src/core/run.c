/*
 * The blocking runs of the algorithms' step machines: each function here
 * feeds one machine (src/algo/) through the blocking driver (drive.h,
 * pollloop.c) or makes the connection ready first, so that
 * the machine files hold no I/O.  The algorithm tables the blocking API
 * chooses from (relock__algo_modern; the quorum's, relock__algo_quorum,
 * is in pollloop.c) point here.
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
