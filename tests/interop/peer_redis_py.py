#!/usr/bin/python3
"""The interop worker around the REAL redis-py Lock of Debian's python3-redis
(a token with SET NX PX, released by a compare-and-delete script): the loop,
the shared log (tests/interop/worker.h) and the critical section are ours,
the locking is the library's, unchanged.

  peer_redis_py.py PORT NAME TIMEOUT_MS UNTIL_MONO_MS LOG COUNTER DIE_PROB SEED GAP_MS
"""
import os
import random
import signal
import sys
import time

import redis

port, name, timeout, until, log, counter, die, seed, gap = sys.argv[1:]
timeout_s = int(timeout) / 1000
rng = random.Random(int(seed))
r = redis.Redis(host="127.0.0.1", port=int(port))


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def line(event, detail=""):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, ("%s %d %d redispy%s\n" % (event, mono_ns(), os.getpid(),
                                            " " + detail if detail else "")).encode())
    os.close(fd)


for _ in range(1000000):
    if mono_ns() // 1000000 >= int(until):
        break
    lock = r.lock(name, timeout=timeout_s, sleep=0.005, blocking_timeout=2)
    if not lock.acquire():
        continue
    # Its lease: the timeout from the SET, which came before this line.
    lease_end = mono_ns() + int(timeout) * 1000000
    line("enter")
    if rng.random() < float(die):
        line("die")
        os.kill(os.getpid(), signal.SIGKILL)
    v = r.get(counter)
    time.sleep(rng.random() * 0.003)
    r.set(counter, int(v or 0) + 1)
    line("exit", "overrun" if mono_ns() > lease_end else "")
    try:
        lock.release()
    except redis.exceptions.LockError:
        line("late")
    time.sleep(rng.random() * int(gap) / 1000)
