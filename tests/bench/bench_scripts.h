/*
 * The Lua scripts the raw baseline loops of relock_bench run: verbatim
 * copies of the ones in src/scripts.c, so that "relock" and "raw" send the
 * same bytes and the server does the same work for both.  The bench checks
 * at run time that the library sent exactly these texts (SCRIPT EXISTS of
 * their SHA-1 after one relock cycle on a flushed script cache) and marks
 * its ratios FAIL when they drift: update the copies from src/scripts.c.
 */
#ifndef RELOCK_BENCH_SCRIPTS_H
#define RELOCK_BENCH_SCRIPTS_H

/* RELOCK__SCRIPT_DEL_IF_EQ: KEYS[1] lock, ARGV[1] our value, ARGV[2] the
 * channel to tell waiters on, or ''.  Modern release. */
#define BENCH_SCRIPT_DEL_IF_EQ                                                 \
    "local v = redis.call('get', KEYS[1])\n"                                   \
    "if v == ARGV[1] then\n"                                                   \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  if ARGV[2] ~= '' then redis.pcall('publish', ARGV[2], '1') end\n"        \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "if v then return -1 end\n"                                                \
    "return 0\n"

/* RELOCK__SCRIPT_CAS: KEYS[1] lock, KEYS[2] fence; ARGV[1] expected value,
 * ARGV[2] expected fence or '0', ARGV[3] '1' TTL required, ARGV[4] new
 * value or '' (delete), ARGV[5] PEXPIRE ms, ARGV[6] EXPIRE s, ARGV[7] '1'
 * increment the fence, ARGV[8] channel or ''.  Legacy and bridge release. */
#define BENCH_SCRIPT_CAS                                                       \
    "local v = redis.call('get', KEYS[1])\n"                                   \
    "if v == ARGV[1] and (ARGV[2] == '0' or redis.call('get', KEYS[2]) == ARGV[2])\n" \
    "   and (ARGV[3] == '0' or redis.call('pttl', KEYS[1]) > 0) then\n"        \
    "  if ARGV[4] == '' then\n"                                                \
    "    redis.call('del', KEYS[1])\n"                                         \
    "    if ARGV[8] ~= '' then redis.pcall('publish', ARGV[8], '1') end\n"      \
    "    return {1, 0}\n"                                                      \
    "  end\n"                                                                  \
    "  redis.call('set', KEYS[1], ARGV[4])\n"                                  \
    "  if tonumber(ARGV[5]) > 0 then redis.call('pexpire', KEYS[1], ARGV[5])\n" \
    "  elseif tonumber(ARGV[6]) > 0 then redis.call('expire', KEYS[1], ARGV[6]) end\n" \
    "  local f = 0\n"                                                          \
    "  if ARGV[7] == '1' then f = redis.call('incr', KEYS[2]) end\n"           \
    "  return {1, f}\n"                                                        \
    "end\n"                                                                    \
    "if v then return {0, v} end\n"                                            \
    "return {0}\n"

/* RELOCK__SCRIPT_TS_ACQUIRE: KEYS[1] lock, KEYS[2] fence; ARGV[1] value,
 * ARGV[2] PEXPIRE ms or '0', ARGV[3] EXPIRE s or '0', ARGV[4] '1'
 * increment the fence.  Legacy and bridge acquire on servers with EVAL. */
#define BENCH_SCRIPT_TS_ACQUIRE                                                \
    "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then\n"                     \
    "  if tonumber(ARGV[2]) > 0 then redis.call('pexpire', KEYS[1], ARGV[2])\n" \
    "  elseif tonumber(ARGV[3]) > 0 then redis.call('expire', KEYS[1], ARGV[3]) end\n" \
    "  local f = 0\n"                                                          \
    "  if ARGV[4] == '1' then f = redis.call('incr', KEYS[2]) end\n"           \
    "  return {1, f}\n"                                                        \
    "end\n"                                                                    \
    "return {0, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[1])}\n"

/* RELOCK__SCRIPT_MODERN_ACQUIRE: KEYS[1] lock, KEYS[2] fence; ARGV[1]
 * token, ARGV[2] ttl ms.  Modern acquire with fencing. */
#define BENCH_SCRIPT_MODERN_ACQUIRE                                            \
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"       \
    "  return {1, redis.call('incr', KEYS[2])}\n"                              \
    "end\n"                                                                    \
    "return {0, redis.call('pttl', KEYS[1]), redis.call('get', KEYS[1])}\n"

#endif
