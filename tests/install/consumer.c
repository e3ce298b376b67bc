/*
 * A program outside the relock tree, built against an installed relock
 * (tests/install/test_install.sh): it connects to nothing, and prints the
 * library's version and one status message.  Both public headers must
 * compile without hiredis on the include path.
 */
#include <stdio.h>
#include <string.h>

#include <relock.h>
#include <relock_async.h>

int main(void)
{
    /* The header and the library must be of one version. */
    if (strcmp(relock_version(), RELOCK_VERSION_STRING) != 0) {
        fprintf(stderr, "consumer: header %s, library %s\n", RELOCK_VERSION_STRING,
                relock_version());
        return 1;
    }
    printf("relock %s: %s: %s\n", relock_version(), relock_status_name(RELOCK_LOST),
           relock_strerror(RELOCK_LOST));
    return 0;
}
