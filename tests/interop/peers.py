#!/usr/bin/python3
"""Interop beside the lock libraries fleets run (docs/migration.md, Peers).

Each scenario runs peer workers and relock workers on one lock key of a
real redis-server, all doing read-modify-write increments of one counter
inside the lock and logging their critical sections to one shared log
(tests/interop/worker.h); interop_check counts the overlaps.

Peers:
  redislock   the REAL npm redis-lock@0.0.9 (with redis@3), installed with npm
              into a cache outside the repository (PEERS_DIR, default
              ~/.cache/relock/peers), driven by peer_redis_lock.js
  redislock014  the REAL npm redis-lock@0.1.4 (SET NX PX of the same value),
              the same way
  redispy     the REAL redis-py Lock of Debian's python3-redis (a modern
              token lock), driven by peer_redis_py.py
  laravel     the REAL Laravel lock of Debian's php-illuminate-cache
              (Illuminate\Cache\PhpRedisLock over php-illuminate-redis and
              phpredis: a 16-character owner, SET NX EX), driven by
              peer_laravel.php
  redlock     the REAL npm redlock@4.2.0 (with redis@3) on one server, and
  semaphore   the REAL npm redis-semaphore@5.6.0 Mutex (with ioredis@5),
              installed as redis-lock is, driven by peer_npm_token.js
  mutex, redispy2, resque, jedis
              faithful clients of ours for families that cannot be installed
              here (Ruby gems, Java, redis-py < 2.10): peer_clients --style

relock workers, configured as docs/migration.md gives each peer
(legacy.peer = <profile>):
  run         `relock run NAME -- <section>` again and again
  valid       `relock acquire`, then a section that relies on the validity it
              printed, then `relock release`

Holders die: every worker SIGKILLs itself while holding now and then (the
"die" line), and is started again.  Holders stop: the runner SIGSTOPs a
relock worker's whole process group (relock with its section) for longer
than a lease, then SIGCONTs it; a section that outlived its lease says
"overrun", and relock run's exit 3 says "lost".  Overlaps that involve such
an overrun are the stopped holder's (counted apart); every other overlap is
a failure, and so is a lost update (counter below the completed sections)
beyond what those overrun overlaps explain.  Half the holders that rely on
the validity relock printed hold the lock until 10 ms before its end.
Two negative controls must overlap: relock in modern mode beside the
redis-mutex client, which reads a token with to_f as 0 and takes it; and
relock in legacy mode told that the fleet compares whole units with no
offset, beside the redis-py < 2.10 client, which takes V over at V.000,
before the end of the validity relock printed (the configuration the
profiles replace).

  peers.py --relock BIN --check BIN --peer-clients BIN [--short] [--only NAME]
           [--server BIN] [--keep-logs]
Exit 0 all passed, 1 a scenario failed, 77 skipped (no redis-server, or no
scenario could run: node, npm, php or a pinned peer missing; each skipped
scenario says why).
"""
import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS_DIR = os.environ.get("PEERS_DIR", os.path.expanduser("~/.cache/relock/peers"))
# The pinned npm peers: each version of redis-lock with the callback client
# it needs, in a directory of its own.
NPM_PINS = {"redislock": ["redis-lock@0.0.9", "redis@3.1.2"],
            "redislock014": ["redis-lock@0.1.4", "redis@3.1.2"],
            "redlock": ["redlock@4.2.0", "redis@3.1.2"],
            "semaphore": ["redis-semaphore@5.6.0", "ioredis@5.4.1"]}
# Laravel's lock and the client it talks through, from Debian's packages.
PHP_AUTOLOADS = ["/usr/share/php/Illuminate/Cache/autoload.php",
                 "/usr/share/php/Illuminate/Redis/autoload.php"]


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def mono_ms():
    return mono_ns() // 1000000


# ------------------------------------------------------------ a RESP client


