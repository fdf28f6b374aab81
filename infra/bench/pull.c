/* The pull client of `make bench-views` in C: the same open loop and figures as
 * infra/bench/pull.py, at a tenth of its CPU a request. On a 2-core machine the client shares
 * the cores it measures, and the Python client's own wait for a core was most of the pulls' tail.
 *
 * Request i is due at start + i / rate whatever the answers before it did; due requests wait in
 * order for one of --connections keep-alive HTTP/1.1 connections (that wait counts in their
 * latency), one request at a time on each. Keys: drawn at random from --ids (a JSON list of
 * integers). One thread, epoll. Prints the figures as one JSON line.
 *
 * Build: cc -O2 -o pull pull.c (infra/bench/views.py does it on first use). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 64
#define BUFFER 65536

struct connection {
    int fd;
    int busy;
    long request; /* the request in flight */
    size_t have;
    char buf[BUFFER];
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "pull: %s: %s\n", what, strerror(errno));
    exit(2);
}

static long *read_ids(const char *path, long *count) {
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (fread(text, 1, (size_t)size, f) != (size_t)size) die(path);
    text[size] = 0;
    fclose(f);
    long n = 0, cap = 1024;
    long *ids = malloc(sizeof(long) * (size_t)cap);
    for (char *p = text; *p;) {
        if (*p == '-' || (*p >= '0' && *p <= '9')) {
            char *end;
            long v = strtol(p, &end, 10);
            if (n == cap) ids = realloc(ids, sizeof(long) * (size_t)(cap *= 2));
            ids[n++] = v;
            p = end;
        } else {
            p++;
        }
    }
    free(text);
    if (n == 0) {
        fprintf(stderr, "pull: %s holds no ids\n", path);
        exit(2);
    }
    *count = n;
    return ids;
}

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) die("connect"); /* before a first write */
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) die("fcntl");
    return fd;
}

