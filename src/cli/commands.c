/* The short commands: acquire, release, extend, inspect, probe. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char help_acquire[] =
    "usage: relock acquire [-t TTL] [-w WAIT | -n] [-q | -v] [--json] [--owner TEXT] NAME\n"
    "Acquire NAME and print \"VALUE FENCE VALIDITY_MS\". The lock stays held until\n"
    "its TTL ends or `relock release NAME VALUE FENCE`.\n"
    "  -t TTL   lease (default: ttl_ms of the configuration, 30s)\n"
    "  -w WAIT  wait at most WAIT for the lock (default: wait.max_ms, forever)\n"
    "  -n       do not wait: fail at once if NAME is held\n"
    "  -q, -v   quiet when not acquired; verbose: holder, time waited\n"
    "  --json   print {name, value, fence, validity_ms, waited_ms}\n"
    "  -E CODE, --exit-busy CODE, --exit-lost CODE, --exit-error CODE: exit codes\n"
    "  --owner TEXT  who holds it, for relock inspect (default: the calling\n"
    "           process, its pid and command line)\n"
    "TTL and WAIT are seconds (10, 1.5) or carry units (250ms, 5m, 1m30s).\n"
    "Exit: 0 acquired, 1 not acquired, 2 usage, 4 server error.\n";
const char help_release[] =
    "usage: relock release NAME VALUE [FENCE]\n"
    "Release NAME if it still holds VALUE. Exit: 0 released, 3 lost (held by\n"
    "someone else, expired or deleted), 2 usage, 4 server error.\n";
const char help_extend[] =
    "usage: relock extend [-t TTL] [--owner TEXT] NAME VALUE [FENCE]\n"
    "Extend NAME to TTL from now if it still holds VALUE, and print the value now\n"
    "held. Exit: 0 extended, 3 lost, 2 usage, 4 server error.\n";
const char help_inspect[] =
    "usage: relock inspect [--json] NAME\n"
    "Show what NAME's key holds: format, value, expiry, TTL, fence, and who\n"
    "holds it (the owner record: host, pid, since when, command).\n";
const char help_probe[] =
    "usage: relock probe [--json]\n"
    "Show the server's version, its capabilities, the mode relock chooses and, in\n"
    "modern mode, how it acquires, releases and extends on this server.\n";

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

int cli_parse_lockopts(int argc, char **argv, const char *optstring, const char *help,
                       unsigned accept, lockopts *o)
{
    enum { O_JSON = 256, O_QUIET, O_VERBOSE, O_BUSY, O_LOST, O_ERROR, O_OWNER };
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"json", no_argument, NULL, O_JSON},
                                             {"quiet", no_argument, NULL, O_QUIET},
                                             {"verbose", no_argument, NULL, O_VERBOSE},
                                             {"exit-busy", required_argument, NULL, O_BUSY},
                                             {"exit-lost", required_argument, NULL, O_LOST},
                                             {"exit-error", required_argument, NULL, O_ERROR},
                                             {"owner", required_argument, NULL, O_OWNER},
                                             {NULL, 0, NULL, 0}};
    o->ttl_ms = 0;
    o->wait_ms = RELOCK_WAIT_DEFAULT;
    o->exit_busy = EXIT_ACQUIRE_FAILED;
    o->exit_lost = EXIT_LOST;
    o->exit_error = -1;
    o->json = 0;
    o->quiet = 0;
    o->verbose = 0;
    o->owner = NULL;
    opterr = 0; /* our own one-line messages below */
    int opt, saw_w = 0, saw_n = 0;
    const char *refused_word = NULL; /* an option refused with its value */
    char why[192];
    while ((opt = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
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
            if (relockx_parse_duration(optarg, &o->wait_ms, why, sizeof why) != 0) {
                cli_error("-w: %s", why);
                return 1000 + EXIT_USAGE;
            }
            saw_w = 1;
            break;
        case 'n':
            o->wait_ms = 0;
            saw_n = 1;
            break;
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

int cmd_acquire(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+t:w:nqvE:h", help_acquire,
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
    relock_status st = cli_acquire(c, "acquire", name, o.ttl_ms, o.wait_ms, &l);
    cli_progress_stop(progress);
    long long waited = mono_ms() - t0;
    if (st == RELOCK_OK) {
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
        if (!o.quiet)
            cli_fail(c, st, "acquire");
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

int cmd_release(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+h", help_release, CLI_JSON | CLI_EXITS, &o);
    if (rc)
        return rc - 1000;
    relock_client *c = NULL;
    relock_lock *l = NULL;
    int code = adopt(ctx, argc, argv, "release", 0, &c, &l);
    if (code)
        return cli_code(&o, code);
    relock_status st = relock_release(l);
    if (st != RELOCK_OK) {
        code = cli_code(&o, cli_fail(c, st, "release"));
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
    int rc = cli_parse_lockopts(argc, argv, "+t:h", help_extend,
                                CLI_JSON | CLI_EXITS | CLI_OWNER, &o);
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
    } else {
        code = cli_code(&o, cli_fail(c, st, "extend"));
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

/* Legacy readers hold timestamp V until their clock passes V: one unit
 * after the time V names; a fraction, written by clients that compare
 * fractions, until V itself. */
static long long held_until(const relock_inspect_info *in)
{
    if (strchr(relock_inspect_info_value(in, NULL), '.'))
        return relock_inspect_info_ts_ms(in);
    return relock_inspect_info_ts_ms(in) + (relock_inspect_info_ts_unit_ms(in) ? 1 : 1000);
}

int cmd_inspect(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+h", help_inspect, CLI_JSON, &o);
    if (rc)
        return rc - 1000;
    if (argc - optind != 1) {
        cli_error("inspect: expected one NAME (try relock inspect --help)");
        return EXIT_USAGE;
    }
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
    st = relock_inspect(c, argv[optind], &in);
    if (st != RELOCK_OK) {
        code = cli_fail(c, st, "inspect");
        relock_client_free(c);
        return code;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (o.json) {
        printf("{\"name\":\"");
        json_str(argv[optind]);
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
        printf(",\"fence\":%lld", relock_inspect_info_fence(in));
        if (relock_inspect_info_owner(in)[0]) {
            printf(",\"owner\":\"");
            json_str(relock_inspect_info_owner(in));
            printf("\"");
            json_owner_fields(relock_inspect_info_owner(in));
        }
        printf("}\n");
    } else {
        printf("name:    %s\nformat:  %s\n", argv[optind], kind_name(relock_inspect_info_kind(in)));
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
        if (relock_inspect_info_owner(in)[0])
            printf("owner:   %s\n", relock_inspect_info_owner(in));
    }
    relock_inspect_info_free(in);
    relock_client_free(c);
    return 0;
}

int cmd_probe(cli_ctx *ctx, int argc, char **argv)
{
    lockopts o;
    int rc = cli_parse_lockopts(argc, argv, "+h", help_probe, CLI_JSON, &o);
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
    if (o.json) {
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
