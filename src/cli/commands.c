/* The short commands: acquire, release, extend, inspect, probe. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char help_acquire[] =
    "usage: relock acquire [-t TTL] [-w WAIT | -n] [-q | -v] [--json] [--owner TEXT] NAME\n"
    "Acquire NAME and print \"VALUE FENCE VALIDITY_MS\". The lock stays held until\n"
    "its TTL ends or `relock release NAME VALUE FENCE`.\n"
    "  -t, --ttl TTL    the LEASE (default: ttl_ms of the configuration, 30s); not\n"
    "                   flock's --timeout, which is the wait: that is -w\n"
    "  -w, --wait WAIT  wait at most WAIT for the lock (default: wait.max_ms,\n"
    "                   forever; infinity: forever)\n"
    "  -n, --nonblock   do not wait: fail at once if NAME is held\n"
    "  -q, --quiet      say nothing when the lock is not acquired\n"
    "  -v, --verbose    say who holds it and how long relock waited\n"
    "  --json           print {name, value, fence, validity_ms, waited_ms}; errors\n"
    "                   as {\"error\":{...}}\n"
    "  -E CODE, --exit-busy CODE, --exit-lost CODE, --exit-error CODE: exit codes\n"
    "  --owner TEXT     who holds it, for relock inspect (default: the calling\n"
    "                   process, its pid and command line)\n"
    "TTL and WAIT are seconds (10, 1.5) or carry units (250ms, 5m, 1m30s, 5min).\n"
    "Options may follow NAME. Exit: 0 acquired, 1 not acquired, 2 usage, 4 server\n"
    "error.\n";
const char help_release[] =
    "usage: relock release [-q | -v] [--json] [EXIT CODES] NAME VALUE [FENCE]\n"
    "Release NAME if it still holds VALUE (and FENCE). Exit: 0 released, 3 lost\n"
    "(held by someone else, expired or deleted), 2 usage, 4 server error.\n"
    "  -q, --quiet    say nothing when the lock is lost (exit 3 all the same)\n"
    "  -v, --verbose  when lost, say who holds the lock now\n"
    "  --json         print {name, released}; errors as {\"error\":{...}}\n"
    "  --after-group PGID  first wait (at most 30 s) until process group PGID is\n"
    "                 gone (what run's guardian starts after relock died)\n";
const char help_extend[] =
    "usage: relock extend [-t TTL] [-q | -v] [--json] [--owner TEXT] NAME VALUE [FENCE]\n"
    "Extend NAME to TTL from now if it still holds VALUE, and print the value now\n"
    "held. -t, --ttl is the lease. Exit: 0 extended, 3 lost, 2 usage, 4 server\n"
    "error. -q, -v as for release.\n";
const char help_inspect[] =
    "usage: relock inspect [-q] [--json] [--key] NAME\n"
    "Show what NAME's key holds: the Redis key, format, value, expiry, TTL,\n"
    "fence, the holder's first acquisition, the waiters, and who holds it (the\n"
    "owner record: host, pid, since when, command).\n"
    "  --key          NAME is the Redis key (as scan --keys lists it): key_prefix\n"
    "                 + NAME\n"
    "  -q, --quiet    print nothing: exit 0 when the key holds a value, 1 when it\n"
    "                 is absent\n"
    "  -v, --verbose  accepted; the output is complete without it\n";
const char help_probe[] =
    "usage: relock probe [-q] [--json]\n"
    "Show the server's version, its capabilities, the mode relock chooses and, in\n"
    "modern mode, how it acquires, releases and extends on this server.\n"
    "  -q, --quiet    print nothing: the exit code says whether the mode can be used\n"
    "  -v, --verbose  accepted; the output is complete without it\n";

/* An exit code option's value; -1 (said) when it is none. */
static int parse_code(const char *opt, const char *s)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || *end || v < 0 || v > 255) {
        cli_error("%s: \"%s\" is not an exit code from 0 to 255", opt, s);
        return -1;
    }
    return (int)v;
}

int cli_code(const lockopts *o, int code)
{
    switch (code) {
    case EXIT_ACQUIRE_FAILED:
        return o->exit_busy;
    case EXIT_LOST:
        return o->exit_lost;
    case EXIT_USAGE:
    case EXIT_SERVER:
        return o->exit_error >= 0 ? o->exit_error : code;
    }
    return code;
}

/* --owner TEXT: printable, not empty, short enough for the record. */
static int check_owner(const char *cmd, const char *text)
{
    size_t len = strlen(text);
    if (len == 0) {
        cli_error("%s: --owner: the text is empty", cmd);
        return -1;
    }
    if (len > CLI_OWNER_TEXT_MAX) {
        cli_error("%s: --owner: %zu bytes, at most %d", cmd, len, CLI_OWNER_TEXT_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < ' ' || ch == 0x7f) {
            cli_error("%s: --owner: a control character at byte %zu", cmd, i);
            return -1;
        }
    }
    return 0;
}

