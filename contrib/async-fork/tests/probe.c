/* probe.c -- `forktest probe PORT`: a latency probe for the Redis steps in
 * the guest. It sends PING to redis-server on 127.0.0.1:PORT over one
 * connection, one at a time, until SIGTERM or SIGINT, then prints
 *   AFORK-PROBE pings=N max_ms=X p99_ms=Y over10ms=K
 * (max and 99th percentile round trip, and how many took over 10 ms). It
 * is the client whose worst latency the fork of a BGSAVE shows. */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROBE_MAX_SAMPLES (1 << 22)

static volatile sig_atomic_t probe_stop;

static void on_stop(int sig)
{
    (void)sig;
    probe_stop = 1;
}

static int probe_connect(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("probe: connect");
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* One PING round trip; 0 when +PONG came back. */
static int probe_ping(int fd)
{
    char buf[16];
    size_t got = 0;

    if (write(fd, "PING\r\n", 6) != 6)
        return -1;
    while (got < 7) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return memcmp(buf, "+PONG\r\n", 7) == 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int probe_main(int argc, char **argv)
{
    double *ms, max = 0;
    size_t n = 0, over10 = 0;
    int fd;

    if (argc != 3)
        return 2;
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    fd = probe_connect(atoi(argv[2]));
    ms = malloc(PROBE_MAX_SAMPLES * sizeof(*ms));
    if (fd < 0 || !ms)
        return 1;
    while (!probe_stop && n < PROBE_MAX_SAMPLES) {
        double t0 = now_seconds();
        if (probe_ping(fd) != 0) {
            fprintf(stderr, "probe: PING failed\n");
            return 1;
        }
        ms[n] = (now_seconds() - t0) * 1000.0;
        if (ms[n] > max)
            max = ms[n];
        over10 += ms[n] > 10.0;
        n++;
    }
    if (n == 0)
        return 1;
    qsort(ms, n, sizeof(*ms), cmp_double);
    printf("AFORK-PROBE pings=%zu max_ms=%.2f p99_ms=%.2f over10ms=%zu\n", n, max,
           ms[(size_t)((double)(n - 1) * 0.99)], over10);
    return 0;
}
