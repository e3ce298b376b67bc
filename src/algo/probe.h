/* The server probe's step machine (probe.c): what it learns goes into l->c->conn. */
#ifndef RELOCK_PROBE_H
#define RELOCK_PROBE_H

#include "engine/engine.h"

typedef struct relock__probe_m {
    relock__mhead h;
} relock__probe_m;

void relock__probe_init(relock__probe_m *m);
relock__step relock__probe_step(void *m, relock_lock *l, const relock__feed *in,
                                relock__batch *out);

#endif