class Resp:
    """Just enough of the protocol for the section's GET and SET."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        if not line:
            raise IOError("connection closed")
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return rest.decode()
        if t == b"-":
            raise IOError(rest.decode())
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if t == b"*":
            return [self.read() for _ in range(int(rest))]
        raise IOError("bad reply %r" % line)


def log_line(path, event, ident, kind, detail=""):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("%s %d %d %s%s\n" % (event, mono_ns(), ident, kind,
                                            " " + detail if detail else "")).encode())
    finally:
        os.close(fd)


def section(r, log, ident, kind, lease_end_ns, die, rng, hold_ms=3, until_ns=0):
    """The section of every worker: enter, maybe die, GET, 0-3 ms (the
    negative control holds longer; a holder relying on its validity may
    hold until just before until_ns), SET, exit."""
    log_line(log, "enter", ident, kind)
    if die:
        log_line(log, "die", ident, kind)
        os.killpg(0, signal.SIGKILL)
    v = r.cmd("GET", "counter")
    if until_ns:
        time.sleep(max(0, until_ns - mono_ns()) / 1e9)
    else:
        time.sleep(rng.random() * hold_ms / 1000)
    r.cmd("SET", "counter", int(v or 0) + 1)
    over = lease_end_ns and mono_ns() > lease_end_ns
    log_line(log, "exit", ident, kind, "overrun" if over else "")


# ------------------------------------------------------------ relock workers


def worker_section(a):
    """`relock run` runs this: the section, its id the slot's process group."""
    rng = random.Random(int(a.seed) ^ os.getpid())
    section(Resp(int(a.port)), a.log, os.getpgrp(), a.kind, 0,
            rng.random() < float(a.die), rng, int(a.hold))


def worker_run(a):
    """A slot: relock run again and again until the deadline."""
    os.setpgrp()
    ident = os.getpgrp()
    rng = random.Random(int(a.seed))
    for _ in range(1000000):
        if mono_ms() >= int(a.until):
            return
        log_line(a.log, "run", ident, a.kind)
        cmd = [a.relock, "-c", a.conf, "run", "-t", "%dms" % int(a.ttl), "-w", "2s", a.name, "--",
               sys.executable, os.path.abspath(__file__), "section", "--port", a.port,
               "--log", a.log, "--kind", a.kind, "--die", a.die, "--hold", a.hold,
               "--seed", str(rng.getrandbits(31))]
        rc = subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if rc == 3:
            log_line(a.log, "lost", ident, a.kind, "cli")
        elif rc not in (0, 1):
            log_line(a.log, "error", ident, a.kind, "run:exit%d" % rc)
        time.sleep(rng.random() * int(a.gap) / 1000)