/* A signal's name (TERM, SIGTERM) or number; 0 (said) when it is none. */
static int parse_signal(const char *opt, const char *s)
{
    static const struct {
        const char *name;
        int sig;
    } sigs[] = {{"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
                {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM}};
    const char *n = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (strcmp(n, sigs[i].name) == 0)
            return sigs[i].sig;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*s && !*end && v > 0 && v < NSIG)
        return (int)v;
    cli_error("%s: \"%s\" is not a signal (TERM, INT, HUP, USR1, USR2, a number...)", opt, s);
    return 0;
}

int cli_parse_lockopts(int argc, char **argv, const char *optstring, const char *help,
                       unsigned accept, lockopts *o)
{
    enum {
        O_JSON = 256,
        O_QUIET,
        O_VERBOSE,
        O_BUSY,
        O_LOST,
        O_ERROR,
        O_OWNER,
        O_TIMEOUT,
        O_KILL_REST,
        O_NO_STDIN,
        O_NOTIFY,
        O_NOTIFY_SIG,
        O_ON_LOST,
        O_AFTER_GROUP,
        O_KEY
    };
    /* Every short option has a long one; flock's spellings where they
     * mean the same (--wait, --nonblock, --nb).  flock's --timeout is its
     * wait, and relock's -t is the lease: refused with a word. */
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"ttl", required_argument, NULL, 't'},
                                             {"wait", required_argument, NULL, 'w'},
                                             {"nonblock", no_argument, NULL, 'n'},
                                             {"nb", no_argument, NULL, 'n'},
                                             {"no-wait", no_argument, NULL, 'n'},
                                             {"kill-after", required_argument, NULL, 'k'},
                                             {"timeout", required_argument, NULL, O_TIMEOUT},
                                             {"json", no_argument, NULL, O_JSON},
                                             {"quiet", no_argument, NULL, O_QUIET},
                                             {"verbose", no_argument, NULL, O_VERBOSE},
                                             {"exit-busy", required_argument, NULL, O_BUSY},
                                             {"exit-lost", required_argument, NULL, O_LOST},
                                             {"exit-error", required_argument, NULL, O_ERROR},
                                             {"owner", required_argument, NULL, O_OWNER},
                                             {"kill-rest", no_argument, NULL, O_KILL_REST},
                                             {"no-stdin", no_argument, NULL, O_NO_STDIN},
                                             {"notify", required_argument, NULL, O_NOTIFY},
                                             {"notify-signal", required_argument, NULL,
                                              O_NOTIFY_SIG},
                                             {"on-lost", required_argument, NULL, O_ON_LOST},
                                             {"after-group", required_argument, NULL,
                                              O_AFTER_GROUP},
                                             {"key", no_argument, NULL, O_KEY},
                                             {NULL, 0, NULL, 0}};
    o->ttl_ms = 0;
    o->wait_ms = RELOCK_WAIT_DEFAULT;
    o->kill_after_ms = -1;
    o->kill_rest = 0;
    o->no_stdin = 0;
    o->notify_pid = 0;
    o->notify_sig = SIGTERM;
    o->on_lost = NULL;
    o->after_group = 0;
    o->by_key = 0;
    o->exit_busy = EXIT_ACQUIRE_FAILED;
    o->exit_lost = EXIT_LOST;
    o->exit_error = -1;
    o->json = 0;
    o->quiet = 0;
    o->verbose = 0;
    o->owner = NULL;
    opterr = 0; /* our own one-line messages below */
    int opt, saw_w = 0, saw_n = 0, saw_sig = 0;
    const char *refused_word = NULL; /* an option refused with its value */
    char why[192];
    /* --json is seen before anything can fail, so that every error of
     * the command is also said in JSON. */
    if (accept & CLI_JSON)
        for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
            if (strcmp(argv[i], "--json") == 0)
                cli_json = strcmp(argv[0], "run") == 0 ? 2 : 1;
    while ((opt = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        /* A long option standing for a short one the command lacks. */
        if (opt > 0 && opt < 256 && opt != '?' && opt != ':' && !strchr(optstring, opt)) {
            refused_word = argv[optind - 1][0] == '-' ? NULL : argv[optind - 2];
            goto refused;
        }
        switch (opt) {
        case 't':
            if (relockx_parse_duration(optarg, &o->ttl_ms, why, sizeof why) != 0) {
                cli_error("-t: %s", why);
                return 1000 + EXIT_USAGE;
            }
            if (o->ttl_ms <= 0) {
                cli_error("-t: the TTL must be longer than 0");
                return 1000 + EXIT_USAGE;
            }
            break;
        case 'w':
            if (strcmp(optarg, "infinity") == 0) {
                o->wait_ms = RELOCK_WAIT_FOREVER;
            } else if (relockx_parse_duration(optarg, &o->wait_ms, why, sizeof why) != 0) {
                cli_error("-w: %s, or infinity", why);
                return 1000 + EXIT_USAGE;
            }
            saw_w = 1;
            break;
        case 'n':
            o->wait_ms = 0;
            saw_n = 1;
            break;
        case 'k':
            if (relockx_parse_duration(optarg, &o->kill_after_ms, why, sizeof why) != 0) {
                cli_error("-k: %s", why);
                return 1000 + EXIT_USAGE;
            }
            break;
        case O_TIMEOUT:
            cli_error("%s: --timeout is not an option of relock: -t, --ttl is the lease, not "
                      "flock's --timeout; the wait is -w, --wait",
                      argv[0]);
            return 1000 + EXIT_USAGE;
        case 'E':
        case O_BUSY:
        case O_LOST:
        case O_ERROR: {
            const char *name = opt == 'E'      ? "-E"
                               : opt == O_BUSY ? "--exit-busy"
                               : opt == O_LOST ? "--exit-lost"
                                               : "--exit-error";
            if (opt != 'E' && !(accept & CLI_EXITS)) {
                refused_word = name; /* argv[optind - 1] is its value */
                goto refused;
            }
            int v = parse_code(name, optarg);
            if (v < 0)
                return 1000 + EXIT_USAGE;
            if (opt == 'E' || opt == O_BUSY)
                o->exit_busy = v;
            else if (opt == O_LOST)
                o->exit_lost = v;
            else
                o->exit_error = v;
            break;
        }
        case O_OWNER:
            if (!(accept & CLI_OWNER)) {
                refused_word = "--owner";
                goto refused;
            }
            if (check_owner(argv[0], optarg) != 0)
                return 1000 + EXIT_USAGE;
            o->owner = optarg;
            break;
        case O_KILL_REST:
            if (!(accept & CLI_RUN))
                goto refused;
            o->kill_rest = 1;
            break;
        case O_NO_STDIN:
            if (!(accept & CLI_HOLD))
                goto refused;
            o->no_stdin = 1;
            break;
        case O_NOTIFY: {
            if (!(accept & CLI_HOLD)) {
                refused_word = "--notify";
                goto refused;
            }
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (strcmp(optarg, "parent") == 0) {
                o->notify_pid = -1;
            } else if (*optarg && !*end && v > 1) {
                o->notify_pid = v;
            } else {
                cli_error("%s: --notify: \"%s\" is neither a process id (above 1) nor parent",
                          argv[0], optarg);
                return 1000 + EXIT_USAGE;
            }
            break;
        }
        case O_NOTIFY_SIG:
            if (!(accept & CLI_HOLD)) {
                refused_word = "--notify-signal";
                goto refused;
            }
            o->notify_sig = parse_signal("--notify-signal", optarg);
            if (!o->notify_sig)
                return 1000 + EXIT_USAGE;
            saw_sig = 1;
            break;
        case O_ON_LOST:
            if (!(accept & CLI_HOLD)) {
                refused_word = "--on-lost";
                goto refused;
            }
            if (!*optarg) {
                cli_error("%s: --on-lost: the command is empty", argv[0]);
                return 1000 + EXIT_USAGE;
            }
            o->on_lost = optarg;
            break;
        case O_AFTER_GROUP: {
            if (!(accept & CLI_AFTER)) {
                refused_word = "--after-group";
                goto refused;
            }
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v <= 1) {
                cli_error("%s: --after-group: \"%s\" is not a process group id", argv[0], optarg);
                return 1000 + EXIT_USAGE;
            }
            o->after_group = v;
            break;
        }
        case O_KEY:
            if (!(accept & CLI_KEY))
                goto refused;
            o->by_key = 1;
            break;
        case O_JSON:
            if (!(accept & CLI_JSON))
                goto refused;
            o->json = 1;
            break;
        case 'q':
        case O_QUIET:
            if (!(accept & CLI_TALK))
                goto refused;
            o->quiet = 1;
            break;
        case 'v':
        case O_VERBOSE:
            if (!(accept & CLI_TALK))
                goto refused;
            o->verbose = 1;
            break;
        case 'h':
            fputs(help, stdout);
            return 1000;
        default:
            cli_bad_option(argv[0], optstring, longopts, argv);
            return 1000 + EXIT_USAGE;
        }
        continue;
    refused:
        cli_error("%s: %s is not an option of %s (try relock %s --help)", argv[0],
                  refused_word ? refused_word : argv[optind - 1], argv[0], argv[0]);
        return 1000 + EXIT_USAGE;
    }
    if (o->quiet && o->verbose) {
        cli_error("-q and -v exclude each other");
        return 1000 + EXIT_USAGE;
    }
    if (saw_w && saw_n) {
        cli_error("-w and -n exclude each other");
        return 1000 + EXIT_USAGE;
    }
    if (saw_sig && !o->notify_pid) {
        cli_error("%s: --notify-signal needs --notify PID or --notify parent", argv[0]);
        return 1000 + EXIT_USAGE;
    }
    return 0;
}

