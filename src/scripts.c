/*
 * The Lua scripts of every algorithm, in one table, run by EVALSHA with a
 * fallback to EVAL when the server does not have them cached (NOSCRIPT:
 * first use, a restart or SCRIPT FLUSH).  Their SHA-1 is computed locally,
 * so no SCRIPT LOAD round trip is ever needed.
 *
 * Scripts return integers: 1 for done, 0 for "the key is absent", -1 for
 * "the key holds another value".
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const sources[RELOCK__NSCRIPTS] = {
    /* RELOCK__SCRIPT_DEL_IF_EQ: KEYS[1] lock, ARGV[1] our value */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] then redis.call('del', KEYS[1]) return 1 end\n"
    "if v then return -1 end\n"
    "return 0\n",
    /* RELOCK__SCRIPT_PEXPIRE_IF_EQ: KEYS[1] lock, ARGV[1] our value, ARGV[2] ttl ms */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end\n"
    "if v then return -1 end\n"
    "return 0\n",
    /* RELOCK__SCRIPT_CAS_GET: compare-and-set.  KEYS[1] lock, ARGV[1] the
     * value expected, ARGV[2] the new value, ARGV[3] seconds of EXPIRE or 0.
     * Returns 1 when set, else the value found (or 0: absent), so the
     * caller can tell a GETSET loser's write from a takeover. */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] then\n"
    "  redis.call('set', KEYS[1], ARGV[2])\n"
    "  if tonumber(ARGV[3]) > 0 then redis.call('expire', KEYS[1], ARGV[3]) end\n"
    "  return 1\n"
    "end\n"
    "if v then return v end\n"
    "return 0\n",
    /* RELOCK__SCRIPT_CAD_GET: compare-and-delete returning the value found
     * on a mismatch.  KEYS[1] lock, ARGV[1] our value. */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] then redis.call('del', KEYS[1]) return 1 end\n"
    "if v then return v end\n"
    "return 0\n",
};

void relock__scripts_init(relock_client *c)
{
    for (int i = 0; i < RELOCK__NSCRIPTS; i++)
        relock__sha1_hex(sources[i], strlen(sources[i]), c->sha[i]);
}

redisReply *relock__eval(relock_client *c, int *sent, int id, int nkeys, int nargs,
                         const char **args)
{
    enum { MAXARGS = 16 };
    const char *argv[MAXARGS + 3];
    size_t argvlen[MAXARGS + 3];
    char nk[16];
    if (nargs > MAXARGS || nkeys > nargs) {
        RELOCK__FAIL(&c->err, RELOCK_EINVAL, "script called with %d arguments", nargs);
        return NULL;
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = c->sha[id];
    argv[2] = nk;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    for (int i = 0; i < nargs + 3; i++)
        argvlen[i] = strlen(argv[i]);
    redisReply *r = relock__command(c, sent, nargs + 3, argv, argvlen);
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        argv[0] = "EVAL";
        argv[1] = sources[id];
        argvlen[0] = 4;
        argvlen[1] = strlen(sources[id]);
        r = relock__command(c, sent, nargs + 3, argv, argvlen);
    }
    return r;
}
