/* forwarder: see forwarder.h. */
#include "forwarder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

static volatile sig_atomic_t reset_asked;

static void on_usr1(int sig)
{
    (void)sig;
    reset_asked = 1;
}

#define MAX_PAIRS 32

static int connect_upstream(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void forwarder_main(int lfd, int upstream_port, long reset_pause_us)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: poll() returns at once */
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* the forwarder itself must live on */
    int cli[MAX_PAIRS], up[MAX_PAIRS], n = 0;
    for (;;) {
        if (reset_asked) {
            reset_asked = 0;
            for (int i = 0; i < n; i++)
                shutdown(cli[i], SHUT_WR);
            if (reset_pause_us > 0)
                usleep((useconds_t)reset_pause_us);
            struct linger lg = {1, 0};
            for (int i = 0; i < n; i++) {
                setsockopt(cli[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                close(cli[i]);
                close(up[i]);
            }
            n = 0;
        }
        struct pollfd p[1 + 2 * MAX_PAIRS];
        p[0].fd = lfd;
        p[0].events = POLLIN;
        for (int i = 0; i < n; i++) {
            p[1 + 2 * i].fd = cli[i];
            p[2 + 2 * i].fd = up[i];
            p[1 + 2 * i].events = p[2 + 2 * i].events = POLLIN;
        }
        if (poll(p, (nfds_t)(1 + 2 * n), 100) <= 0)
            continue;
        for (int i = n - 1; i >= 0; i--) {
            for (int side = 0; side < 2; side++) {
                if (!(p[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                int from = side ? up[i] : cli[i], to = side ? cli[i] : up[i];
                char buf[65536];
                ssize_t got = read(from, buf, sizeof buf);
                int ok = got > 0;
                for (ssize_t off = 0; ok && off < got;) {
                    ssize_t w = write(to, buf + off, (size_t)(got - off));
                    ok = w > 0;
                    off += ok ? w : 0;
                }
                if (!ok) {
                    close(cli[i]);
                    close(up[i]);
                    cli[i] = cli[n - 1];
                    up[i] = up[n - 1];
                    n--;
                    break;
                }
            }
        }
        if ((p[0].revents & POLLIN) && n < MAX_PAIRS) {
            int c = accept(lfd, NULL, NULL);
            int u = c >= 0 ? connect_upstream(upstream_port) : -1;
            if (u >= 0) {
                cli[n] = c;
                up[n++] = u;
            } else if (c >= 0) {
                close(c);
            }
        }
    }
}

int forwarder_listen(int *port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 16), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return lfd;
}

pid_t forwarder_start(int lfd, int upstream_port, long reset_pause_us)
{
    pid_t pid = fork();
    if (pid == 0) {
        /* Ends with the program under test, whatever kills it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        forwarder_main(lfd, upstream_port, reset_pause_us);
        _exit(0);
    }
    return pid;
}