static int parse_fence(const char *s, long long *fence)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !*s || *end || v < 0) {
        cli_error("FENCE \"%s\" is not a non-negative integer", s);
        return -1;
    }
    *fence = v;
    return 0;
}

static void json_str(const char *s);
static int owner_field(const char *rec, const char *key, char *out, size_t len);

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_say_holder(relock_client *c, const char *cmd, const char *name)
{
    relock_inspect_info *in = NULL;
    if (relock_inspect(c, name, &in) != RELOCK_OK ||
        relock_inspect_info_kind(in) == RELOCK_VALUE_NONE) {
        relock_inspect_info_free(in);
        return;
    }
    char left[48] = "no TTL";
    if (relock_inspect_info_pttl_ms(in) >= 0) {
        char d[32];
        relockx_format_duration(relock_inspect_info_pttl_ms(in), d, sizeof d);
        snprintf(left, sizeof left, "its key ends in %s", d);
    }
    const char *owner = relock_inspect_info_owner(in);
    fprintf(stderr, "relock: %s: %s is held: value %s, fence %lld, %s%s%s\n", cmd, name,
            relock_inspect_info_value(in, NULL), relock_inspect_info_fence(in), left,
            owner[0] ? ", owner " : "", owner);
    relock_inspect_info_free(in);
}

