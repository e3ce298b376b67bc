/*
 * relock break: an operator deletes a stuck lock by hand.
 *
 * With --if-value only while the key still holds the value the operator
 * saw (relock_break() compares and deletes atomically).  Without it, the
 * key is deleted whatever lock it holds; the command still reads the value
 * first and deletes exactly that value, so the line it prints names what
 * was really deleted.
 *
 * A value that is no lock (relock_key_classify() says unknown: text, a
 * counter, a token without TTL) is refused unless --force: with the
 * default empty key_prefix every key of the database is a lock name, and
 * a mistyped name must not delete an application's key.  Because the
 * delete compares the exact value read, a key that changes into something
 * else after the read is never deleted either.  --dry-run reads, judges
 * and says what would happen, and deletes nothing.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char help_break[] =
    "usage: relock break NAME [--if-value VALUE [--if-fence FENCE]] [--force] [--dry-run]\n"
    "                         [-q | -v] [--json] [--key]\n"
    "Delete NAME's lock key by hand, for a lock whose holder is stuck or gone, and\n"
    "wake the waiters. With --if-value, only while the key still holds VALUE (as\n"
    "`relock inspect` showed it), atomically; with --if-fence too, only while the\n"
    "fence counter is still FENCE (timestamps repeat: the next holder may hold the\n"
    "same VALUE); without them, whatever lock the key holds. The fence counter\n"
    "moves on. The holder is not told: its next release or extend reports the\n"
    "lock lost.\n"
    "  --force    delete a string value that is no lock too (the format `relock\n"
    "             inspect` and `relock scan` call unknown); never a hash, list...\n"
    "  --dry-run  say what would be deleted (value, format, TTL, fence), delete\n"
    "             nothing; exits as the break would\n"
    "  -q, --quiet  say nothing when there is nothing to delete\n"
    "  -v, --verbose  afterwards, say who holds the lock (a waiter may have it)\n"
    "  --json     print {name, deleted, dry_run, value}; errors as {\"error\":{...}}\n"
    "  --key      NAME is the Redis key (as scan --keys lists it): key_prefix + NAME\n"
    "Exit: 0 deleted, 1 nothing to delete (no key), 3 the key holds another value\n"
    "(nothing deleted), 2 usage, 4 not a lock (refused; --force for a string),\n"
    "or a server error.\n";

/* Exit codes of break (docs/cli.md, decisions 36 and 89); a value that is
 * no lock is refused with EXIT_SERVER, the code of RELOCK_EFOREIGN. */
enum { EXIT_NOTHING = 1, EXIT_CHANGED = 3, EXIT_NOT_LOCK = EXIT_SERVER };

/* What the command was told besides NAME. */
typedef struct brk_opts {
    const char *value; /* --if-value, or NULL */
    long long fence;   /* --if-fence, or 0 */
    int force;         /* --force: a value that is no lock too */
    int dry_run;       /* --dry-run: say, delete nothing */
} brk_opts;

/* How often the value is read again when it changes between the read and
 * the delete, before deleting whatever is there. */
#define TRIES 3

static const char *kind_word(relock_value_kind k)
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

/* "(token, ttl 28112 ms, fence 3)" */
static void describe(const relock_inspect_info *in, char *buf, size_t len)
{
    char ttl[48];
    if (relock_inspect_info_pttl_ms(in) >= 0)
        snprintf(ttl, sizeof ttl, "ttl %lld ms", relock_inspect_info_pttl_ms(in));
    else
        snprintf(ttl, sizeof ttl, "no ttl");
    snprintf(buf, len, "(%s, %s, fence %lld)", kind_word(relock_inspect_info_kind(in)), ttl,
             relock_inspect_info_fence(in));
}

/* --json: the outcome as one object, {"name":…,"deleted":…,"dry_run":…,
 * "value":…} (value: what was or would be deleted, when known). */
static int brk_json;

static void json_outcome(const char *name, int deleted, int dry_run, const char *value)
{
    fputs("{\"name\":\"", stdout);
    cli_json_str(stdout, name);
    printf("\",\"deleted\":%s,\"dry_run\":%s", deleted ? "true" : "false",
           dry_run ? "true" : "false");
    if (value) {
        fputs(",\"value\":\"", stdout);
        cli_json_str(stdout, value);
        fputs("\"", stdout);
    }
    fputs("}\n", stdout);
}

