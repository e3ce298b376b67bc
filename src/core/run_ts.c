/*
 * The timestamp algorithms' tables (legacy and bridge): their machines
 * (compat/ts.h), and the adoption of a lock from its value, whose machine
 * runs on the blocking driver (relock__drive(), drive.h).
 */
#include <string.h>

#include "compat.h"
#include "routing.h"
#include "ts.h"

/* A lock adopted from its value: the timestamp says how long it is valid. */
static void ts_adopt(relock_lock *l)
{
    relock__value val;
    relock__classify(l->value, strlen(l->value), &val);
    if (val.kind != RELOCK_VALUE_TIMESTAMP)
        return; /* nothing to learn, and no clock to read */
    relock__ts_adopt m;
    relock__ts_adopt_init(&m);
    relock__drive(l, relock__ts_adopt_step, &m);
}

const relock__algo relock__algo_legacy = {"legacy", ts_adopt, &relock__ts_machines};
const relock__algo relock__algo_bridge = {"bridge", ts_adopt, &relock__ts_machines};