int cli_lease_too_short(relock_client *c, relock_lock *l, long long ttl_ms, long long took_ms,
                        const char *cmd, int renewed)
{
    long long valid = relock_lock_validity_ms(l);
    if (valid > 0)
        return 0;
    relock_release(l);
    char t[32];
    relockx_format_duration(ttl_ms, t, sizeof t);
    cli_error("%s: -t %s is too short: %lld ms of validity were left once acquired (the "
              "round trips take their share, and %lld ms are kept back for clock drift, 1%% + "
              "2 ms); the lock was released",
              cmd, t, valid, ttl_ms / 100 + 2);
    (void)took_ms;
    (void)renewed;
    (void)c;
    return EXIT_USAGE;
}

int cli_renewed_ttl_refused(const char *cmd, long long ttl_ms)
{
    if (ttl_ms >= CLI_RENEWED_TTL_MIN)
        return 0;
    char t[32];
    relockx_format_duration(ttl_ms, t, sizeof t);
    cli_error("%s: -t %s is too short: a lease renewed every third of it needs at least %d ms "
              "(each renewal is a round trip, and 1%% + 2 ms are kept back for clock drift)",
              cmd, t, CLI_RENEWED_TTL_MIN);
    return EXIT_USAGE;
}

relock_status cli_acquire(cli_ctx *ctx, relock_client *c, const char *cmd, const char *name,
                          long long ttl_ms, long long wait_ms, relock_lock **l)
{
    long long bound = wait_ms == RELOCK_WAIT_DEFAULT ? relock_config_wait_ms(ctx->cfg) : wait_ms;
    int quorum = strncmp(relock_client_mode_reason(c), "quorum over ", 12) == 0;
    long long t0 = mono_ms(), pause = 50;
    for (;;) {
        long long left = bound;
        if (bound > 0) {
            left = bound - (mono_ms() - t0);
            if (left < 0)
                left = 0;
        }
        relock_status st = cli_acquire_once(c, cmd, name, ttl_ms, wait_ms == RELOCK_WAIT_DEFAULT &&
                                                                   bound <= 0
                                                               ? wait_ms
                                                               : left,
                                          l);
        /* A quorum that too few servers answered: tried again, with a
         * growing pause, while the bound leaves time for it. */
        if (st != RELOCK_EIO || !quorum || bound <= 0 || mono_ms() - t0 + pause >= bound)
            return st;
        struct timespec ts = {pause / 1000, (pause % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 1000 ? 1000 : pause * 2;
    }
}

int cmd_acquire(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "t:w:nqvE:h", help_acquire,
                                CLI_JSON | CLI_TALK | CLI_EXITS | CLI_OWNER, &o);
    if (rc)
        return rc - 1000;
    if (argc - optind != 1) {
        cli_error("acquire: expected one NAME (try relock acquire --help)");
        return cli_code(&o, EXIT_USAGE);
    }
    const char *name = argv[optind];
    int code = cli_owner_setup(ctx, "acquire", &o, OWNER_CALLER, NULL);
    if (code)
        return cli_code(&o, code);
    relock_client *c = cli_connect(ctx, &code);
    if (!c)
        return cli_code(&o, code);
    relock_lock *l = NULL;
    long long t0 = mono_ms();
    cli_progress *progress = cli_progress_start(ctx, "acquire", name, o.verbose);
    relock_status st = cli_acquire(ctx, c, "acquire", name, o.ttl_ms, o.wait_ms, &l);
    cli_progress_stop(progress);
    long long waited = mono_ms() - t0;
    if (st == RELOCK_OK) {
        long long ttl = o.ttl_ms ? o.ttl_ms : relock_config_ttl_ms(ctx->cfg);
        code = cli_lease_too_short(c, l, ttl, waited, "acquire", 0);
        if (code) {
            relock_lock_free(l);
            relock_client_free(c);
            return cli_code(&o, code);
        }
        if (o.json) {
            printf("{\"name\":\"");
            json_str(name);
            printf("\",\"value\":\"");
            json_str(relock_lock_value(l));
            printf("\",\"fence\":%lld,\"validity_ms\":%lld,\"waited_ms\":%lld}\n",
                   relock_lock_fence(l), relock_lock_validity_ms(l), waited);
        } else {
            printf("%s %lld %lld\n", relock_lock_value(l), relock_lock_fence(l),
                   relock_lock_validity_ms(l));
        }
        if (o.verbose)
            fprintf(stderr, "relock: acquire: %s acquired after %lld ms, fence %lld\n", name,
                    waited, relock_lock_fence(l));
        relock_lock_free(l);
    } else if (st == RELOCK_BUSY || st == RELOCK_TIMEOUT) {
        cli_quiet_fail(o.quiet, c, st, "acquire");
        if (o.verbose) {
            fprintf(stderr, "relock: acquire: waited %lld ms\n", waited);
            cli_say_holder(c, "acquire", name);
        }
        code = o.exit_busy;
    } else {
        code = cli_code(&o, cli_fail(c, st, "acquire"));
    }
    relock_client_free(c);
    return code;
}

/* release and extend: NAME VALUE [FENCE] → an adopted lock handle. */
static int adopt(cli_ctx *ctx, int argc, char **argv, const char *cmd, long long ttl_ms,
                 relock_client **cp, relock_lock **lp)
{
    int n = argc - optind;
    if (n < 2 || n > 3) {
        cli_error("%s: expected NAME VALUE [FENCE] (try relock %s --help)", cmd, cmd);
        return EXIT_USAGE;
    }
    long long fence = 0;
    if (n == 3 && parse_fence(argv[optind + 2], &fence) != 0)
        return EXIT_USAGE;
    int code = 0;
    relock_client *c = cli_connect(ctx, &code);
    if (!c)
        return code;
    relock_mode m = relock_client_mode(c);
    if (n == 2 && (m == RELOCK_MODE_LEGACY || m == RELOCK_MODE_BRIDGE))
        fprintf(stderr, "relock: %s: no FENCE given: ownership rests on the value alone, "
                        "which other holders may repeat\n",
                cmd);
    relock_status st = relock_lock_adopt(c, argv[optind], argv[optind + 1], fence, ttl_ms, lp);
    if (st != RELOCK_OK) {
        code = cli_fail(c, st, cmd);
        relock_client_free(c);
        return code;
    }
    *cp = c;
    return 0;
}

/*
 * release and extend found the lock lost: say what the key holds now.  In
 * legacy and bridge modes every extend writes a new timestamp, so a value
 * from before an extend no longer matches though the same acquisition
 * holds the lock: when the fence given is still the current one and the
 * key holds a timestamp, that is said with the command that would act on
 * it.  relock does not act on it by itself: a client without fences (an
 * unchanged legacy one) may have written that timestamp, and only the
 * caller knows whether an extend printed it.  -v: the holder, always.
 */
static void say_lost_key(relock_client *c, const char *cmd, const char *name, long long fence,
                         int verbose)
{
    relock_mode m = relock_client_mode(c);
    if (fence > 0 && (m == RELOCK_MODE_LEGACY || m == RELOCK_MODE_BRIDGE)) {
        relock_inspect_info *in = NULL;
        if (relock_inspect(c, name, &in) == RELOCK_OK &&
            relock_inspect_info_kind(in) == RELOCK_VALUE_TIMESTAMP &&
            relock_inspect_info_fence(in) == fence) {
            const char *v = relock_inspect_info_value(in, NULL);
            cli_error("%s: the key holds %s and fence %lld is still current: if a later extend "
                      "printed %s, this acquisition still holds the lock (relock %s %s %s %lld)",
                      cmd, v, fence, v, cmd, name, v, fence);
        }
        relock_inspect_info_free(in);
    }
    if (verbose)
        cli_say_holder(c, cmd, name);
}

int cmd_release(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "qvh", help_release,
                                CLI_JSON | CLI_TALK | CLI_EXITS | CLI_AFTER, &o);
    if (rc)
        return rc - 1000;
    /* run's guardian, after relock died: the lock goes once CMD's group
     * is gone (SIGKILL ends it within 5 s of the guardian's SIGTERM). */
    if (o.after_group && cli_group_wait_gone(o.after_group, 30000) != 0) {
        cli_error("release: process group %ld is still running after 30 s; the lock is left "
                  "to its lease",
                  o.after_group);
        return cli_code(&o, EXIT_SERVER);
    }
    relock_client *c = NULL;
    relock_lock *l = NULL;
    int code = adopt(ctx, argc, argv, "release", 0, &c, &l);
    if (code)
        return cli_code(&o, code);
    relock_status st = relock_release(l);
    if (st == RELOCK_LOST && o.quiet) {
        cli_quiet_fail(1, c, st, "release");
        code = o.exit_lost;
    } else if (st != RELOCK_OK) {
        code = cli_code(&o, cli_fail(c, st, "release"));
        if (st == RELOCK_LOST)
            say_lost_key(c, "release", relock_lock_name(l), relock_lock_fence(l), o.verbose);
    } else if (o.json) {
        printf("{\"name\":\"");
        json_str(relock_lock_name(l));
        printf("\",\"released\":true}\n");
    }
    relock_lock_free(l);
    relock_client_free(c);
    return code;
}

