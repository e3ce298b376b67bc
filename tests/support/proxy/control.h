/*
 * control: the RELOCK-PROXY command, answered by the proxy itself on
 * every personality, never forwarded, never counted as a refusal and
 * never subject to faults.
 *
 *   RELOCK-PROXY REFUSED                 -> :total
 *   RELOCK-PROXY REFUSED-LIST            -> *n "NAME count" ...
 *   RELOCK-PROXY RESET                   -> +OK (counters to zero)
 *   RELOCK-PROXY FAULT name value [...]  -> +OK (delay-ms, delay-us,
 *                                                close-before-reply,
 *                                                close-after-reply, seed)
 *   RELOCK-PROXY FAULT off               -> +OK
 */
#ifndef RELOCK_PROXY_CONTROL_H
#define RELOCK_PROXY_CONTROL_H

#include <stddef.h>

#include "buf.h"
#include "resp.h"

/* True when argv is a control command. */
int control_match(const proxy_arg *argv, size_t argc);

/* Run it and append its reply to out.  Returns 0 or -1 (out full). */
int control_run(const proxy_arg *argv, size_t argc, pbuf *out);

#endif
