/*
 * control: the RELOCK-PROXY command (see control.h).
 */
#include "control.h"

#include <stdio.h>
#include <string.h>

#include "counters.h"
#include "faults.h"
#include "native.h"

#define MAX_FAULT_PAIRS 8

int control_match(const proxy_arg *argv, size_t argc)
{
    return argc > 0 && arg_is(&argv[0], "RELOCK-PROXY");
}

/* Copy an argument into a NUL-terminated, bounded buffer (with CR/LF
 * blanked, since it may end up in an error line). */
static void arg_copy(char *dst, size_t cap, const proxy_arg *a)
{
    size_t n = a->n < cap - 1 ? a->n : cap - 1;
    size_t i;

    for (i = 0; i < n; i++) {
        char c = a->p[i];

        dst[i] = (c == '\r' || c == '\n' || c == '\0') ? ' ' : c;
    }
    dst[n] = '\0';
}

static void lower_copy(char *dst, size_t cap, const proxy_arg *a)
{
    size_t i;

    arg_copy(dst, cap, a);
    for (i = 0; dst[i] != '\0'; i++) {
        if (dst[i] >= 'A' && dst[i] <= 'Z')
            dst[i] = (char)(dst[i] - 'A' + 'a');
    }
}

static int fault(const proxy_arg *argv, size_t argc, pbuf *out)
{
    char names[MAX_FAULT_PAIRS][32];
    char values[MAX_FAULT_PAIRS][64];
    const char *np[MAX_FAULT_PAIRS];
    const char *vp[MAX_FAULT_PAIRS];
    char why[256];
    char msg[320];
    size_t pairs;
    size_t i;

    if (argc == 3 && arg_is(&argv[2], "off")) {
        faults_off();
        return resp_add_status(out, "OK");
    }
    if (argc < 4 || (argc - 2) % 2 != 0 || (argc - 2) / 2 > MAX_FAULT_PAIRS)
        return resp_add_error(out,
                              "ERR relock-proxy: FAULT takes 'off' or up to 8 "
                              "pairs of name and value (delay-ms N, "
                              "delay-us N, close-before-reply P, "
                              "close-after-reply P, seed S)");
    pairs = (argc - 2) / 2;
    for (i = 0; i < pairs; i++) {
        lower_copy(names[i], sizeof(names[i]), &argv[2 + 2 * i]);
        arg_copy(values[i], sizeof(values[i]), &argv[3 + 2 * i]);
        np[i] = names[i];
        vp[i] = values[i];
    }
    if (faults_update(np, vp, pairs, why, sizeof(why)) < 0) {
        snprintf(msg, sizeof(msg), "ERR relock-proxy: FAULT %s", why);
        return resp_add_error(out, msg);
    }
    return resp_add_status(out, "OK");
}

int control_run(const proxy_arg *argv, size_t argc, pbuf *out)
{
    char sub[48];
    char msg[256];

    if (argc < 2)
        return resp_add_error(out,
                              "ERR relock-proxy: missing subcommand (REFUSED, "
                              "REFUSED-LIST, RESET, FAULT, REPLIES, COMMANDS, COMMANDS-LIST, "
                              "LUA, NATIVE)");
    if (arg_is(&argv[1], "REFUSED") && argc == 2)
        return resp_add_int(out, counters_total());
    if (arg_is(&argv[1], "REFUSED-LIST") && argc == 2)
        return counters_list(out);
    if (arg_is(&argv[1], "RESET") && argc == 2) {
        counters_reset();
        return resp_add_status(out, "OK");
    }
    if (arg_is(&argv[1], "FAULT"))
        return fault(argv, argc, out);
    if (arg_is(&argv[1], "REPLIES") && argc == 2)
        return resp_add_int(out, faults_replies());
    if (arg_is(&argv[1], "COMMANDS") && argc == 2)
        return resp_add_int(out, counters_commands_total());
    if (arg_is(&argv[1], "COMMANDS-LIST") && argc == 2)
        return counters_commands_list(out);
    if (arg_is(&argv[1], "LUA") && argc == 3 &&
        (arg_is(&argv[2], "on") || arg_is(&argv[2], "off"))) {
        native_set_lua(arg_is(&argv[2], "on"));
        return resp_add_status(out, "OK");
    }
    if (arg_is(&argv[1], "NATIVE") && argc == 3 &&
        (arg_is(&argv[2], "on") || arg_is(&argv[2], "off"))) {
        native_set_natives(arg_is(&argv[2], "on"));
        return resp_add_status(out, "OK");
    }
    arg_copy(sub, sizeof(sub), &argv[1]);
    snprintf(msg, sizeof(msg),
             "ERR relock-proxy: unknown subcommand or wrong number of "
             "arguments for '%s' (REFUSED, REFUSED-LIST, RESET, FAULT, REPLIES, "
             "COMMANDS, COMMANDS-LIST, LUA on|off, NATIVE on|off)", sub);
    return resp_add_error(out, msg);
}