int cmd_extend(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "t:qvh", help_extend,
                                CLI_JSON | CLI_TALK | CLI_EXITS | CLI_OWNER, &o);
    if (rc)
        return rc - 1000;
    /* The record an extend rewrites names the caller, as acquire's did. */
    int oc = cli_owner_setup(ctx, "extend", &o, OWNER_CALLER, NULL);
    if (oc)
        return cli_code(&o, oc);
    relock_client *c = NULL;
    relock_lock *l = NULL;
    long long ttl = o.ttl_ms ? o.ttl_ms : relock_config_ttl_ms(ctx->cfg);
    int code = adopt(ctx, argc, argv, "extend", ttl, &c, &l);
    if (code)
        return cli_code(&o, code);
    /* The record's first acquisition time survives the extend (its at=
     * becomes now): read while the key still holds this value. */
    relock_inspect_info *in = NULL;
    char first[64] = "";
    if (relock_inspect(c, relock_lock_name(l), &in) == RELOCK_OK &&
        strcmp(relock_inspect_info_value(in, NULL), relock_lock_value(l)) == 0 &&
        !owner_field(relock_inspect_info_owner(in), "first", first, sizeof first))
        owner_field(relock_inspect_info_owner(in), "at", first, sizeof first);
    relock_inspect_info_free(in);
    if (first[0])
        cli_owner_first(l, first);
    relock_status st = relock_extend(l, ttl);
    if (st == RELOCK_OK && o.json) {
        printf("{\"name\":\"");
        json_str(relock_lock_name(l));
        printf("\",\"value\":\"");
        json_str(relock_lock_value(l));
        printf("\",\"fence\":%lld,\"validity_ms\":%lld}\n", relock_lock_fence(l),
               relock_lock_validity_ms(l));
    } else if (st == RELOCK_OK) {
        printf("%s\n", relock_lock_value(l));
    } else if (st == RELOCK_LOST && o.quiet) {
        cli_quiet_fail(1, c, st, "extend");
        code = o.exit_lost;
    } else {
        code = cli_code(&o, cli_fail(c, st, "extend"));
        if (st == RELOCK_LOST)
            say_lost_key(c, "extend", relock_lock_name(l), relock_lock_fence(l), o.verbose);
    }
    relock_lock_free(l);
    relock_client_free(c);
    return code;
}

