// The interop worker around the REAL npm redis-lock (0.0.9: the classic
// SETNX/GETSET lock in integer milliseconds + 1, read with parseFloat and
// taken over once `value <= Date.now()`) and the redis@3 client it needs,
// installed by peers.py outside the repository.  This file is ours: the
// loop, the shared log (tests/interop/worker.h) and the critical section;
// the locking is the library's, unchanged.
//
//   node peer_redis_lock.js PORT NAME TIMEOUT_MS UNTIL_MONO_MS LOG COUNTER DIE_PROB SEED GAP_MS
//
// NODE_PATH names the directory holding node_modules/redis-lock and
// node_modules/redis.  The key is "lock." + NAME (the library's prefix).
"use strict";
const fs = require("fs");

const [port, name, timeoutArg, untilArg, logPath, counter, dieArg, seedArg, gapArg] =
    process.argv.slice(2);
const timeout = Number(timeoutArg);
const untilMs = BigInt(untilArg);
const dieProb = Number(dieArg);
const gapMs = Number(gapArg);
let seed = Number(seedArg) >>> 0 || 1;

function rand() {
    // xorshift32: deaths that do not depend on timing.
    seed ^= seed << 13;
    seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    seed >>>= 0;
    return seed / 4294967296;
}

const redis = require("redis");
const client = redis.createClient({host: "127.0.0.1", port: Number(port)});
const lock = require("redis-lock")(client, 5);
const log = fs.openSync(logPath, "a");

// CLOCK_MONOTONIC in ns, as the C workers log it.
function monoNs() {
    return process.hrtime.bigint();
}

function logLine(event, detail) {
    fs.writeSync(log, `${event} ${monoNs()} ${process.pid} redislock${detail ? " " + detail : ""}\n`);
}

client.on("error", (e) => {
    process.stderr.write(`peer_redis_lock: ${e}\n`);
    process.exit(3);
});

function round() {
    if (monoNs() / 1000000n >= untilMs) {
        client.quit();
        return;
    }
    lock(name, timeout, (done) => {
        // The lease this holder relies on: its timeout from its own write,
        // which came before this callback.
        const leaseEnd = monoNs() + BigInt(timeout) * 1000000n;
        logLine("enter");
        if (dieProb > 0 && rand() < dieProb) {
            logLine("die");
            process.kill(process.pid, "SIGKILL");
            return;
        }
        client.get(counter, (err, v) => {
            if (err) throw err;
            setTimeout(() => {
                client.set(counter, String(Number(v || 0) + 1), (err2) => {
                    if (err2) throw err2;
                    logLine("exit", monoNs() > leaseEnd ? "overrun" : "");
                    done(() => setTimeout(round, Math.floor(rand() * (gapMs + 1))));
                });
            }, Math.floor(rand() * 4));
        });
    });
}

round();
