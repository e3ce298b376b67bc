// The interop worker around two REAL npm token locks, installed by
// peers.py outside the repository: redlock@4.2.0 (with redis@3; one
// server here: a random 32-hex value written by a script, EXISTS then
// SET PX, released by a compare-and-delete script) and redis-semaphore's
// Mutex (5.6.0, with ioredis@5: a UUID with SET NX PX on "mutex:" + NAME,
// refreshed and released by scripts that compare the value first).  This file is ours:
// the loop, the shared log (tests/interop/worker.h) and the critical
// section; the locking is the libraries', unchanged.
//
//   node peer_npm_token.js redlock|semaphore PORT NAME TIMEOUT_MS UNTIL_MONO_MS LOG COUNTER
//        DIE_PROB SEED GAP_MS
//
// NODE_PATH names the directory holding the library and its client.
"use strict";
const fs = require("fs");

const [kind, port, name, timeoutArg, untilArg, logPath, counter, dieArg, seedArg, gapArg] =
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

// CLOCK_MONOTONIC in ns, as the C workers log it.
function monoNs() {
    return process.hrtime.bigint();
}

const log = fs.openSync(logPath, "a");
function logLine(event, detail) {
    fs.writeSync(log, `${event} ${monoNs()} ${process.pid} ${kind}${detail ? " " + detail : ""}\n`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A client for the section's GET and SET, and the library's lock: each
// acquire resolves with [leaseEndNs, release] or null when it gave up
// (after about 2 s, as the other peers' waits).
let client, acquire, quit;
if (kind === "redlock") {
    const redis = require("redis");
    const Redlock = require("redlock");
    client = redis.createClient({host: "127.0.0.1", port: Number(port)});
    client.on("error", (e) => {
        process.stderr.write(`peer_npm_token: ${e}\n`);
        process.exit(3);
    });
    const redlock = new Redlock([client], {retryCount: 400, retryDelay: 5, retryJitter: 2});
    redlock.on("clientError", (e) => process.stderr.write(`peer_npm_token: ${e}\n`));
    const {promisify} = require("util");
    const get = promisify(client.get).bind(client);
    const set = promisify(client.set).bind(client);
    client.getP = get;
    client.setP = set;
    acquire = async () => {
        let lock;
        try {
            lock = await redlock.lock(name, timeout);
        } catch (e) {
            if (e.name === "LockError") return null;
            throw e;
        }
        // Its lease: the expiration redlock computed (start + ttl - drift),
        // on the wall clock, moved to the monotonic one.
        const end = monoNs() + BigInt(Math.max(0, lock.expiration - Date.now())) * 1000000n;
        return [end, async () => {
            try {
                await lock.unlock();
            } catch (e) {
                logLine("late");
            }
        }];
    };
    quit = () => client.quit();
} else {
    const Redis = require("ioredis");
    const {Mutex} = require("redis-semaphore");
    client = new Redis({host: "127.0.0.1", port: Number(port), lazyConnect: false});
    client.getP = (k) => client.get(k);
    client.setP = (k, v) => client.set(k, v);
    acquire = async () => {
        const m = new Mutex(client, name, {lockTimeout: timeout, acquireTimeout: 2000,
                                           retryInterval: 5, onLockLost: () => logLine("lost")});
        try {
            await m.acquire();
        } catch (e) {
            if (e.name === "TimeoutError" || /Acquire/.test(e.message)) return null;
            throw e;
        }
        // Its lease: the timeout from its SET, which came before this line.
        return [monoNs() + BigInt(timeout) * 1000000n, async () => {
            await m.release();
        }];
    };
    quit = () => client.quit();
}

async function main() {
    for (let i = 0; i < 1000000; i++) {
        if (monoNs() / 1000000n >= untilMs) break;
        const held = await acquire();
        if (!held) continue;
        const [leaseEnd, release] = held;
        logLine("enter");
        if (dieProb > 0 && rand() < dieProb) {
            logLine("die");
            process.kill(process.pid, "SIGKILL");
            return;
        }
        const v = await client.getP(counter);
        await sleep(Math.floor(rand() * 4));
        await client.setP(counter, String(Number(v || 0) + 1));
        logLine("exit", monoNs() > leaseEnd ? "overrun" : "");
        await release();
        await sleep(Math.floor(rand() * (gapMs + 1)));
    }
    quit();
}

main().catch((e) => {
    process.stderr.write(`peer_npm_token: ${e && e.stack || e}\n`);
    process.exit(3);
});