static void print_deleted(const char *name, const relock_inspect_info *in, const char *note)
{
    if (brk_json) {
        json_outcome(name, 1, 0, relock_inspect_info_value(in, NULL));
        return;
    }
    char d[128];
    describe(in, d, sizeof d);
    printf("deleted %s, which held %s %s%s\n", name, relock_inspect_info_value(in, NULL), d, note);
}

/* A value holding a NUL byte cannot be named as a C string: it can be
 * shown only up to that byte, and deleted only as it is.  No lock value
 * holds one. */
static int value_cut(const relock_inspect_info *in)
{
    size_t len;
    const char *v = relock_inspect_info_value(in, &len);
    return strlen(v) != len;
}

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether what inspect read is a lock value relock knows (scan's classes
 * other than unknown). */
static int is_lock(const relock_inspect_info *in)
{
    if (value_cut(in))
        return 0;
    size_t len;
    const char *v = relock_inspect_info_value(in, &len);
    return relock_key_classify(v, len, relock_inspect_info_pttl_ms(in), wall_ms()) !=
           RELOCK_KEY_UNKNOWN;
}

/* A value that is no lock, without --force: refused, nothing deleted. */
static int refuse(const char *name, const relock_inspect_info *in, int dry_run)
{
    char d[128];
    describe(in, d, sizeof d);
    cli_error("break: break %s: the key holds \"%s\"%s %s, which is no lock relock knows; "
              "%s (--force deletes it anyway)",
              name, relock_inspect_info_value(in, NULL), value_cut(in) ? "..." : "", d,
              dry_run ? "it would not be deleted" : "nothing deleted");
    return EXIT_NOT_LOCK;
}

/* The library refuses such names (lock.c, break.c) before any command;
 * the same test, for the one path that sends none. */
static int name_refused(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > 1024)
        return 1;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] <= ' ' || (unsigned char)name[i] == 0x7f)
            return 1;
    return 0;
}

/* An absent key: nothing to delete.  An unconditional break still asks
 * the library (which moves the fence before 2.6, and deletes a key set
 * just now): only with --force, since a key set since the read is not
 * seen. */
static int absent_key(relock_client *c, const char *name, const brk_opts *o);

static int break_code(relock_client *c, relock_status st)
{
    switch (st) {
    case RELOCK_OK:
        return 0;
    case RELOCK_LOST:
        cli_fail(c, st, "break");
        return EXIT_NOTHING;
    case RELOCK_BUSY:
        cli_fail(c, st, "break");
        return EXIT_CHANGED;
    default:
        return cli_fail(c, st, "break");
    }
}

/* -q: nothing said when there is nothing to delete. */
static int brk_quiet;

static int absent_key(relock_client *c, const char *name, const brk_opts *o)
{
    if (o->dry_run || (!o->force && !name_refused(name))) {
        cli_quiet_error(brk_quiet, "break: break %s: nothing to delete: the key is absent",
                        name);
        return EXIT_NOTHING;
    }
    relock_status st = relock_break(c, name, NULL);
    if (st == RELOCK_OK && brk_json)
        json_outcome(name, 1, 0, NULL);
    else if (st == RELOCK_OK)
        printf("deleted %s, which was set just now (value not seen)\n", name);
    return break_code(c, st);
}

/* What the look before a --if-value break decides: an exit code, or -1
 * to go on and delete. */
