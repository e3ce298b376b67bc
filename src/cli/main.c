/*
 * relock: hold Redis locks from the shell, as flock(1) does for files.
 * This file reads the global options, builds the configuration and hands
 * over to the command.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char usage_text[] =
    "usage: relock [-c FILE] [-u URL] [-m MODE] COMMAND ...\n"
    "\n"
    "Redis locks for every Redis a fleet still runs.\n"
    "\n"
    "  run     [-t TTL] [-w WAIT | -n] [-E CODE] [-k DURATION] [--kill-rest] NAME -- CMD\n"
    "                                      hold NAME while CMD (and what it leaves in\n"
    "                                      its process group) runs, renewing\n"
    "  acquire [-t TTL] [-w WAIT | -n] NAME\n"
    "                                      print \"VALUE FENCE VALIDITY_MS\" on success\n"
    "  hold    [-t TTL] [-w WAIT | -n] [--no-stdin] [--notify PID|parent] NAME\n"
    "                                      print \"VALUE FENCE\", renew until TERM, INT,\n"
    "                                      HUP or end of stdin, then release\n"
    "  release NAME VALUE [FENCE]          exit 0 released, 3 lost\n"
    "  extend  [-t TTL] NAME VALUE [FENCE] exit 0 extended (prints the value now held)\n"
    "  inspect [--key] NAME                key, format, value, expiry, TTL, fence,\n"
    "                                      waiters, owner\n"
    "  scan    [--keys [--limit N]] [--match PATTERN] [--check]\n"
    "                                      migration audit of lock keys (--keys lists\n"
    "                                      them by class; -q: the verdict as exit code)\n"
    "  break   NAME [--if-value VALUE [--if-fence FENCE]] [--force] [--dry-run]\n"
    "                                      delete a stuck lock by hand (exit 0 deleted,\n"
    "                                      1 nothing to delete, 3 VALUE no longer held,\n"
    "                                      4 no lock: refused without --force)\n"
    "  probe                               server version, capabilities, chosen mode\n"
    "\n"
    "Every command takes --json (errors too), -q and -v; options may follow\n"
    "NAME (not for run). -t, --ttl is the LEASE, not flock's --timeout\n"
    "(the wait is -w, --wait; -n, --nonblock does not wait).\n"
    "\n"
    "Options:\n"
    "  -c FILE   configuration file (default: $RELOCK_CONFIG, else\n"
    "            $XDG_CONFIG_HOME/relock.conf or ~/.config/relock.conf, else\n"
    "            /etc/relock.conf, else built-in defaults)\n"
    "  -u URL    redis://[user:pass@]host[:port][/db], or unix:///path/to/redis.sock\n"
    "            (default: $RELOCK_URL)\n"
    "  -m MODE   legacy, bridge, modern or auto (overrides the file)\n"
    "  -h, --help     this text; relock COMMAND --help for a command\n"
    "  --version      print the version\n"
    "\n"
    "-c, -u and -m may also follow the command's name (relock probe -u URL); for\n"
    "run, -c after NAME is flock's shell command form: relock run NAME -c 'a && b'.\n"
    "\n"
    "Durations: plain seconds (10, 1.5), or with units: 250ms, 30s, 5m, 1m30s,\n"
    "5min, 30sec; -w infinity waits without bound.\n"
    "Exit codes: 0 success (run: CMD's own code); 1 lock not acquired; 2 usage or\n"
    "configuration error; 3 lock lost; 4 server unreachable or protocol error\n"
    "(run, acquire and hold: --exit-busy/-E, --exit-lost and --exit-error change\n"
    "them). run, acquire, hold and extend record who holds the lock (owner_info):\n"
    "--owner TEXT replaces the default, the command or the calling process.\n";

int cli_json;

/* The first error said while --json is given, and its status when the
 * library reported it (cli_fail). */
static char json_msg[1024];
static const char *json_status;

/* -q: the "relock: …" line is left out, the --json object is not. */
static int said_quietly;

