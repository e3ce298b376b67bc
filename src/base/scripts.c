/*
 * The Lua scripts of every algorithm, run by EVALSHA with a fallback to
 * EVAL on NOSCRIPT (first use, a restart, SCRIPT FLUSH); their SHA-1 is
 * computed here, so no SCRIPT LOAD round trip is needed.  They return 1
 * for done, 0 for "the key is absent", -1 for "it holds another value".
 *
 * Release notices use redis.pcall: PUBLISH fails for an ACL user without
 * channel permissions (Redis 7's default resetchannels), and redis.call
 * would then report a release that happened as a failure.  A lost notice
 * only wakes waiters later.
 */
#include <stdio.h>
#include <string.h>

#include "handle.h"

static const char *const sources[RELOCK__NSCRIPTS] = {
    /* RELOCK__SCRIPT_DEL_IF_EQ: KEYS[1] lock, ARGV[1] our value, ARGV[2]
     * the channel to tell waiters on, or '' (wait.notify = false).
     * Returns 1 + the number of waiters told when deleted. */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] then\n"
    "  redis.call('del', KEYS[1])\n"
    "  local n = 0\n"
    "  if ARGV[2] ~= '' then n = redis.pcall('publish', ARGV[2], '1') end\n"
    "  if type(n) ~= 'number' then n = 0 end\n"
    "  return 1 + n\n"
    "end\n"
    "if v then return -1 end\n"
    "return 0\n",
    /* RELOCK__SCRIPT_PEXPIRE_IF_EQ: KEYS[1] lock, ARGV[1] our value, ARGV[2] ttl ms */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end\n"
    "if v then return -1 end\n"
    "return 0\n",
    /* RELOCK__SCRIPT_CAS: compare-and-set or -delete for timestamp values.
     * KEYS[1] lock, KEYS[2] fence counter.  ARGV[1] the value expected,
     * ARGV[2] the fence expected or '0' (not checked), ARGV[3] '1' if the
     * key must have a TTL (bridge values; a legacy writer leaves none),
     * ARGV[4] the new value or '' to delete, ARGV[5] PEXPIRE ms or '0',
     * ARGV[6] EXPIRE s or '0', ARGV[7] '1' to increment the fence,
     * ARGV[8] the channel to tell waiters on after a delete, or ''.
     * Returns {1, fence or 0} when done ({1, waiters told} for a delete),
     * {0, value found} on a mismatch (a GETSET loser's write shows), {0}
     * when absent. */
    "local v = redis.call('get', KEYS[1])\n"
    "if v == ARGV[1] and (ARGV[2] == '0' or redis.call('get', KEYS[2]) == ARGV[2])\n"
    "   and (ARGV[3] == '0' or redis.call('pttl', KEYS[1]) > 0) then\n"
    "  if ARGV[4] == '' then\n"
    "    redis.call('del', KEYS[1])\n"
    "    local n = 0\n"
    "    if ARGV[8] ~= '' then n = redis.pcall('publish', ARGV[8], '1') end\n"
    "    if type(n) ~= 'number' then n = 0 end\n"
    "    return {1, n}\n"
    "  end\n"
    "  redis.call('set', KEYS[1], ARGV[4])\n"
    "  if tonumber(ARGV[5]) > 0 then redis.call('pexpire', KEYS[1], ARGV[5])\n"
    "  elseif tonumber(ARGV[6]) > 0 then redis.call('expire', KEYS[1], ARGV[6]) end\n"
    "  local f = 0\n"
    "  if ARGV[7] == '1' then f = redis.call('incr', KEYS[2]) end\n"
    "  return {1, f}\n"
    "end\n"
    "if v then return {0, v} end\n"
    "return {0}\n",
    /* RELOCK__SCRIPT_TS_ACQUIRE: SETNX of a timestamp value, with its TTL
     * and fence in the same step.  KEYS[1] lock, KEYS[2] fence counter.
     * ARGV[1] value, ARGV[2] PEXPIRE ms or '0', ARGV[3] EXPIRE s or '0',
     * ARGV[4] '1' to increment the fence.  Returns {1, fence or 0}, or
     * {0, pttl, value} when held (the value last: it may be nil). */
    "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then\n"
    "  if tonumber(ARGV[2]) > 0 then redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  elseif tonumber(ARGV[3]) > 0 then redis.call('expire', KEYS[1], ARGV[3]) end\n"
    "  local f = 0\n"
    "  if ARGV[4] == '1' then f = redis.call('incr', KEYS[2]) end\n"
    "  return {1, f}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[1])}\n",
    /* RELOCK__SCRIPT_MODERN_ACQUIRE: SET NX PX and the fence in one step.
     * KEYS[1] lock, KEYS[2] fence counter; ARGV[1] token, ARGV[2] ttl ms.
     * Returns {1, fence}, or {0, pttl, value} when held. */
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  return {1, redis.call('incr', KEYS[2])}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[1])}\n",
    /* RELOCK__SCRIPT_MODERN_TAKEOVER: replace a dead legacy holder's value
     * (expired timestamp, no TTL) by our token.  KEYS[1] lock, KEYS[2]
     * fence; ARGV[1] the value seen, ARGV[2] token, ARGV[3] ttl ms,
     * ARGV[4] '1' to increment the fence.  Returns {1, fence or 0} or {0}. */
    "if redis.call('get', KEYS[1]) == ARGV[1] and redis.call('pttl', KEYS[1]) < 0 then\n"
    "  redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
    "  local f = 0\n"
    "  if ARGV[4] == '1' then f = redis.call('incr', KEYS[2]) end\n"
    "  return {1, f}\n"
    "end\n"
    "return {0}\n",
    /* RELOCK__SCRIPT_BREAK_IF_EQ: KEYS[1] lock, KEYS[2] fence counter;
     * ARGV[1] the value to break, or '' for whatever the key holds;
     * ARGV[2] the channel or ''; ARGV[3] the fence that must be current,
     * or '0'.  Deletes and increments the fence (so the broken holder's
     * checks fail); returns as DEL_IF_EQ does, and -2 when the value is
     * the one given but the fence is not. */
    "local v = redis.call('get', KEYS[1])\n"
    "if v and v == ARGV[1] and ARGV[3] ~= '0' and redis.call('get', KEYS[2]) ~= ARGV[3] then\n"
    "  return -2\n"
    "end\n"
    "if v and (ARGV[1] == '' or v == ARGV[1]) then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('incr', KEYS[2])\n"
    "  local n = 0\n"
    "  if ARGV[2] ~= '' then n = redis.pcall('publish', ARGV[2], '1') end\n"
    "  if type(n) ~= 'number' then n = 0 end\n"
    "  return 1 + n\n"
    "end\n"
    "if v then return -1 end\n"
    "return 0\n",
    /* RELOCK__SCRIPT_FENCE_RAISE: KEYS[1] fence counter, ARGV[1] a token.
     * Raises the counter to the token if it is lower (quorum, design.md §9.1). */
    "local v = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if v < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end\n"
    "return 1\n",
    /* RELOCK__SCRIPT_FENCE_CARRY: KEYS[1] a whole-tag key's fence counter,
     * KEYS[2] the counter it used before (keys.c).  Raises the first to the
     * second if it is lower; never lowers it. */
    "local old = tonumber(redis.call('get', KEYS[2]) or '0') or 0\n"
    "local v = tonumber(redis.call('get', KEYS[1]) or '0') or 0\n"
    "if v < old then redis.call('set', KEYS[1], old) end\n"
    "return 1\n",
    /* RELOCK__SCRIPT_OWNER_IF_HELD: KEYS[1] lock, KEYS[2] fence counter,
     * KEYS[3] owner record; ARGV[1] the holder's value, ARGV[2] its fence
     * or '0' (not checked), ARGV[3] the record or '' to delete it, ARGV[4]
     * its TTL in ms.  Writes or deletes the record only while the lock is
     * the holder's (src/api/lock.c): 1 done, 0 not held. */
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "if ARGV[2] ~= '0' and redis.call('get', KEYS[2]) ~= ARGV[2] then return 0 end\n"
    "if ARGV[3] == '' then redis.call('del', KEYS[3])\n"
    "else redis.call('psetex', KEYS[3], ARGV[4], ARGV[3]) end\n"
    "return 1\n",
};

const char *relock__script_source(int id)
{
    return sources[id];
}

void relock__scripts_init(relock_client *c)
{
    for (int i = 0; i < RELOCK__NSCRIPTS; i++)
        relock__sha1_hex(sources[i], strlen(sources[i]), c->sha[i]);
}