static int look_if(relock_client *c, const char *name, const brk_opts *o,
                   const relock_inspect_info *in)
{
    const char *value = o->value;
    long long fence = o->fence;
    int same = relock_inspect_info_kind(in) != RELOCK_VALUE_NONE && !value_cut(in) &&
               strcmp(relock_inspect_info_value(in, NULL), value) == 0;
    if (same && !o->force && !is_lock(in))
        return refuse(name, in, o->dry_run);
    if (o->dry_run) {
        if (relock_inspect_info_kind(in) == RELOCK_VALUE_NONE)
            return absent_key(c, name, o);
        if (!same) {
            cli_error("break: break %s: nothing would be deleted: the key holds another "
                      "value (%s, not %s)",
                      name, relock_inspect_info_value(in, NULL), value);
            return EXIT_CHANGED;
        }
        if (fence > 0 && relock_inspect_info_fence(in) != fence) {
            cli_error("break: break %s: nothing would be deleted: the key holds that value, "
                      "but fence %lld is no longer current (now %lld)",
                      name, fence, relock_inspect_info_fence(in));
            return EXIT_CHANGED;
        }
        char d[128];
        describe(in, d, sizeof d);
        if (brk_json)
            json_outcome(name, 0, 1, relock_inspect_info_value(in, NULL));
        else
            printf("would delete %s, which holds %s %s\n", name,
                   relock_inspect_info_value(in, NULL), d);
        return 0;
    }
    return -1;
}

/* --if-value VALUE [--if-fence FENCE]: first a look, to judge the value
 * (is it a lock?) and, for --dry-run, to say what would happen. */