/* Writes s as a JSON string body (without quotes). */
/* n bytes, NUL bytes included. */
static void json_strn(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
}

static void json_str(const char *s)
{
    json_strn(s, strlen(s));
}

static const char *kind_name(relock_value_kind k)
{
    switch (k) {
    case RELOCK_VALUE_NONE:
        return "absent";
    case RELOCK_VALUE_TIMESTAMP:
        return "timestamp";
    case RELOCK_VALUE_TOKEN:
        return "token";
    case RELOCK_VALUE_UNKNOWN:
        return "unknown";
    }
    return "unknown";
}

/* A time span as a person reads it: "59.4 s" under a minute, else
 * "5m 3s" (relockx_format_duration()). */
static void human_span(long long ms, char *buf, size_t len)
{
    if (ms < 0)
        ms = -ms;
    if (ms < 60000)
        snprintf(buf, len, "%lld.%lld s", ms / 1000, ms % 1000 / 100);
    else
        relockx_format_duration(ms, buf, len);
}

/* ms since the epoch as an ISO 8601 date in UTC, to the second. */
static void iso_utc(long long ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, len, "?");
}

/* The owner record "host=H pid=P at=T k=v ... cmd=free text" as JSON
 * fields "owner_K": values of the keys that take the rest of the line
 * (cmd, caller, note) run to its end; pids are numbers. */
static void json_owner_fields(const char *rec)
{
    static const char *const rest[] = {"cmd", "caller", "note"};
    const char *p = rec;
    while (*p) {
        const char *eq = strchr(p, '=');
        const char *sp = strchr(p, ' ');
        if (!eq || (sp && sp < eq) || eq == p)
            return; /* not a key=value field: the rest is not ours to read */
        size_t klen = (size_t)(eq - p);
        if (strspn(p, "abcdefghijklmnopqrstuvwxyz_") != klen)
            return;
        int to_end = 0;
        for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
            if (strlen(rest[i]) == klen && strncmp(p, rest[i], klen) == 0)
                to_end = 1;
        const char *v = eq + 1;
        const char *vend = to_end || !sp ? v + strlen(v) : sp;
        int number = klen >= 3 && strncmp(eq - 3, "pid", 3) == 0 && vend > v && vend - v < 19 &&
                     strspn(v, "0123456789") == (size_t)(vend - v);
        printf(",\"owner_%.*s\":%s", (int)klen, p, number ? "" : "\"");
        for (const char *q = v; q < vend; q++) {
            unsigned char ch = (unsigned char)*q;
            if (ch == '"' || ch == '\\')
                printf("\\%c", ch);
            else if (ch < 0x20)
                printf("\\u%04x", ch);
            else
                putchar(ch);
        }
        if (!number)
            putchar('"');
        if (!*vend)
            return;
        p = vend + 1;
    }
}

/* The value of field KEY= of an owner record, up to the next space; 1
 * when found. */
