/* relock clients and a shared private server for the integration tests. */
#ifndef RELOCK_TESTCLIENT_H
#define RELOCK_TESTCLIENT_H

#include "relock.h"
#include "testsrv.h"

/* The server started by tu_setup_server (cmocka group setup). */
extern testsrv tu_srv;
int tu_setup_server(void **state);
int tu_teardown_server(void **state);

/*
 * A client of the server on port in the given mode, with further settings
 * as name, value pairs (NULL-terminated list, or NULL).  Fails the test
 * with the library's message when it cannot connect.
 */
relock_client *tu_client(int port, const char *mode, const char *const *settings);

#endif
