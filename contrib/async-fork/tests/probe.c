/* probe.c -- `forktest probe PORT KIND DUR_MS HOG_CPU`: one round of the
 * Redis latency experiment in the guest (guest/redis-e2e experiment).
 *
 * A thread sends PING to redis-server on 127.0.0.1:PORT over its own
 * connection, one at a time, and records every round trip with its start
 * time. After SETTLE_MS (the round's baseline) the main thread starts the
 * event at t0 on a second connection:
 *   save  BGSAVE, then INFO persistence every POLL_MS until the save ended;
 *   rewrite  BGREWRITEAOF (the server has appendonly yes), then the same
 *         polling until the rewrite ended;
 *   sync  a replica's full sync: REPLICAOF 127.0.0.1 PORT sent to the
 *         server on PROBE_REPLICA_PORT (started empty), then its INFO
 *         replication every POLL_MS until its link is up; the server on
 *         PORT must have made one more full sync (INFO stats sync_full);
 *   idle  nothing for DUR_MS (the no-save control of the same load), with
 *         the same INFO polling;
 *   hog   a CPU-bound process pinned to HOG_CPU (where the server's BGSAVE
 *         child runs, bgsave-cpulist) spinning for DUR_MS, same polling:
 *         CPU contention without fork or copy-on-write.
 * The pings go on for AFTER_MS, then it prints
 *   AFORK-PROBE kind=K dur_ms=D fork_usec=F worst1s_ms=X worst_ms=Y
 *       worst_at_ms=A base_ms=B p99_ms=P pings=N
 * worst1s: the worst round trip in flight within 1 s after t0; worst: the
 * worst in flight between t0 and the end of the event (worst_at: its start,
 * relative to t0); base: the worst of the settle period; fork_usec: Redis's
 * latest_fork_usec (save, rewrite and sync, else 0). With PROBE_SAMPLES=FILE every round
 * trip is written there as "ms_since_t0 rtt_ms". Exit 0 when the event ran
 * (a save must report rdb_last_bgsave_status:ok, a rewrite
 * aof_last_bgrewrite_status:ok). */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_MAX_SAMPLES (1 << 21)
#define SETTLE_MS 1000
#define AFTER_MS 300
#define POLL_MS 50

static struct {
    int fd;
    volatile int stop;
    size_t n;
    double *start, *rtt;     /* seconds since boot; ms */
} pings;

static void sleep_ms(double ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6) };
    nanosleep(&ts, NULL);
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

/* Send a command, read one RESP reply (simple line or bulk string) into
 * buf; 0 on success. */
