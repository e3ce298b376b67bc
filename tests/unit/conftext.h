/* Loading configuration text in the unit tests (conftext.c). */
#ifndef RELOCK_CONFTEXT_H
#define RELOCK_CONFTEXT_H

#include <stddef.h>

#include "relock.h"

/* Writes text to a temporary file, loads it into cfg and removes the file;
 * path receives the file's name (for the expected messages). */
relock_status load_text(const char *text, relock_config *cfg, char *path, size_t plen);

/* Expects text to be refused at line with a reason containing part. */
void refused(const char *text, int line, const char *part);

#endif