/* A whole answer in c->buf: its length, or 0 while it is not complete. */
static size_t answer_length(struct connection *c, int *status) {
    c->buf[c->have] = 0;
    char *end = strstr(c->buf, "\r\n\r\n");
    if (!end) return 0;
    size_t head = (size_t)(end - c->buf) + 4;
    long length = 0;
    for (char *line = strstr(c->buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "content-length:", 15) == 0) length = strtol(line + 17, NULL, 10);
    }
    if (c->have < head + (size_t)length) return 0;
    *status = (int)strtol(c->buf + 9, NULL, 10); /* "HTTP/1.1 200 OK" */
    return head + (size_t)length;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int port = 0, connections = 8;
    double rate = 1000, duration = 30;
    const char *ids_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: pull --port PORT --ids FILE [--rate 1000] [--duration 30] [--connections 8]\n"
                   "Pull queries against the views query service at a fixed rate (open loop);\n"
                   "prints the figures as one JSON line.\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "pull: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--port") == 0) port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ids") == 0) ids_path = argv[++i];
        else if (strcmp(argv[i], "--rate") == 0) rate = atof(argv[++i]);
        else if (strcmp(argv[i], "--duration") == 0) duration = atof(argv[++i]);
        else if (strcmp(argv[i], "--connections") == 0) connections = atoi(argv[++i]);
        else {
            fprintf(stderr, "pull: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (port <= 0 || !ids_path || rate <= 0 || duration <= 0 || connections < 1 || connections > MAX_CONNECTIONS) {
        fprintf(stderr, "pull: needs --port and --ids, a positive --rate and --duration, 1 to %d --connections\n",
                MAX_CONNECTIONS);
        return 2;
    }
    long id_count;
    long *ids = read_ids(ids_path, &id_count);
    long count = (long)(rate * duration);
    if (count < 1) {
        fprintf(stderr, "pull: --rate times --duration is less than one request\n");
        return 2;
    }
    double *latency = calloc((size_t)count, sizeof(double));
    double *due = calloc((size_t)count, sizeof(double));
    long *key = malloc(sizeof(long) * (size_t)count);
    srandom(11);
    for (long i = 0; i < count; i++) key[i] = ids[random() % id_count];

    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    static struct connection conn[MAX_CONNECTIONS];
    for (int i = 0; i < connections; i++) {
        conn[i].fd = connect_to(port);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, conn[i].fd, &ev) < 0) die("epoll_ctl");
    }
    struct timeval wall;
    gettimeofday(&wall, NULL);
    double start = now_s();
    long next_due = 0, next_sent = 0, answered = 0, statuses[600] = {0}, other_status = 0;
    char request[160];
    int turn = 0;
    while (answered < count) {
        double now = now_s();
        while (next_due < count && start + (double)next_due / rate <= now) {
            due[next_due] = start + (double)next_due / rate;
            next_due++;
        }
        /* round robin, as the Python client's connections take turns: none sits idle long
         * enough for the server's keep-alive timeout */
        for (int tried = 0; tried < connections && next_sent < next_due; tried++) {
            struct connection *c = &conn[turn];
            turn = (turn + 1) % connections;
            if (c->busy) continue;
            int n = snprintf(request, sizeof request, "GET /views/customer_ratings/%ld HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                             key[next_sent]);
            if (write(c->fd, request, (size_t)n) != n) die("write");
            c->busy = 1, c->request = next_sent++, c->have = 0;
        }
        /* Sleep until the next request is due; while due ones wait for a connection (every
         * connection is busy then) or all are sent, until an answer comes. */
        struct timespec wait = {1, 0};
        if (next_due < count && next_sent == next_due) {
            double ahead = start + (double)next_due / rate - now_s();
            if (ahead < 0) ahead = 0;
            wait.tv_sec = (time_t)ahead;
            wait.tv_nsec = (long)((ahead - (double)wait.tv_sec) * 1e9);
        }
        struct epoll_event events[MAX_CONNECTIONS];
        int ready = epoll_pwait2(ep, events, MAX_CONNECTIONS, &wait, NULL);
        if (ready < 0 && errno != EINTR) die("epoll_pwait2");
        for (int e = 0; e < ready; e++) {
            struct connection *c = &conn[events[e].data.u32];
            if (c->have == BUFFER - 1) {
                fprintf(stderr, "pull: an answer longer than %d bytes\n", BUFFER - 1);
                return 2;
            }
            ssize_t got = read(c->fd, c->buf + c->have, BUFFER - 1 - c->have);
            if (got == 0 && !c->busy) { /* an idle connection the server closed: open another */
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = connect_to(port);
                struct epoll_event ev = {.events = EPOLLIN, .data.u32 = events[e].data.u32};
                if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
                continue;
            }
            if (got == 0) {
                fprintf(stderr, "pull: the server closed a connection with a request in flight\n");
                return 2;
            }
            if (got < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                die("read");
            }
            c->have += (size_t)got;
            int status;
            if (!c->busy || answer_length(c, &status) == 0) continue;
            latency[c->request] = now_s() - due[c->request];
            if (status >= 0 && status < 600) statuses[status]++;
            else other_status++;
            c->busy = 0, answered++;
        }
    }
    double elapsed = now_s() - start;

    /* worst_seconds: the seconds (by when a request was due) whose slowest request was slowest */
    long seconds = (long)duration + 1;
    double *worst = calloc((size_t)seconds, sizeof(double));
    long *over = calloc((size_t)seconds, sizeof(long));
    for (long i = 0; i < count; i++) {
        long s = (long)(due[i] - start);
        if (s >= seconds) s = seconds - 1;
        if (latency[i] > worst[s]) worst[s] = latency[i];
        over[s] += latency[i] > 0.02;
    }
    qsort(latency, (size_t)count, sizeof(double), by_value);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 +
                 (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec / 1e6;
    double waited = 0;
    FILE *sched = fopen("/proc/self/schedstat", "r");
    if (sched) {
        unsigned long long run_ns, wait_ns;
        if (fscanf(sched, "%llu %llu", &run_ns, &wait_ns) == 2) waited = (double)wait_ns / 1e9;
        fclose(sched);
    }
    long p50 = count / 2, p99 = (long)(0.99 * (double)count);
    if (p99 >= count) p99 = count - 1;
    printf("{\"target_per_s\": %.1f, \"client\": \"c\", \"started_unix\": %.3f, \"requests\": %ld, \"achieved_per_s\": %.0f, "
           "\"statuses\": {",
           rate, (double)wall.tv_sec + (double)wall.tv_usec / 1e6, count, (double)count / elapsed);
    const char *comma = "";
    for (int s = 0; s < 600; s++) {
        if (statuses[s]) printf("%s\"%d\": %ld", comma, s, statuses[s]), comma = ", ";
    }
    if (other_status) printf("%s\"other\": %ld", comma, other_status);
    printf("}, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f, \"worst_seconds\": [", latency[p50] * 1000,
           latency[p99] * 1000, latency[count - 1] * 1000);
    for (int top = 0; top < 5; top++) {
        long best = -1;
        for (long s = 0; s < seconds; s++) {
            if (worst[s] > 0 && (best < 0 || worst[s] > worst[best])) best = s;
        }
        if (best < 0) break;
        printf("%s{\"second\": %ld, \"max_ms\": %.1f, \"over_20_ms\": %ld}", top ? ", " : "", best, worst[best] * 1000,
               over[best]);
        worst[best] = 0;
    }
    printf("], \"cpu_s\": %.2f, \"runqueue_wait_s\": %.2f}\n", cpu, waited);
    return 0;
}
