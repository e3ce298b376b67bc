#!/usr/bin/env python3
"""Records seed inputs for fuzz_replies from real conversations.

Starts a private redis-server and, for each server version fuzz_replies can
announce, a relock-compat-proxy with the matching personality in front of it
(2.6.12 has no personality of its own: 7 answers as it does for what relock
sends).  For each starting state of the lock key and each set of header
flags it runs fuzz_replies once in record mode (RELOCK_FUZZ_UPSTREAM,
RELOCK_FUZZ_RECORD), which writes the two header bytes and every reply the
server gave: an input that replays that conversation.  It also writes a few
hand-made conversations (handmade() below).

    tests/fuzz/record_seeds.py --fuzzer build-fuzz/tests/fuzz/fuzz_replies \\
        --proxy build/tests/support/proxy/relock-compat-proxy --out /tmp/seeds

Then keep what adds coverage:
    fuzz_replies -merge=1 tests/fuzz/corpus/fuzz_replies /tmp/seeds
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Index = byte 0 of the input (fuzz_replies.c versions[]); the proxy personality.
VERSIONS = [("2.0.5", "2.0"), ("2.2.15", "2.2"), ("2.6.0", "2.6.0"), ("2.6.12", "7"),
            ("7.0.15", "7")]

# Byte 1 flags (fuzz_replies.c F_*).
F_NOFENCE, F_UNIT_MS, F_CLOCK_SERVER, F_SUFFIX = 0x01, 0x02, 0x04, 0x08
F_GC, F_NONOTIFY, F_RAW_INFO, F_SCAN = 0x10, 0x20, 0x40, 0x80
V_AUTO, V_NO_LEGACY = 0x08, 0x10

FLAG_SETS = [0, F_NOFENCE | F_SCAN, F_UNIT_MS, F_SUFFIX | F_NONOTIFY, F_RAW_INFO,
             F_CLOCK_SERVER | F_GC]

FENCE_KEY = "{fz} relock:fence"


def states(unit_ms):
    """Starting states of the lock key "fz": name -> redis-cli commands."""
    live = "9999999999999" if unit_ms else "9999999999"
    dead = "1000000000000" if unit_ms else "1000000000"
    return {
        "free": [],
        "modern-held": [["SET", "fz", "0123456789abcdef0123456789abcdef", "PX", "60000"],
                        ["SET", FENCE_KEY, "41"]],
        "legacy-live": [["SET", "fz", live]],
        "legacy-dead": [["SET", "fz", dead], ["SET", FENCE_KEY, "7"]],
        "bridge-held": [["SET", "fz", live, "PX", "60000"], ["SET", FENCE_KEY, "9"]],
        "wrongtype": [["RPUSH", "fz", "x"]],
        "foreign": [["SET", "fz", "hello"]],
    }


NOSCRIPT = b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
WRONGTYPE = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"


def handmade():
    """Conversations no real server gives relock in its normal course:
    error replies everywhere, nil, replies of the wrong type or shape,
    probing without INFO, odd TIME and SCAN replies.  name -> input."""
    v20, v22, v260, v2612, v7 = 0, 1, 2, 3, 4
    return {
        "noscript-7": bytes([v7, 0]) + NOSCRIPT * 40,
        "noscript-2.6.0-nofence": bytes([v260, F_NOFENCE]) + NOSCRIPT * 40,
        "wrongtype-7": bytes([v7, 0]) + (NOSCRIPT + WRONGTYPE) * 20,
        "wrongtype-2.2": bytes([v22, 0]) + WRONGTYPE * 40,
        "nil-bulk-7": bytes([v7, F_NOFENCE]) + b"$-1\r\n" * 40,
        "nil-array-2.2": bytes([v22, 0]) + b"+OK\r\n$-1\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*-1\r\n" * 8,
        "nil-array-2.0": bytes([v20, 0]) + b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*-1\r\n$-1\r\n" * 8,
        "errors-7": bytes([v7, F_SCAN]) + (b"-ERR unknown command 'EVALSHA'\r\n"
                                           b"-LOADING Redis is loading the dataset in memory\r\n"
                                           b"-READONLY You can't write against a read only replica.\r\n"
                                           b"-BUSY Redis is busy running a script.\r\n"
                                           b"-MOVED 3999 127.0.0.1:6381\r\n") * 8,
        "types-7": bytes([v7, 0]) + (b":1\r\n+OK\r\n*0\r\n*5\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n"
                                     b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n*2\r\n:1\r\n$-1\r\n") * 6,
        "nested-7": bytes([v7, 0]) + b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n" * 4,
        "modern-takeover-7": bytes([v7, 0]) + NOSCRIPT + b"*3\r\n:0\r\n:-1\r\n$10\r\n1000000000\r\n"
                             + NOSCRIPT + b"*2\r\n:1\r\n:5\r\n:1\r\n:1\r\n",
        "modern-live-legacy-7": bytes([v7, 0]) + b"*3\r\n:0\r\n:-1\r\n$10\r\n9999999999\r\n+OK\r\n",
        "modern-foreign-7": bytes([v7, 0]) + b"*3\r\n:0\r\n:-1\r\n$5\r\nhello\r\n",
        "modern-plain-busy-2.6.12": bytes([v2612, F_NOFENCE]) + b"$-1\r\n:-1\r\n$10\r\n1000000000\r\n"
                                    + NOSCRIPT + b"*1\r\n:0\r\n",
        "probe-no-info-7": bytes([v7, F_RAW_INFO]) + b"-ERR unknown command 'INFO'\r\n"
                           b"*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n+OK\r\n" * 3,
        "probe-no-info-2.0": bytes([v20, F_RAW_INFO]) + (b"-ERR unknown command 'INFO'\r\n"
                             b"-ERR unknown command 'TIME'\r\n-ERR unknown command 'UNWATCH'\r\n") * 3,
        "probe-bad-info": bytes([v7, F_RAW_INFO]) + b"$5\r\nhello\r\n$22\r\nredis_version:9.x.y\r\n\r\n:7\r\n",
        "clock-server-2.6.0": bytes([v260, F_CLOCK_SERVER]) + b"*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
                              b"*2\r\n$10\r\n1700000000\r\n$6\r\n999999\r\n" + NOSCRIPT * 4,
        "scan-7": bytes([v7, F_SCAN | F_NOFENCE]) + b"$-1\r\n" * 12
                  + b"*2\r\n$1\r\n7\r\n*3\r\n$2\r\nfz\r\n$17\r\n{fz} relock:fence\r\n$1\r\nq\r\n"
                  b"$10\r\n1000000000\r\n:-1\r\n" + WRONGTYPE + b":-1\r\n"
                  b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nt\r\n$32\r\n0123456789abcdef0123456789abcdef\r\n:5000\r\n"
                  b"$13\r\n1700000000000\r\n",
        "scan-keys-2.2": bytes([v22, F_SCAN]) + b"$-1\r\n" * 8 + b":3\r\n*2\r\n$2\r\nfz\r\n$1\r\nz\r\n"
                         b"$10\r\n9999999999\r\n:-1\r\n$-1\r\n:-2\r\n$-1\r\n",
        "truncated-7": bytes([v7, 0]) + b"*2\r\n:1\r\n",
        "garbage-7": bytes([v7, 0]) + b"hello world\r\n",
    }


def resp_span(b, i):
    """End of the RESP2 reply starting at b[i] (None when cut short)."""
    j = b.find(b"\r\n", i)
    if j < 0:
        return None
    t, head = b[i:i + 1], b[i + 1:j]
    if t in (b"+", b"-", b":"):
        return j + 2
    n = int(head)
    if t == b"$":
        return j + 2 if n < 0 else j + 2 + n + 2
    k = j + 2
    for _ in range(max(n, 0)):
        k = resp_span(b, k)
        if k is None:
            return None
    return k


def shorten_info(data):
    """A real INFO reply is some 5 kB of text relock reads one line of:
    keep the header bytes and that line."""
    out, i = bytearray(data[:2]), 2
    while i < len(data):
        k = resp_span(data, i)
        if k is None:
            out += data[i:]
            break
        reply = data[i:k]
        if reply.startswith(b"$") and b"redis_version:" in reply:
            line = reply[reply.index(b"redis_version:"):]
            line = line[:line.index(b"\r\n") + 2]
            body = (b"" if line.startswith(b"redis_version:2.0.") else b"# Server\r\n") + line
            reply = b"$%d\r\n%s\r\n" % (len(body), body)
        out += reply
        i = k
    return bytes(out)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cli(port, *args):
    subprocess.run(["redis-cli", "-p", str(port), *args], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fuzzer", required=True)
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, data in handmade().items():
        with open(os.path.join(a.out, f"hand-{name}"), "wb") as f:
            f.write(data)
    tmp = tempfile.mkdtemp(prefix="relock-seeds-")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", tmp],
                              stdout=subprocess.DEVNULL)
    proxies = []
    try:
        for _ in range(200):
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        count = 0
        for idx, (version, personality) in enumerate(VERSIONS):
            proxy = subprocess.Popen([a.proxy, "--upstream", f"127.0.0.1:{port}", "--listen", "0",
                                      "--personality", personality],
                                     stdout=subprocess.PIPE, text=True)
            proxies.append(proxy)
            pport = int(proxy.stdout.readline().split()[1])
            for flags in FLAG_SETS:
                for name, cmds in states(flags & F_UNIT_MS).items():
                    vbyte = idx
                    if name in ("legacy-dead", "modern-held"):
                        vbyte |= V_AUTO | (V_NO_LEGACY if flags & F_NOFENCE else 0)
                    cli(port, "FLUSHALL")
                    # A fresh server: the first EVALSHA of each script meets NOSCRIPT.
                    cli(port, "SCRIPT", "FLUSH")
                    for c in cmds:
                        cli(port, *c)
                    header = os.path.join(tmp, "header")
                    with open(header, "wb") as f:
                        f.write(bytes([vbyte, flags]))
                    out = os.path.join(a.out, f"rec-{version}-{flags:02x}-{name}")
                    env = dict(os.environ, RELOCK_FUZZ_UPSTREAM=str(pport), RELOCK_FUZZ_RECORD=out)
                    # -detect_leaks=0: with it libFuzzer runs a lone input twice, and
                    # the second conversation would overwrite the first.
                    subprocess.run([a.fuzzer, "-runs=1", "-detect_leaks=0", header], env=env, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    with open(out, "rb") as f:
                        data = shorten_info(f.read())
                    with open(out, "wb") as f:
                        f.write(data)
                    count += 1
            proxy.send_signal(signal.SIGTERM)
            proxy.wait()
        print(f"recorded {count} seeds in {a.out}")
    finally:
        for p in proxies:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait()
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