static int owner_field(const char *rec, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    for (const char *p = rec; p && *p; p = strchr(p, ' '), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = strcspn(v, " ");
            snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), v);
            return 1;
        }
    }
    return 0;
}

const char *cli_name_of(cli_ctx *ctx, const char *cmd, const char *arg, int by_key)
{
    if (!by_key)
        return arg;
    const char *prefix = relock_config_key_prefix(ctx->cfg);
    size_t n = strlen(prefix);
    if (strncmp(arg, prefix, n) != 0 || !arg[n]) {
        cli_error("%s: --key: the key %s does not begin with key_prefix \"%s\" and a lock name, "
                  "so it is no lock key of this configuration",
                  cmd, arg, prefix);
        return NULL;
    }
    return arg + n;
}

/* Legacy readers hold timestamp V until their clock passes V: one unit
 * after the time V names; a fraction, written by clients that compare
 * fractions, until V itself; a fraction of zero ("1795812032.0", a whole
 * clock's time as a float) as the integer it is. */
static long long held_until(const relock_inspect_info *in)
{
    const char *dot = strchr(relock_inspect_info_value(in, NULL), '.');
    if (dot && dot[1 + strspn(dot + 1, "0")] != '\0')
        return relock_inspect_info_ts_ms(in);
    return relock_inspect_info_ts_ms(in) + (relock_inspect_info_ts_unit_ms(in) ? 1 : 1000);
}

int cmd_inspect(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "qvh", help_inspect, CLI_JSON | CLI_TALK | CLI_KEY,
                                &o);
    if (rc)
        return rc - 1000;
    if (argc - optind != 1) {
        cli_error("inspect: expected one NAME (try relock inspect --help)");
        return EXIT_USAGE;
    }
    const char *name = cli_name_of(ctx, "inspect", argv[optind], o.by_key);
    if (!name)
        return EXIT_USAGE;
    int code = 0;
    relock_client *c = NULL;
    relock_status st = relock_connect(ctx->cfg, &c);
    /* A mode the server refuses does not stop a read-only look. */
    if (st != RELOCK_OK && st != RELOCK_EUNSUPPORTED) {
        code = cli_fail(c, st, "inspect");
        relock_client_free(c);
        return code;
    }
    relock_inspect_info *in = NULL;
    st = relock_inspect(c, name, &in);
    if (st != RELOCK_OK) {
        code = cli_fail(c, st, "inspect");
        relock_client_free(c);
        return code;
    }
    if (o.quiet) {
        /* -q: the exit code alone, as test(1) would answer. */
        code = relock_inspect_info_kind(in) == RELOCK_VALUE_NONE ? 1 : 0;
        relock_inspect_info_free(in);
        relock_client_free(c);
        return code;
    }
    int absent = relock_inspect_info_kind(in) == RELOCK_VALUE_NONE;
    /* A record beside an absent key names no holder: whoever wrote it is
     * gone (a break, an expiry), so it is shown apart, never as the
     * owner. */
    const char *owner = relock_inspect_info_owner(in);
    char since[64] = "";
    if (!absent && owner[0] && !owner_field(owner, "first", since, sizeof since))
        owner_field(owner, "at", since, sizeof since);
    const char *prefix = relock_config_key_prefix(ctx->cfg);
    if (absent && !o.by_key && prefix[0] && strncmp(name, prefix, strlen(prefix)) == 0)
        cli_error("inspect: %s begins with key_prefix \"%s\": the key read was %s; relock "
                  "inspect --key %s reads the key %s",
                  name, prefix, relock_inspect_info_key(in), name, name);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (o.json) {
        printf("{\"name\":\"");
        json_str(name);
        printf("\",\"key\":\"");
        json_str(relock_inspect_info_key(in));
        printf("\",\"format\":\"%s\"", kind_name(relock_inspect_info_kind(in)));
        if (relock_inspect_info_kind(in) != RELOCK_VALUE_NONE) {
            printf(",\"value\":\"");
            size_t vlen;
            const char *v = relock_inspect_info_value(in, &vlen);
            json_strn(v, vlen);
            printf("\",\"pttl_ms\":%lld", relock_inspect_info_pttl_ms(in));
        }
        if (relock_inspect_info_kind(in) == RELOCK_VALUE_TIMESTAMP)
            printf(",\"expires_ms\":%lld,\"expires_in_ms\":%lld,\"unit\":\"%s\"",
                   relock_inspect_info_ts_ms(in), held_until(in) - now_ms,
                   relock_inspect_info_ts_unit_ms(in) ? "ms" : "s");
        printf(",\"fence\":%lld,\"waiters\":%lld", relock_inspect_info_fence(in),
               relock_inspect_info_waiters(in));
        if (since[0]) {
            printf(",\"since\":\"");
            json_str(since);
            printf("\"");
        }
        if (owner[0] && !absent) {
            printf(",\"owner\":\"");
            json_str(owner);
            printf("\"");
            json_owner_fields(owner);
        } else if (owner[0]) {
            printf(",\"owner_left\":\"");
            json_str(owner);
            printf("\"");
        }
        printf("}\n");
    } else {
        printf("name:    %s\nkey:     %s\nformat:  %s\n", name, relock_inspect_info_key(in),
               kind_name(relock_inspect_info_kind(in)));
        char span[48], date[48];
        if (relock_inspect_info_kind(in) != RELOCK_VALUE_NONE) {
            printf("value:   %s\n", relock_inspect_info_value(in, NULL));
            if (relock_inspect_info_pttl_ms(in) >= 0) {
                human_span(relock_inspect_info_pttl_ms(in), span, sizeof span);
                iso_utc(now_ms + relock_inspect_info_pttl_ms(in), date, sizeof date);
                printf("ttl:     %s (the key ends %s)\n", span, date);
            } else {
                printf("ttl:     none\n");
            }
        }
        if (relock_inspect_info_kind(in) == RELOCK_VALUE_TIMESTAMP) {
            iso_utc(relock_inspect_info_ts_ms(in), date, sizeof date);
            long long d = held_until(in) - now_ms;
            human_span(d, span, sizeof span);
            printf("expiry:  %s (%s, %s%s%s)\n", date,
                   relock_inspect_info_ts_unit_ms(in) ? "ms" : "s", d < 0 ? "expired " : "in ",
                   span, d < 0 ? " ago" : "");
        }
        printf("fence:   %lld\n", relock_inspect_info_fence(in));
        if (since[0])
            printf("since:   %s (first acquisition by this holder)\n", since);
        if (relock_inspect_info_waiters(in) >= 0)
            printf("waiters: %lld\n", relock_inspect_info_waiters(in));
        if (owner[0] && !absent)
            printf("owner:   %s\n", owner);
        else if (owner[0])
            printf("left:    %s (the record of an earlier holder, which holds nothing now)\n",
                   owner);
    }
    relock_inspect_info_free(in);
    relock_client_free(c);
    return 0;
}

