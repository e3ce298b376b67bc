/* What the fuzz targets share: a check that survives NDEBUG. */
#ifndef RELOCK_FUZZ_COMMON_H
#define RELOCK_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

/* An invariant of the library broken by this input: report and abort, so
 * libFuzzer saves the input as a crash.  Not assert(): it must hold in
 * every build type. */
#define FZ_CHECK(cond)                                                                        \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#define FZ_CHECK_MSG(cond, ...)                                                               \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#endif