static int break_if(relock_client *c, const char *name, const brk_opts *o)
{
    const char *value = o->value;
    long long fence = o->fence;
    if (!o->force || o->dry_run) {
        relock_inspect_info *in = NULL;
        relock_status st = relock_inspect(c, name, &in);
        if (st != RELOCK_OK)
            return cli_fail(c, st, "break");
        int code = look_if(c, name, o, in);
        relock_inspect_info_free(in);
        if (code >= 0)
            return code;
        /* A key that takes VALUE only after this look was named by the
         * operator: deleted as asked. */
    }
    relock_status st = relock_break_fenced(c, name, value, fence);
    if (st == RELOCK_OK) {
        if (brk_json)
            json_outcome(name, 1, 0, value);
        else
            printf("deleted %s, which held %s\n", name, value);
        return 0;
    }
    if (st == RELOCK_BUSY) {
        /* Say who holds it now: the operator's next look. */
        /* Add what the key holds now: the operator's next look. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", relock_client_error(c)->message);
        relock_inspect_info *in = NULL;
        if (relock_inspect(c, name, &in) == RELOCK_OK &&
            relock_inspect_info_kind(in) != RELOCK_VALUE_NONE)
            cli_error("break: %s (%s, not %s)", msg, relock_inspect_info_value(in, NULL), value);
        else
            cli_error("break: %s", msg);
        relock_inspect_info_free(in);
        return EXIT_CHANGED;
    }
    return break_code(c, st);
}

/* One look and delete of break_any(): an exit code, or -1 when the key
 * changed between the read and the delete. */
static int break_seen(relock_client *c, const char *name, const brk_opts *o,
                      const relock_inspect_info *in)
{
    if (relock_inspect_info_kind(in) == RELOCK_VALUE_NONE)
        return absent_key(c, name, o);
    if (!o->force && !is_lock(in))
        return refuse(name, in, o->dry_run);
    if (o->dry_run) {
        char d[128];
        describe(in, d, sizeof d);
        if (brk_json)
            json_outcome(name, 0, 1, relock_inspect_info_value(in, NULL));
        else
            printf("would delete %s, which holds %s%s %s\n", name,
                   relock_inspect_info_value(in, NULL), value_cut(in) ? "..." : "", d);
        return 0;
    }
    /* A value holding a NUL byte (never a lock, so only with --force)
     * cannot be compared, and is deleted as it is. */
    int cut = value_cut(in);
    relock_status st = relock_break(c, name, cut ? NULL : relock_inspect_info_value(in, NULL));
    if (st == RELOCK_OK) {
        print_deleted(name, in, cut ? " [value cut at a NUL byte]" : "");
        return 0;
    }
    if (st != RELOCK_BUSY)
        return break_code(c, st);
    return -1;
}

/* No --if-value: delete what is there, and say what it was. */
static int break_any(relock_client *c, const char *name, const brk_opts *o)
{
    relock_inspect_info *in = NULL;
    for (int i = 0; i < TRIES; i++) {
        relock_inspect_info_free(in);
        in = NULL;
        relock_status st = relock_inspect(c, name, &in);
        if (st != RELOCK_OK)
            return cli_fail(c, st, "break");
        int code = break_seen(c, name, o, in);
        if (code >= 0) {
            relock_inspect_info_free(in);
            return code;
        }
        /* It changed between the read and the delete: look again. */
    }
    int code = 0;
    if (!o->force) {
        cli_error("break: break %s: nothing deleted: the key kept changing while it was read",
                  name);
        code = EXIT_CHANGED;
    } else {
        relock_status st = relock_break(c, name, NULL);
        if (st != RELOCK_OK)
            code = break_code(c, st);
        else
            print_deleted(name, in, " [last seen; it kept changing]");
    }
    relock_inspect_info_free(in);
    return code;
}

int cmd_break(cli_ctx *ctx, int argc, char **argv)
{
    enum { O_JSON = 256, O_IF_VALUE, O_KEY };
    static const struct option longopts[] = {{"if-value", required_argument, NULL, O_IF_VALUE},
                                             {"if-fence", required_argument, NULL, 'f'},
                                             {"force", no_argument, NULL, 'F'},
                                             {"dry-run", no_argument, NULL, 'n'},
                                             {"json", no_argument, NULL, O_JSON},
                                             {"key", no_argument, NULL, O_KEY},
                                             {"quiet", no_argument, NULL, 'q'},
                                             {"verbose", no_argument, NULL, 'v'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int verbose = 0, by_key = 0;
    const char *value = NULL;
    const char *fence_arg = NULL;
    brk_opts o = {NULL, 0, 0, 0};
    int opt;
    static const char optstring[] = "qvh";
    opterr = 0; /* our own one-line messages below */
    /* No "+": --if-value may follow NAME, as the usage shows it. */
    while ((opt = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        switch (opt) {
        case O_IF_VALUE:
            value = optarg;
            break;
        case 'f':
            fence_arg = optarg;
            break;
        case 'F':
            o.force = 1;
            break;
        case 'n':
            o.dry_run = 1;
            break;
        case O_JSON:
            brk_json = 1;
            cli_json = 1;
            break;
        case 'q':
            brk_quiet = 1;
            break;
        case O_KEY:
            by_key = 1;
            break;
        case 'v':
            verbose = 1;
            break;
        case 'h':
            fputs(help_break, stdout);
            return 0;
        default:
            cli_bad_option("break", optstring, longopts, argv);
            return EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        cli_error("break: expected one NAME (try relock break --help)");
        return EXIT_USAGE;
    }
    if (brk_quiet && verbose) {
        cli_error("-q and -v exclude each other");
        return EXIT_USAGE;
    }
    if (value && !*value) {
        cli_error("break: --if-value: the value is empty");
        return EXIT_USAGE;
    }
    long long fence = 0;
    if (fence_arg) {
        char *end = NULL;
        fence = strtoll(fence_arg, &end, 10);
        if (!*fence_arg || *end || fence <= 0 || fence == LLONG_MAX) {
            cli_error("break: --if-fence: '%s' is not a fence (a whole number above 0, as "
                      "acquire or inspect printed it)", fence_arg);
            return EXIT_USAGE;
        }
        if (!value) {
            cli_error("break: --if-fence needs --if-value: the fence is compared with the value");
            return EXIT_USAGE;
        }
    }
    const char *name = cli_name_of(ctx, "break", argv[optind], by_key);
    if (!name)
        return EXIT_USAGE;
    relock_client *c = NULL;
    relock_status st = relock_connect(ctx->cfg, &c);
    /* A mode the server refuses does not matter here: break needs none. */
    if (st != RELOCK_OK && st != RELOCK_EUNSUPPORTED) {
        int code = cli_fail(c, st, "break");
        relock_client_free(c);
        return code;
    }
    o.value = value;
    o.fence = fence;
    int code = value ? break_if(c, name, &o) : break_any(c, name, &o);
    /* --verbose: what the key holds afterwards (someone may have taken
     * the free lock already). */
    if (verbose && code == 0 && !o.dry_run)
        cli_say_holder(c, "break", name);
    relock_client_free(c);
    return code;
}