def worker_valid(a):
    """A slot: relock acquire; a section that relies on the printed validity;
    relock release."""
    os.setpgrp()
    ident = os.getpid()
    rng = random.Random(int(a.seed))
    r = Resp(int(a.port))
    base = [a.relock, "-c", a.conf]
    for _ in range(1000000):
        if mono_ms() >= int(a.until):
            return
        t0 = mono_ns()
        p = subprocess.run(base + ["acquire", "-t", "%dms" % int(a.ttl), "-w", "2s", a.name],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if p.returncode != 0:
            if p.returncode not in (1,):
                log_line(a.log, "error", ident, a.kind, "acquire:exit%d" % p.returncode)
            continue
        value, fence, validity = p.stdout.split()
        # The validity counts from just before relock read its clock, after
        # t0.  Half the holders use it to its last 10 ms: what a holder
        # relying on the printed validity may do.
        end = t0 + int(validity) * 1000000
        use = end - 10000000 if rng.random() < 0.5 else 0
        section(r, a.log, ident, a.kind, end, rng.random() < float(a.die), rng, int(a.hold),
                use)
        rc = subprocess.call(base + ["release", a.name, value, fence],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if rc == 3:
            log_line(a.log, "lost", ident, a.kind, "expired")
        time.sleep(rng.random() * int(a.gap) / 1000)


# ------------------------------------------------------------ the runner


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="relock-peers-")
        self.port = free_port()
        # A configuration file: servers before 2.6 take no options (dir first,
        # where they open their log; no save line, which they refuse empty).
        conf = os.path.join(self.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write("dir %s\nport %d\nbind 127.0.0.1\nappendonly no\ndaemonize no\n"
                    % (self.dir, self.port))
        self.proc = subprocess.Popen([binary, conf], cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(400):
            try:
                if Resp(self.port).cmd("PING") == "PONG":
                    return
            except (IOError, OSError):
                time.sleep(0.025)
        raise SystemExit("peers: redis-server did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


def node_ready(peer):
    """The pinned npm peer, installed into PEERS_DIR once; None when it cannot be."""
    pins = NPM_PINS[peer]
    d = os.path.join(PEERS_DIR, "npm-" + pins[0].replace("@", "-"))
    mods = os.path.join(d, "node_modules")
    # Each pinned package's own package.json: the peer and its client.
    there = lambda: all(os.path.exists(os.path.join(mods, pin.rsplit("@", 1)[0], "package.json"))
                        for pin in pins)
    if there():
        return mods
    if not shutil_which("node") or not shutil_which("npm"):
        return None
    os.makedirs(d, exist_ok=True)
    try:
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", d] + pins,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180,
                       check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return mods if there() else None


def python_redis():
    """Whether Debian's python3-redis is there (the system's python3)."""
    return subprocess.call(["/usr/bin/python3", "-c", "import redis.lock"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def php_laravel():
    """Whether php, phpredis and Laravel's lock (Debian's php-cli, php-redis,
    php-illuminate-cache and php-illuminate-redis) are there."""
    if not shutil_which("php"):
        return False
    code = "".join('require "%s";' % f for f in PHP_AUTOLOADS) + \
        'exit(class_exists("Redis") && class_exists("Illuminate\\Cache\\PhpRedisLock") && ' \
        'class_exists("Illuminate\\Redis\\Connections\\PhpRedisConnection") ? 0 : 1);'
    if not all(os.path.exists(f) for f in PHP_AUTOLOADS):
        return False
    return subprocess.call(["php", "-r", code], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) == 0


def shutil_which(name):
    import shutil
    return shutil.which(name)


# (name, peer kind, relock mode, legacy.peer, unit, timeout in the unit,
#  relock ttl ms, expect overlaps)
SCENARIOS = [
    ("redislock-bridge", "redislock", "bridge", "redis-lock-js", "ms", 1000, 1000, False),
    ("redislock-legacy", "redislock", "legacy", "redis-lock-js", "ms", 1000, 1000, False),
    # npm redis-lock 0.1.x: the same value with SET NX PX, and no reading of
    # values at all: modern mode is safe beside it too.
    ("redislock014-bridge", "redislock014", "bridge", "redis-lock-js", "ms", 1000, 1000, False),
    ("redislock014-modern", "redislock014", "modern", "redis-lock-js", "ms", 1000, 1000, False),
    ("mutex-bridge", "mutex", "bridge", "redis-mutex", "s", 1, 1000, False),
    ("mutex-legacy", "mutex", "legacy", "redis-mutex", "s", 1, 1000, False),
    ("redispy2-bridge", "redispy2", "bridge", "redis-py-2", "s", 1, 1000, False),
    ("resque-bridge", "resque", "bridge", "resque-lock-timeout", "s", 1, 1000, False),
    ("jedis-bridge", "jedis", "bridge", "jedis-lock", "ms", 1000, 1000, False),
    # A modern library: Debian's python3-redis Lock (a token, SET NX PX).
    ("redispy-modern", "redispy", "modern", "", "ms", 1000, 1000, False),
    ("redispy-bridge", "redispy", "bridge", "", "ms", 1000, 1000, False),
    # Laravel's RedisLock (Debian's php-illuminate-cache): a 16-character
    # owner, SET NX EX of whole seconds.
    ("laravel-modern", "laravel", "modern", "", "ms", 1000, 1000, False),
    ("laravel-bridge", "laravel", "bridge", "", "ms", 1000, 1000, False),
    # npm redlock on one server and redis-semaphore's Mutex (key
    # "mutex:" + name, relock's key_prefix): tokens with SET PX.
    ("redlock-modern", "redlock", "modern", "", "ms", 1000, 1000, False),
    ("redlock-bridge", "redlock", "bridge", "", "ms", 1000, 1000, False),
    ("semaphore-modern", "semaphore", "modern", "", "ms", 1000, 1000, False),
    ("semaphore-bridge", "semaphore", "bridge", "", "ms", 1000, 1000, False),
    ("control-modern-mutex", "mutex", "modern", "redis-mutex", "s", 1, 1000, True),
    # relock told the fleet compares whole units with no offset, beside a
    # float-second client: the validity relock prints runs past V.000,
    # where that client takes the lock over.
    ("control-whole-redispy2", "redispy2", "legacy",
     'clock_unit = "s"; expiry_offset = 0; reader_clock = "whole";', "s", 1, 1000, True),
]
# The peers that write a token with a TTL through their own library.
TOKEN_PEERS = ("laravel", "redlock", "semaphore")
# The kind a peer's lines carry in the log, where it is not the peer's name.
PEER_KIND = {"redislock014": "redislock"}
# The short form (ctest interop_peers): one negative control, the modern one,
# which overlaps hundreds of times a second.  control-whole-redispy2 needs
# its relock holders to win against three busy peers and then a peer to try
# inside the last second of their validity: on a loaded machine a 5 s run
# sometimes had no such moment (9 sections in all), so it runs in the full
# form (./dev interop) only.
SHORT = {"redislock-bridge": 6, "mutex-bridge": 5, "control-modern-mutex": 6,
         "laravel-modern": 6, "redlock-modern": 5}


def server_version(binary):
    """The version redis-server BINARY runs, as a tuple."""
    srv = Server(binary)
    try:
        info = Resp(srv.port).cmd("INFO")
    finally:
        srv.stop()
    for line in info.splitlines():
        if line.startswith("redis_version:"):
            return tuple(int(x) for x in line.split(":")[1].strip().split(".")[:3])
    return (0, 0, 0)


def kinds_entered(log):
    """The kinds that entered a section so far ("enter TIME ID KIND")."""
    kinds = set()
    with open(log) as f:
        for line in f:
            w = line.split()
            if len(w) >= 4 and w[0] == "enter":
                kinds.add(w[3])
    return kinds


def run_scenario(a, sc, seconds, node_mods):
    name, peer, mode, profile, unit, timeout, ttl, expect_overlap = sc
    srv = Server(a.server)
    tmp = tempfile.mkdtemp(prefix="relock-peers-%s-" % name)
    log = os.path.join(tmp, "log")
    conf = os.path.join(tmp, "relock.conf")
    # A profile's name, or legacy settings written out (the control that
    # describes the fleet wrongly).
    legacy = profile if "=" in profile else 'peer = "%s";' % profile if profile else ""
    # redis-semaphore's Mutex keys its locks "mutex:" + name.
    prefix = 'key_prefix = "mutex:";' if peer == "semaphore" else ""
    with open(conf, "w") as f:
        f.write('relock = {\n  mode = "%s";\n  servers = ( { host = "127.0.0.1"; port = %d; } );\n'
                '  %s\n  owner_info = false;\n  %s\n};\n'
                % (mode, srv.port, "legacy = { %s };" % legacy if legacy else "", prefix))
    # The key the peer uses, and the name relock gives it under the profile's
    # key_prefix (docs/legacy.md, Peers).
    key = {"redislock": "lock.job", "redislock014": "lock.job", "mutex": "RedisMutex:job",
           "resque": "resque:lock:job"}.get(peer, "job")
    relock_name = "job"
    until = mono_ms() + seconds * 1000
    rng = random.Random(hash(name) & 0xffff)
    procs = []  # [popen, argv, env, mortal, relock-slot]

    def start(argv, env=None, slot=False):
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append([p, argv, env, slot])

    def reseeded(argv):
        """argv with a new seed after the word before it ("--seed", or the
        peers' seed argument: the one after the die probability).  A worker
        casts its dice from its seed alone, so one restarted with the seed
        it died with dies again in its first section, every time: a worker
        whose first die came up dead would never hold the lock again."""
        out = list(argv)
        for i in range(len(out) - 1):
            if out[i] == "--seed" or (out[i] == die and i + 1 < len(out) and
                                      out[i + 1].isdigit() and not out[i - 1].startswith("--")):
                out[i + 1] = str(rng.getrandbits(31))
                break
        return out

    me = [sys.executable, os.path.abspath(__file__)]
    # The modern control: sections held longer and one peer client, so
    # that the peer meets relock's tokens while relock holds them.
    # The token peers added since (laravel, redlock, semaphore) run as in
    # the other scenarios: three clients, short sections.
    short_sections = mode != "modern" or peer in TOKEN_PEERS
    hold = "3" if short_sections else "100"
    npeers = 3 if short_sections else 1
    common = ["--port", str(srv.port), "--log", log, "--relock", a.relock, "--conf", conf,
              "--name", relock_name, "--ttl", str(ttl), "--until", str(until), "--gap", "20",
              "--hold", hold]
    # A negative control must show its overlaps every time, also in the
    # short form on a loaded machine: its relock workers neither die nor
    # are stopped, so that the holders relying on their validity hold to
    # its end in every round (with deaths, a short run once had none).
    die = "0" if expect_overlap else "0.02"
    for i in range(2):
        start(me + ["run"] + common + ["--kind", "run", "--die", die,
                                       "--seed", str(rng.getrandbits(31))], slot=True)
        start(me + ["valid"] + common + ["--kind", "valid", "--die", die,
                                         "--seed", str(rng.getrandbits(31))], slot=True)
    for i in range(npeers):
        if peer == "redispy":
            start(["/usr/bin/python3", os.path.join(HERE, "peer_redis_py.py"), str(srv.port),
                   "job", str(timeout), str(until), log, "counter", die,
                   str(rng.getrandbits(31)), "20"])
        elif peer == "laravel":
            start(["php", os.path.join(HERE, "peer_laravel.php"), str(srv.port), "job",
                   str(timeout), str(until), log, "counter", die, str(rng.getrandbits(31)),
                   "20"])
        elif peer in ("redlock", "semaphore"):
            env = dict(os.environ, NODE_PATH=node_mods[peer])
            start(["node", os.path.join(HERE, "peer_npm_token.js"), peer, str(srv.port), "job",
                   str(timeout), str(until), log, "counter", die, str(rng.getrandbits(31)),
                   "20"], env=env)
        elif peer in NPM_PINS:
            env = dict(os.environ, NODE_PATH=node_mods[peer])
            start(["node", os.path.join(HERE, "peer_redis_lock.js"), str(srv.port), "job",
                   str(timeout), str(until), log, "counter", die, str(rng.getrandbits(31)),
                   "20"], env=env)
        else:
            start([a.peer_clients, "--style", {"mutex": "redis-mutex", "redispy2": "redis-py-2",
                                               "resque": "resque-lock-timeout",
                                               "jedis": "jedis-lock"}[peer],
                   "--port", str(srv.port), "--key", key, "--unit", unit, "--timeout",
                   str(timeout), "--sections", "1000000", "--log", log, "--counter", "counter",
                   "--die-prob", die, "--seed", str(rng.getrandbits(31)), "--until-ms",
                   str(until), "--gap-ms", "20"])
    # Until the deadline: restart the dead, stop a relock slot now and then.
    # A run that ends before every kind has held once (on a loaded machine
    # relock's waiters, woken by the release notice, may win every handoff
    # of a short run against a peer that polls) goes on, one length at a
    # time, twice at most: the checks below still want every kind.
    stops = 0
    next_stop = mono_ms() + 700
    failures = []
    extensions = 0
    want = {"run", "valid", PEER_KIND.get(peer, peer)}
    for _ in range(300000):
        now = mono_ms()
        if now >= until:
            if expect_overlap or extensions >= 2 or want <= kinds_entered(log):
                break
            old_until, until = str(until), now + seconds * 1000
            extensions += 1
            for entry in procs:
                entry[1] = [str(until) if w == old_until else w for w in entry[1]]
        for entry in procs:
            p, argv, env, slot = entry
            rc = p.poll()
            if rc is None:
                continue
            if rc == -signal.SIGKILL or rc == 0 and now < until - 500:
                entry[1] = argv = reseeded(argv)
                entry[0] = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
            elif rc not in (0, -signal.SIGKILL):
                failures.append("%s exited %d: %s" % (argv[0], rc,
                                                      p.stderr.read().decode()[:300]))
                entry[0] = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
        if now >= next_stop and not expect_overlap:
            slots = [e[0] for e in procs if e[3] and e[0].poll() is None]
            if slots:
                victim = rng.choice(slots)
                try:
                    os.killpg(victim.pid, signal.SIGSTOP)
                    time.sleep((ttl * (1.2 + rng.random())) / 1000)
                    os.killpg(victim.pid, signal.SIGCONT)
                    stops += 1
                except ProcessLookupError:
                    pass
            next_stop = mono_ms() + 1500 + rng.randrange(1000)
        time.sleep(0.02)
    # Grace: every worker ends its round; then anything left is killed.
    end = mono_ms() + 15000
    for entry in procs:
        p = entry[0]
        try:
            p.wait(timeout=max(0.1, (end - mono_ms()) / 1000))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL) if entry[3] else p.kill()
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
    counter = int(Resp(srv.port).cmd("GET", "counter") or 0)
    srv.stop()
    out = subprocess.run([a.check, log], stdout=subprocess.PIPE, text=True)
    first = out.stdout.splitlines()[0] if out.stdout else ""
    # "N lines (...), S sections, D deaths, O overlaps (+X involving an overrun lease), ..."
    words = first.replace(",", "").split()
    sections = int(words[words.index("sections") - 1])
    overlaps = int(words[words.index("overlaps") - 1])
    overrun = int(words[words.index("overlaps") + 1].lstrip("(+"))
    lost_updates = max(0, sections - counter)
    # A stopped holder that resumed past its lease and wrote the counter
    # loses an update of the holder after it: its own, at most one per
    # overlap it is part of.
    unexplained = max(0, lost_updates - overrun)
    kinds = [l.split()[0] for l in out.stdout.splitlines()[1:] if l.startswith("  ")]
    ok = not failures and sections > 0
    if expect_overlap:
        ok = ok and overlaps > 0
    else:
        ok = ok and overlaps == 0 and unexplained == 0
        # Every kind must have held the lock: no silent starvation.
        ok = ok and all(int(l.split()[1]) > 0 for l in out.stdout.splitlines()[1:]
                        if l.startswith("  "))
        # The peer, too: a kind that never held is not in the checker's list.
        ok = ok and PEER_KIND.get(peer, peer) in kinds
    print("%-22s %-8s %s  %s  counter %d, lost updates %d (%d beyond the overrun overlaps), "
          "stops %d: %s" % (
        name, mode, profile if "=" not in profile else "(no profile: %s)" % profile, first,
        counter, lost_updates, unexplained, stops,
        "ok" if ok else "FAILED"))
    for line in out.stdout.splitlines()[1:]:
        print("    " + line)
    for f in failures:
        print("    " + f)
    if not ok or a.keep_logs:
        print("    log kept: %s" % log)
    return ok


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("section", "run", "valid"):
        p = argparse.ArgumentParser()
        for opt in ("port", "log", "kind", "die", "seed", "relock", "conf", "name", "ttl", "until",
                    "gap", "hold"):
            p.add_argument("--" + opt)
        a = p.parse_args(sys.argv[2:])
        {"section": worker_section, "run": worker_run, "valid": worker_valid}[sys.argv[1]](a)
        return 0
    p = argparse.ArgumentParser()
    p.add_argument("--relock", required=True)
    p.add_argument("--check", required=True)
    p.add_argument("--peer-clients", required=True)
    p.add_argument("--server", default=shutil_which("redis-server"))
    p.add_argument("--short", action="store_true")
    p.add_argument("--only")
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--keep-logs", action="store_true")
    a = p.parse_args()
    if not a.server:
        print("peers: SKIPPED: no redis-server")
        return 77
    chosen = [sc for sc in SCENARIOS if (not a.only or a.only in sc[0]) and
              (not a.short or sc[0] in SHORT)]
    # Only the npm peers the chosen scenarios run are installed.
    node_mods = {peer: node_ready(peer) for peer in NPM_PINS
                 if any(sc[1] == peer for sc in chosen)}
    version = server_version(a.server)
    print("peers: redis-server %s (%s)" % (".".join(map(str, version)), a.server))
    ok = True
    ran = 0
    for sc in chosen:
        # Bridge needs EVAL (2.6.0), modern SET NX PX (2.6.12).
        need = {"bridge": (2, 6, 0), "modern": (2, 6, 12)}.get(sc[2], (0, 0, 0))
        if version < need:
            print("peers: %s needs Redis %s: not on this server" % (sc[0], ".".join(map(str, need))))
            continue
        if sc[1] == "redispy" and not python_redis():
            print("peers: SKIPPED %s: Debian's python3-redis is not installed (./dev installs it)"
                  % sc[0])
            continue
        if sc[1] == "laravel" and not php_laravel():
            print("peers: SKIPPED %s: php, php-redis or Laravel's lock (php-illuminate-cache, "
                  "php-illuminate-redis) is not installed (./dev installs them)" % sc[0])
            continue
        if sc[1] in NPM_PINS and not node_mods[sc[1]]:
            print("peers: SKIPPED %s: node, npm or the pinned %s could not be installed into %s"
                  % (sc[0], " ".join(NPM_PINS[sc[1]]), PEERS_DIR))
            continue
        ok = run_scenario(a, sc, SHORT[sc[0]] if a.short else a.seconds, node_mods) and ok
        ran += 1
    if ran == 0:
        return 77
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
