/*
 * Replies built by hand, as the server would send them, for tests that
 * feed step machines (pure logic: no server).  Every reply is freed with
 * freeReplyObject(), as the hiredis reader's are; fr_free_all() frees
 * those made since the last call.
 */
#ifndef RELOCK_TEST_FAKEREPLY_H
#define RELOCK_TEST_FAKEREPLY_H

#include <hiredis/hiredis.h>

#include "engine/engine.h"

redisReply *fr_status(const char *s);
redisReply *fr_str(const char *s);
redisReply *fr_err(const char *s);
redisReply *fr_int(long long v);
redisReply *fr_nil(void);
/* An array of n elements, given after n (owned by the array). */
redisReply *fr_arr(int n, ...);
/* Frees the top-level replies made since the last call. */
void fr_free_all(void);

/* A client without a connection, its settings the defaults, its server
 * 127.0.0.1:6379 (for messages), the scripts' SHA-1s computed; and a lock
 * "job" of 1000 ms on it.  Freed by fake_free. */
typedef struct fake {
    relock_client *c;
    relock_lock *l;
} fake;
fake fake_new(void);
void fake_free(fake *f);
/* Recomputes the lock's keys after key_prefix changed. */
void fake_rekey(fake *f);

/* A feed: no replies, no fault, at mono_ms. */
relock__feed feed_none(uint64_t mono_ms);
/* A feed of n replies (given after n; made by fr_*), at mono_ms. */
relock__feed feed_replies(uint64_t mono_ms, int n, ...);
/* A feed of a fault after nreply replies (given after nreply). */
relock__feed feed_fault(uint64_t mono_ms, relock__fault f, int nreply, ...);

/* Whether command i of b has exactly these words (NULL-terminated). */
int batch_is(const relock__batch *b, int i, ...);

#endif
