/*
 * Who holds the lock: the owner metadata the commands write (owner_info,
 * on by default in the command; decision 88).  The record must name a
 * process that is alive while the lock is held and mean something to an
 * operator: relock acquire exits at once, so it names its caller, the
 * script; run names itself and its command; hold names itself and its
 * caller.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Command lines are cut to this many bytes (then "..."). */
#define CMDLINE_MAX 128

/* Makes text fit a record: control characters become '?', and a text
 * longer than max bytes is cut (not inside a UTF-8 character) with "...". */
static void tidy(char *text, size_t max)
{
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < ' ' || text[i] == 0x7f)
            text[i] = '?';
    while (n > 0 && text[n - 1] == ' ')
        text[--n] = '\0';
    if (n <= max)
        return;
    size_t cut = max - 3;
    while (cut > 0 && ((unsigned char)text[cut] & 0xc0) == 0x80)
        cut--;
    memcpy(text + cut, "...", 4);
}

/* The command line of process pid, from /proc (NUL-separated arguments
 * joined by spaces); "" when it cannot be read. */
static void proc_cmdline(long pid, char *out, size_t len)
{
    out[0] = '\0';
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    for (ssize_t i = 0; i < n; i++)
        if (out[i] == '\0')
            out[i] = ' ';
    out[n] = '\0';
    tidy(out, CMDLINE_MAX);
}

static void argv_line(char *const *argv, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (; argv && *argv && used + 1 < len; argv++) {
        int w = snprintf(out + used, len - used, "%s%s", used ? " " : "", *argv);
        if (w < 0)
            break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    tidy(out, CMDLINE_MAX);
}

/* What describe() writes: "note=" and --owner TEXT, or a short key and a
 * command line; with "caller_pid=PID " before it, it fits a record. */
#define WHAT_MAX (CLI_OWNER_TEXT_MAX + 16)

/* "KEY=LINE" for a command line, "note=TEXT" for --owner TEXT. */
static void describe(char *out, size_t len, const char *key, const char *line, const char *note)
{
    /* line is cut to CMDLINE_MAX bytes, note to CLI_OWNER_TEXT_MAX. */
    if (note)
        snprintf(out, len, "note=%.*s", CLI_OWNER_TEXT_MAX, note);
    else if (line[0])
        snprintf(out, len, "%.8s=%.*s", key, CMDLINE_MAX, line);
    else
        out[0] = '\0';
}

/* What cli_owner_setup() set last, for cli_owner_first(). */
static long last_pid;
static char last_text[RELOCK_OWNER_MAX + 1];

int cli_owner_setup(cli_ctx *ctx, const char *cmd, const lockopts *o, enum cli_owner_kind kind,
                    char *const *argv)
{
    char line[CMDLINE_MAX * 4 + 8], text[RELOCK_OWNER_MAX + 1], what[WHAT_MAX];
    long pid = 0;
    long parent = (long)getppid();
    switch (kind) {
    case OWNER_CALLER:
        /* relock exits at once: the record names the process that called
         * it, which holds the lock from then on. */
        pid = parent;
        proc_cmdline(parent, line, sizeof line);
        describe(text, sizeof text, "cmd", line, o->owner);
        break;
    case OWNER_SELF:
        proc_cmdline(parent, line, sizeof line);
        describe(what, sizeof what, "caller", line, o->owner);
        snprintf(text, sizeof text, "caller_pid=%ld%s%s", parent, what[0] ? " " : "", what);
        break;
    case OWNER_CMD:
        /* The command's pid is known once it runs (cli_owner_cmd()). */
        argv_line(argv, line, sizeof line);
        describe(text, sizeof text, "cmd", line, o->owner);
        break;
    }
    if (relock_config_set_owner(ctx->cfg, pid, text) != RELOCK_OK) {
        cli_error("%s: %s", cmd, relock_config_error(ctx->cfg)->message);
        return EXIT_USAGE;
    }
    last_pid = pid;
    snprintf(last_text, sizeof last_text, "%s", text);
    return 0;
}

void cli_owner_first(relock_lock *l, const char *first)
{
    char text[RELOCK_OWNER_MAX + 1];
    int n = snprintf(text, sizeof text, "first=%s%s%s", first, last_text[0] ? " " : "", last_text);
    if (n < 0 || (size_t)n >= sizeof text)
        return; /* no room: the record keeps at= alone */
    (void)relock_lock_set_owner(l, last_pid, text);
}

void cli_owner_cmd(relock_lock *l, const lockopts *o, long pid, char *const *argv)
{
    char line[CMDLINE_MAX * 4 + 8], what[WHAT_MAX], text[RELOCK_OWNER_MAX + 1];
    argv_line(argv, line, sizeof line);
    describe(what, sizeof what, "cmd", line, o->owner);
    snprintf(text, sizeof text, "cmd_pid=%ld%s%s", pid, what[0] ? " " : "", what);
    /* Informational: a failure here changes nothing for the lock. */
    (void)relock_lock_set_owner(l, 0, text);
}