int cmd_probe(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "qvh", help_probe, CLI_JSON | CLI_TALK, &o);
    if (rc)
        return rc - 1000;
    if (argc - optind != 0) {
        cli_error("probe: takes no arguments (try relock probe --help)");
        return EXIT_USAGE;
    }
    relock_client *c = NULL;
    relock_status st = relock_connect(ctx->cfg, &c);
    /* The mode may be refused while the server still answered the probe:
     * then the refusal is the reason to show. */
    if (st != RELOCK_OK && st != RELOCK_EUNSUPPORTED && st != RELOCK_ECONFIG) {
        int code = cli_fail(c, st, "probe");
        relock_client_free(c);
        return code;
    }
    char reason[600];
    snprintf(reason, sizeof reason, "%s",
             st == RELOCK_OK ? relock_client_mode_reason(c) : relock_client_error(c)->message);
    relock_server_info *info = NULL;
    relock_status sst = relock_client_server(c, &info);
    if (sst != RELOCK_OK) {
        int code = cli_fail(c, sst, "probe");
        relock_client_free(c);
        return code;
    }
    const char *mode = st == RELOCK_OK ? relock_mode_name(relock_client_mode(c)) : "none";
    /* Modern mode on one server: how it acquires, releases and extends. */
    relock_paths *paths = NULL;
    int has_paths = st == RELOCK_OK && relock_client_paths(c, &paths) == RELOCK_OK;
    const char *const field[] = {"acquire", "release", "extend", "scripts"};
    const relock_path which[] = {RELOCK_PATH_ACQUIRE, RELOCK_PATH_RELEASE, RELOCK_PATH_EXTEND,
                                 RELOCK_PATH_SCRIPTS};
    unsigned caps = relock_server_info_caps(info);
    if (o.quiet) {
        /* -q: the exit code alone. */
    } else if (o.json) {
        printf("{\"version\":\"%s\",\"capabilities\":[", relock_server_info_version(info));
        int first = 1;
        for (unsigned bit = 1; relock_cap_name(bit); bit <<= 1) {
            if (caps & bit) {
                printf("%s\"%s\"", first ? "" : ",", relock_cap_name(bit));
                first = 0;
            }
        }
        printf("],\"mode\":\"%s\",\"reason\":\"", mode);
        json_str(reason);
        printf("\",\"paths\":");
        if (has_paths) {
            for (int i = 0; i < 4; i++) {
                printf("%s\"%s\":\"", i ? "," : "{", field[i]);
                json_str(relock_paths_get(paths, which[i]));
                printf("\"");
            }
            printf("}");
        } else {
            printf("null");
        }
        printf("}\n");
    } else {
        printf("version: %s\ncapabilities:", relock_server_info_version(info));
        for (unsigned bit = 1; relock_cap_name(bit); bit <<= 1)
            if (caps & bit)
                printf(" %s", relock_cap_name(bit));
        printf("\nmode:    %s\nreason:  %s\n", mode, reason);
        if (has_paths) {
            printf("paths:  ");
            for (int i = 0; i < 4; i++)
                printf("%s %s %s", i ? ";" : "", field[i], relock_paths_get(paths, which[i]));
            printf("\n");
        }
    }
    relock_paths_free(paths);
    relock_server_info_free(info);
    relock_client_free(c);
    return st == RELOCK_OK ? 0 : cli_exit_code(st);
}