static void say(const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    if (!said_quietly) {
        fputs("relock: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    if (cli_json && !json_msg[0])
        vsnprintf(json_msg, sizeof json_msg, fmt, copy);
    va_end(copy);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
}

void cli_quiet_error(int quiet, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    said_quietly = quiet;
    say(fmt, ap);
    said_quietly = 0;
    va_end(ap);
}

void cli_json_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

void cli_json_finish(int code)
{
    if (!cli_json || code == 0 || !json_msg[0])
        return;
    FILE *f = cli_json == 2 ? stderr : stdout;
    fputs("{\"error\":{\"message\":\"", f);
    cli_json_str(f, json_msg);
    fputs("\"", f);
    if (json_status)
        fprintf(f, ",\"status\":\"%s\"", json_status);
    fprintf(f, ",\"exit_code\":%d}}\n", code);
    fflush(f);
}

/* Whether the option getopt just refused (optopt) takes a value: then it
 * was refused for lacking one.  word is what the user wrote. */
static int lacks_value(const char *word, const char *optstring, const struct option *longopts)
{
    if (!optopt)
        return 0;
    if (word[0] == '-' && word[1] == '-') {
        for (const struct option *o = longopts; o && o->name; o++)
            if (o->val == optopt)
                return o->has_arg == required_argument;
        return 0;
    }
    const char *p = strchr(optstring, optopt);
    return p && p[1] == ':';
}

void cli_bad_option(const char *cmd, const char *optstring, const struct option *longopts,
                    char *const *argv)
{
    const char *word = argv[optind - 1];
    const char *sep = cmd ? ": " : "";
    const char *name = cmd ? cmd : "";
    const char *space = cmd ? " " : "";
    if (lacks_value(word, optstring, longopts))
        cli_error("%s%soption %s needs a value (try relock %s%s--help)", name, sep, word, name,
                  space);
    else if (optopt && word[1] != '-')
        cli_error("%s%sunknown option -%c (try relock %s%s--help)", name, sep, optopt, name,
                  space);
    else
        cli_error("%s%sunknown option %s (try relock %s%s--help)", name, sep, word, name, space);
}

int cli_exit_code(relock_status st)
{
    switch (st) {
    case RELOCK_OK:
        return 0;
    case RELOCK_BUSY:
    case RELOCK_TIMEOUT:
        return EXIT_ACQUIRE_FAILED;
    case RELOCK_LOST:
        return EXIT_LOST;
    case RELOCK_ECONFIG:
    case RELOCK_EINVAL:
    case RELOCK_EUNSUPPORTED:
        return EXIT_USAGE;
    case RELOCK_EIO:
    case RELOCK_EPROTO:
    case RELOCK_EFOREIGN:
    case RELOCK_EAMBIGUOUS:
    case RELOCK_ENOMEM:
    case RELOCK_EDURABILITY:
    case RELOCK_ECANCELED:
        return EXIT_SERVER;
    }
    return EXIT_SERVER;
}

int cli_quiet_fail(int quiet, relock_client *c, relock_status st, const char *what)
{
    said_quietly = quiet;
    int code = cli_fail(c, st, what);
    said_quietly = 0;
    return code;
}

int cli_fail(relock_client *c, relock_status st, const char *what)
{
    if (cli_json && !json_msg[0])
        json_status = relock_status_name(st);
    const relock_error *e = c ? relock_client_error(c) : NULL;
    if (e && e->message[0])
        cli_error("%s: %s", what, e->message);
    else
        cli_error("%s: %s", what, relock_strerror(st));
    return cli_exit_code(st);
}

/* Whether the server c probed lacks what the configured mode needs: then
 * the command can say how to choose another mode on its command line (the
 * library names the setting only). */
static int mode_refused(const cli_ctx *ctx, relock_client *c)
{
    relock_mode m = relock_config_mode(ctx->cfg);
    relock_server_info *info = NULL;
    if ((m != RELOCK_MODE_MODERN && m != RELOCK_MODE_BRIDGE) ||
        relock_client_server(c, &info) != RELOCK_OK)
        return 0;
    unsigned need = m == RELOCK_MODE_MODERN ? RELOCK_CAP_SET_NX_PX : RELOCK_CAP_EVAL;
    int refused = (relock_server_info_caps(info) & need) == 0;
    relock_server_info_free(info);
    return refused;
}

relock_client *cli_connect(cli_ctx *ctx, int *code)
{
    relock_client *c = NULL;
    relock_status st = relock_connect(ctx->cfg, &c);
    if (st != RELOCK_OK) {
        if (cli_json && !json_msg[0])
            json_status = relock_status_name(st);
        /* The library's detail, before the look at the server clears it. */
        char msg[600];
        snprintf(msg, sizeof msg, "%s", c ? relock_client_error(c)->message : "");
        if (st == RELOCK_EUNSUPPORTED && msg[0] && mode_refused(ctx, c)) {
            cli_error("connect: %s (-m legacy selects it for one command)", msg);
            *code = cli_exit_code(st);
        } else if (msg[0]) {
            cli_error("connect: %s", msg);
            *code = cli_exit_code(st);
        } else {
            *code = cli_fail(c, st, "connect");
        }
        relock_client_free(c);
        return NULL;
    }
    return c;
}

/* Options of each command that take a value (skipped when looking for
 * global options after the command's name). */
static int takes_value(const char *a)
{
    static const char *const with[] = {"-t", "-w", "-E", "--exit-busy", "--exit-lost",
                                       "--exit-error", "--match", "--limit", "--if-value",
                                       "--if-fence",
                                       "--owner"};
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++)
        if (strcmp(a, with[i]) == 0)
            return 1;
    return 0;
}

/*
 * Global options written after the command's name (relock probe -u URL):
 * taken out of argv and applied as if written before it.  The scan stops
 * at "--"; for run also at NAME, after which -c is the shell command.
 * Returns -1 (said) for a global option without its value.
 */
static int late_globals(int *argc, char **argv, int first, const char **file, const char **url,
                        const char **mode)
{
    int is_run = strcmp(argv[first - 1], "run") == 0;
    int out = first;
    int i = first;
    for (; i < *argc; i++) {
        char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break;
        const char **slot = strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0 ? file
                            : strcmp(a, "-u") == 0 || strcmp(a, "--url") == 0  ? url
                            : strcmp(a, "-m") == 0 || strcmp(a, "--mode") == 0 ? mode
                                                                               : NULL;
        if (slot) {
            if (i + 1 >= *argc) {
                cli_error("option %s needs a value (try relock --help)", a);
                return -1;
            }
            *slot = argv[++i];
            continue;
        }
        argv[out++] = a;
        if (takes_value(a) && i + 1 < *argc) {
            argv[out++] = argv[++i];
        } else if (a[0] != '-' && is_run) {
            i++; /* NAME: the rest is run's */
            break;
        }
    }
    for (; i < *argc; i++)
        argv[out++] = argv[i];
    argv[out] = NULL;
    *argc = out;
    return 0;
}

/*
 * The configuration file read when neither -c nor $RELOCK_CONFIG names
 * one, so that cron lines and units need no -c: the user's
 * $XDG_CONFIG_HOME/relock.conf ($HOME/.config/relock.conf), else
 * /etc/relock.conf.  The first that exists is read (an unreadable one is
 * then an error, not skipped); none: built-in defaults.  1 when found.
 */
static int default_config(char *path, size_t len)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    int n = -1;
    if (xdg && xdg[0] == '/')
        n = snprintf(path, len, "%s/relock.conf", xdg);
    else if (home && home[0] == '/')
        n = snprintf(path, len, "%s/.config/relock.conf", home);
    if (n > 0 && (size_t)n < len && access(path, F_OK) == 0)
        return 1;
    snprintf(path, len, "/etc/relock.conf");
    return access(path, F_OK) == 0;
}