static int command(int fd, const char *cmd, char *buf, size_t size)
{
    size_t got = 0, want = 0;

    if (write(fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
        return -1;
    for (;;) {
        ssize_t n = read(fd, buf + got, size - 1 - got);
        char *eol;
        if (n <= 0)
            return -1;
        got += (size_t)n;
        buf[got] = '\0';
        if (!want && (eol = strstr(buf, "\r\n")) != NULL) {
            if (buf[0] != '$')
                return buf[0] == '-' ? -1 : 0;
            want = (size_t)(eol - buf) + 2 + (size_t)atol(buf + 1) + 2;
        }
        if (want && got >= want)
            return 0;
        if (got >= size - 1)
            return -1;
    }
}

/* A numeric field of an INFO reply, -1 when absent. */
static long long info_field(const char *info, const char *name)
{
    char key[96];
    const char *p;

    snprintf(key, sizeof(key), "\n%s:", name);
    p = strstr(info, key);
    return p ? atoll(p + strlen(key)) : -1;
}

static void *ping_loop(void *arg)
{
    char buf[16];
    (void)arg;
    while (!pings.stop && pings.n < PROBE_MAX_SAMPLES) {
        double t0 = now_seconds();
        if (command(pings.fd, "PING\r\n", buf, sizeof(buf)) != 0 || strcmp(buf, "+PONG\r\n") != 0) {
            fprintf(stderr, "probe: PING failed\n");
            exit(1);
        }
        pings.start[pings.n] = t0;
        pings.rtt[pings.n] = (now_seconds() - t0) * 1000.0;
        pings.n++;
    }
    return NULL;
}

/* cpu < 0: not pinned (the experiment's user layout). */
static void pin_to(int cpu)
{
    cpu_set_t set;

    if (cpu < 0)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

/* A CPU-bound child on cpu for ms milliseconds. */
static pid_t start_hog(int cpu, double ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        volatile unsigned long spin = 0;
        double end;
        if (cpu >= 0)
            pin_to(cpu);
        end = now_seconds() + ms / 1000.0;
        while (now_seconds() < end)
            spin++;
        _exit(0);
    }
    return pid;
}

enum event { EV_SAVE, EV_REWRITE, EV_SYNC, EV_IDLE, EV_HOG };

static int event_kind(const char *kind)
{
    static const char *const names[] = { "save", "rewrite", "sync", "idle", "hog" };
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (strcmp(kind, names[i]) == 0)
            return i;
    return -1;
}

/* Poll until the event is over: the save or the rewrite ended, the
 * replica's link (replica_fd) is up, or, for a control, until end. Returns
 * 0, or -1 when the event failed. */
static int wait_event(int fd, int replica_fd, int ev, double end)
{
    static char info[65536];
    for (;;) {
        sleep_ms(POLL_MS);
        if (ev == EV_SYNC) {
            if (command(replica_fd, "INFO replication\r\n", info, sizeof(info)) != 0)
                return -1;
            if (strstr(info, "master_link_status:up"))
                return 0;
            continue;
        }
        if (command(fd, "INFO persistence\r\n", info, sizeof(info)) != 0)
            return -1;
        if (ev == EV_SAVE && info_field(info, "rdb_bgsave_in_progress") == 0)
            return strstr(info, "rdb_last_bgsave_status:ok") ? 0 : -1;
        if (ev == EV_REWRITE && info_field(info, "aof_rewrite_in_progress") == 0 &&
            info_field(info, "aof_rewrite_scheduled") == 0)
            return strstr(info, "aof_last_bgrewrite_status:ok") ? 0 : -1;
        if (ev >= EV_IDLE && now_seconds() >= end)
            return 0;
    }
}

/* A field of INFO stats of the server on fd, -1 when unknown. */
static long long stats_field(int fd, const char *name)
{
    static char info[65536];
    if (command(fd, "INFO stats\r\n", info, sizeof(info)) != 0)
        return -1;
    return info_field(info, name);
}

/* Start the event at t0 on fd (replica_fd: the replica's connection for a
 * sync, port the server's). 0 when it started. */
static int start_event(int fd, int replica_fd, int ev, int port)
{
    static char reply[4096];
    char cmd[64];
    switch (ev) {
    case EV_SAVE:
        return command(fd, "BGSAVE\r\n", reply, sizeof(reply));
    case EV_REWRITE:
        return command(fd, "BGREWRITEAOF\r\n", reply, sizeof(reply));
    case EV_SYNC:
        snprintf(cmd, sizeof(cmd), "REPLICAOF 127.0.0.1 %d\r\n", port);
        return command(replica_fd, cmd, reply, sizeof(reply));
    default:
        return 0;
    }
}

/* Worst round trip in flight in [from, to] (seconds); its start in *at. */
static double worst_between(double from, double to, double *at)
{
    double worst = 0;
    for (size_t i = 0; i < pings.n; i++) {
        double s = pings.start[i], e = s + pings.rtt[i] / 1000.0;
        if (e >= from && s <= to && pings.rtt[i] > worst) {
            worst = pings.rtt[i];
            if (at)
                *at = s;
        }
    }
    return worst;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 99th percentile of the round trips started in [from, to]. */
static double p99_between(double from, double to)
{
    double *v = malloc(pings.n * sizeof(*v)), p = 0;
    size_t k = 0;
    for (size_t i = 0; v && i < pings.n; i++)
        if (pings.start[i] >= from && pings.start[i] <= to)
            v[k++] = pings.rtt[i];
    if (k) {
        qsort(v, k, sizeof(*v), cmp_double);
        p = v[(size_t)((double)(k - 1) * 0.99)];
    }
    free(v);
    return p;
}

static void write_samples(const char *path, double t0)
{
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        return;
    for (size_t i = 0; i < pings.n; i++)
        fprintf(f, "%.3f %.3f\n", (pings.start[i] - t0) * 1000.0, pings.rtt[i]);
    fclose(f);
}

int probe_main(int argc, char **argv)
{
    pthread_t thread;
    const char *kind, *replica = getenv("PROBE_REPLICA_PORT");
    double dur_ms, t0, t_end, at = 0;
    long long fork_usec = 0, syncs = 0;
    int port, hog_cpu, cmd_fd, replica_fd = -1, ev, rc;
    pid_t hog = -1;

    if (argc != 6)
        return 2;
    port = atoi(argv[2]);
    kind = argv[3];
    dur_ms = atof(argv[4]);
    hog_cpu = atoi(argv[5]);
    ev = event_kind(kind);
    if (ev < 0)
        return 2;
    if (ev == EV_SYNC && !replica) {
        fprintf(stderr, "probe: sync needs PROBE_REPLICA_PORT\n");
        return 2;
    }
    if (ev == EV_SYNC && (replica_fd = probe_connect(atoi(replica))) < 0)
        return 1;
    pings.fd = probe_connect(port);
    cmd_fd = probe_connect(port);
    pings.start = malloc(PROBE_MAX_SAMPLES * sizeof(double));
    pings.rtt = malloc(PROBE_MAX_SAMPLES * sizeof(double));
    if (pings.fd < 0 || cmd_fd < 0 || !pings.start || !pings.rtt)
        return 1;
    if (ev == EV_SYNC)
        syncs = stats_field(cmd_fd, "sync_full");
    pthread_create(&thread, NULL, ping_loop, NULL);
    sleep_ms(SETTLE_MS);
    t0 = now_seconds();
    if (start_event(cmd_fd, replica_fd, ev, port) != 0) {
        fprintf(stderr, "probe: the %s was refused\n", kind);
        return 1;
    }
    if (ev == EV_HOG)
        hog = start_hog(hog_cpu, dur_ms);
    rc = wait_event(cmd_fd, replica_fd, ev, t0 + dur_ms / 1000.0);
    t_end = now_seconds();
    if (hog > 0)
        waitpid(hog, NULL, 0);
    if (ev < EV_IDLE)
        fork_usec = stats_field(cmd_fd, "latest_fork_usec");
    if (rc == 0 && ev == EV_SYNC && stats_field(cmd_fd, "sync_full") != syncs + 1) {
        fprintf(stderr, "probe: the replica's sync was not one full sync of port %d\n", port);
        rc = -1;
    }
    sleep_ms(AFTER_MS);
    pings.stop = 1;
    pthread_join(thread, NULL);
    if (rc != 0) {
        fprintf(stderr, "probe: the %s did not end well\n", kind);
        return 1;
    }
    double worst = worst_between(t0, t_end, &at);
    printf("AFORK-PROBE kind=%s dur_ms=%.0f fork_usec=%lld worst1s_ms=%.2f worst_ms=%.2f "
           "worst_at_ms=%.0f base_ms=%.2f p99_ms=%.2f pings=%zu\n",
           kind, (t_end - t0) * 1000.0, fork_usec, worst_between(t0, t0 + 1.0, NULL), worst,
           (at - t0) * 1000.0, worst_between(t0 - SETTLE_MS / 1000.0, t0, NULL),
           p99_between(t0, t_end), pings.n);
    write_samples(getenv("PROBE_SAMPLES"), t0);
    return 0;
}
