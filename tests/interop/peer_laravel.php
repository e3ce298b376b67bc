<?php
// The interop worker around the REAL Laravel lock of Debian's
// php-illuminate-cache (Illuminate\Cache\PhpRedisLock: a random
// 16-character owner with SET NX EX in whole seconds, released by a
// compare-and-delete script), over php-illuminate-redis's connection and
// phpredis (php-redis).  This file is ours: the loop, the shared log
// (tests/interop/worker.h) and the critical section; the locking is the
// library's, unchanged.
//
//   php peer_laravel.php PORT NAME TIMEOUT_MS UNTIL_MONO_MS LOG COUNTER DIE_PROB SEED GAP_MS
//
// The key is NAME as given (a Laravel store adds its own prefix, which is
// relock's key_prefix beside it).
require "/usr/share/php/Illuminate/Cache/autoload.php";
require "/usr/share/php/Illuminate/Redis/autoload.php";

use Illuminate\Cache\PhpRedisLock;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Illuminate\Redis\Connections\PhpRedisConnection;

[, $port, $name, $timeoutMs, $until, $log, $counter, $die, $seed, $gap] = $argv;
// Laravel counts a lock's life in whole seconds.
$seconds = max(1, intdiv((int)$timeoutMs + 999, 1000));
mt_srand((int)$seed);

$client = new Redis();
$client->connect("127.0.0.1", (int)$port, 5.0);
$conn = new PhpRedisConnection($client);

function line($log, $event, $detail = "")
{
    // hrtime() is CLOCK_MONOTONIC in ns, as the C workers log it.
    file_put_contents($log, sprintf("%s %d %d laravel%s\n", $event, hrtime(true), getmypid(),
                                    $detail === "" ? "" : " " . $detail), FILE_APPEND);
}

function rnd()
{
    return mt_rand() / mt_getrandmax();
}

for ($i = 0; $i < 1000000; $i++) {
    if (intdiv(hrtime(true), 1000000) >= (int)$until)
        break;
    $lock = new PhpRedisLock($conn, $name, $seconds);
    $lock->betweenBlockedAttemptsSleepFor(5);
    try {
        $lock->block(2);
    } catch (LockTimeoutException $e) {
        continue;
    }
    // Its lease: its seconds from the SET, which came before this line.
    $leaseEnd = hrtime(true) + $seconds * 1000000000;
    line($log, "enter");
    if (rnd() < (float)$die) {
        line($log, "die");
        posix_kill(getmypid(), 9); // SIGKILL
    }
    $v = $client->get($counter);
    usleep((int)(rnd() * 3000));
    $client->set($counter, (string)((int)$v + 1));
    line($log, "exit", hrtime(true) > $leaseEnd ? "overrun" : "");
    if (!$lock->release())
        line($log, "late");
    usleep((int)(rnd() * (int)$gap * 1000));
}