static const struct command {
    const char *name;
    int (*fn)(cli_ctx *, int, char **);
} commands[] = {
    {"run", cmd_run},         {"acquire", cmd_acquire}, {"release", cmd_release},
    {"extend", cmd_extend},   {"inspect", cmd_inspect}, {"probe", cmd_probe},
    {"scan", cmd_scan},       {"break", cmd_break},     {"hold", cmd_hold},
};

int main(int argc, char **argv)
{
#define OPTSTRING "+c:u:m:h"
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
    /* A server that resets the connection must give exit code 4 with a
     * message, not a silent death by SIGPIPE inside a write. */
    signal(SIGPIPE, SIG_IGN);
    /* A standard descriptor left closed (relock acquire NAME >&-) would be
     * the next one opened, the server's connection, and what relock prints
     * would go to the server: /dev/null takes its place. */
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int n = open("/dev/null", O_RDWR); /* the lowest free: fd */
        if (n > fd)
            close(n);
    }
    const char *file = getenv("RELOCK_CONFIG");
    int file_given = file != NULL; /* an empty RELOCK_CONFIG: no file at all */
    const char *url = getenv("RELOCK_URL");
    const char *mode = NULL;
    int opt;
    opterr = 0; /* our own one-line messages below */
    /* "+": options end at the command's name. */
    while ((opt = getopt_long(argc, argv, OPTSTRING, longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            file = optarg;
            file_given = 1;
            break;
        case 'u':
            url = optarg;
            break;
        case 'm':
            mode = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'V':
            printf("relock %s\n", relock_version());
            return 0;
        default:
            cli_bad_option(NULL, OPTSTRING, longopts, argv);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        cli_error("no command given (try relock --help)");
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    const struct command *cmd = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0)
            cmd = &commands[i];
    if (!cmd) {
        cli_error("unknown command \"%s\" (try relock --help)", name);
        return EXIT_USAGE;
    }

    /* --json before anything can fail: a configuration error is said in
     * JSON too.  run's standard output is CMD's: its JSON goes to stderr. */
    for (int i = optind + 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--json") == 0)
            cli_json = strcmp(name, "run") == 0 ? 2 : 1;
    const char *before = file;
    if (late_globals(&argc, argv, optind + 1, &file, &url, &mode) != 0) {
        cli_json_finish(EXIT_USAGE);
        return EXIT_USAGE;
    }
    if (file != before)
        file_given = 1;
    char default_path[4096];
    if (!file_given && default_config(default_path, sizeof default_path))
        file = default_path;
    relock_config *cfg = relock_config_new();
    if (!cfg) {
        cli_error("out of memory");
        return EXIT_SERVER;
    }
    int code = 0;
    /* The command records who holds a lock unless the file says
     * owner_info = false (decision 88); the library's default is off. */
    relock_config_set(cfg, "owner_info", "true");
    if (file && *file && relock_config_load_file(cfg, file) != RELOCK_OK) {
        cli_error("%s", relock_config_error(cfg)->message);
        code = EXIT_USAGE;
    } else if (url && *url && relock_config_set_url(cfg, url) != RELOCK_OK) {
        cli_error("%s", relock_config_error(cfg)->message);
        code = EXIT_USAGE;
    } else if (mode && relock_config_set(cfg, "mode", mode) != RELOCK_OK) {
        cli_error("-m: %s", relock_config_error(cfg)->message);
        code = EXIT_USAGE;
    }
    /* A command's --help works even with a broken configuration. */
    int wants_help = 0;
    for (int i = optind + 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            wants_help = 1;
    if (code != 0 && !wants_help)
        cli_json_finish(code);
    if (code == 0 || wants_help) {
        cli_ctx ctx = {cfg, argv[0], file && *file ? file : NULL, url && *url ? url : NULL,
                       mode};
        /* Each command parses its own options from its name on. */
        int sub_argc = argc - optind;
        char **sub_argv = argv + optind;
        optind = 0; /* reinitialise getopt for the command */
        code = cmd->fn(&ctx, sub_argc, sub_argv);
        cli_json_finish(code);
    }
    relock_config_free(cfg);
    return code;
}
