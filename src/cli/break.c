/*
 * relock break: an operator deletes a stuck lock by hand.
 *
 * With --if-value only while the key still holds the value the operator
 * saw (relock_break() compares and deletes atomically).  Without it, the
 * key is deleted whatever it holds; the command still reads the value
 * first and deletes exactly that value, so the line it prints names what
 * was really deleted.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char help_break[] =
    "usage: relock break NAME [--if-value VALUE [--if-fence FENCE]]\n"
    "Delete NAME's lock key by hand, for a lock whose holder is stuck or gone, and\n"
    "wake the waiters. With --if-value, only while the key still holds VALUE (as\n"
    "`relock inspect` showed it), atomically; with --if-fence too, only while the\n"
    "fence counter is still FENCE (timestamps repeat: the next holder may hold the\n"
    "same VALUE); without them, whatever the key holds. The fence counter moves on.\n"
    "The holder is not told: its next release or extend reports the lock lost.\n"
    "Exit: 0 deleted, 1 nothing to delete (no key), 3 the key holds another value\n"
    "(nothing deleted), 2 usage, 4 server error.\n";

/* Exit codes of break (docs/cli.md, docs/decisions.md). */
enum { EXIT_NOTHING = 1, EXIT_CHANGED = 3 };

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

static void print_deleted(const char *name, const relock_inspect_info *in, const char *note)
{
    char ttl[48];
    if (in->pttl_ms >= 0)
        snprintf(ttl, sizeof ttl, "ttl %lld ms", in->pttl_ms);
    else
        snprintf(ttl, sizeof ttl, "no ttl");
    printf("deleted %s, which held %s (%s, %s, fence %lld)%s\n", name, in->value,
           kind_word(in->kind), ttl, in->fence, note);
}

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

/* --if-value VALUE [--if-fence FENCE]. */
static int break_if(relock_client *c, const char *name, const char *value, long long fence)
{
    relock_status st = relock_break_fenced(c, name, value, fence);
    if (st == RELOCK_OK) {
        printf("deleted %s, which held %s\n", name, value);
        return 0;
    }
    if (st == RELOCK_BUSY) {
        /* Say who holds it now: the operator's next look. */
        /* Add what the key holds now: the operator's next look. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", relock_client_error(c)->message);
        relock_inspect_info in;
        if (relock_inspect(c, name, &in) == RELOCK_OK && in.kind != RELOCK_VALUE_NONE)
            cli_error("break: %s (%s, not %s)", msg, in.value, value);
        else
            cli_error("break: %s", msg);
        return EXIT_CHANGED;
    }
    return break_code(c, st);
}

/* No --if-value: delete what is there, and say what it was. */
static int break_any(relock_client *c, const char *name)
{
    relock_inspect_info in;
    relock_status st = RELOCK_OK;
    for (int i = 0; i < TRIES; i++) {
        st = relock_inspect(c, name, &in);
        if (st != RELOCK_OK)
            return cli_fail(c, st, "break");
        if (in.kind == RELOCK_VALUE_NONE) {
            /* The library checks the name and says "nothing to delete";
             * a key set since the read is deleted like any other. */
            st = relock_break(c, name, NULL);
            if (st == RELOCK_OK)
                printf("deleted %s, which was set just now (value not seen)\n", name);
            return break_code(c, st);
        }
        /* inspect cuts values at 127 bytes: such a value cannot be
         * compared, and is deleted as it is. */
        int cut = strlen(in.value) >= sizeof in.value - 1;
        st = relock_break(c, name, cut ? NULL : in.value);
        if (st == RELOCK_OK) {
            print_deleted(name, &in, cut ? " [value cut]" : "");
            return 0;
        }
        if (st != RELOCK_BUSY)
            return break_code(c, st);
        /* It changed between the read and the delete: look again. */
    }
    st = relock_break(c, name, NULL);
    if (st != RELOCK_OK)
        return break_code(c, st);
    print_deleted(name, &in, " [last seen; it kept changing]");
    return 0;
}

int cmd_break(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {{"if-value", required_argument, NULL, 'v'},
                                             {"if-fence", required_argument, NULL, 'f'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *value = NULL;
    const char *fence_arg = NULL;
    int opt;
    static const char optstring[] = "h";
    opterr = 0; /* our own one-line messages below */
    /* No "+": --if-value may follow NAME, as the usage shows it. */
    while ((opt = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        switch (opt) {
        case 'v':
            value = optarg;
            break;
        case 'f':
            fence_arg = optarg;
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
    const char *name = argv[optind];
    relock_client *c = NULL;
    relock_status st = relock_connect(ctx->cfg, &c);
    /* A mode the server refuses does not matter here: break needs none. */
    if (st != RELOCK_OK && st != RELOCK_EUNSUPPORTED) {
        int code = cli_fail(c, st, "break");
        relock_client_free(c);
        return code;
    }
    int code = value ? break_if(c, name, value, fence) : break_any(c, name);
    relock_client_free(c);
    return code;
}
