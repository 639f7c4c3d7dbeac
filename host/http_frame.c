/*
 * http_frame.c — the request-framing guard of obleth.http's server.
 *
 * evhttp reads a header section leniently: a line ending in a bare LF, a
 * folded (obs-fold) line, a NUL inside a value (the value ends there), a
 * second Content-Length (the first wins), "+15" read as 15, a body on a GET
 * (read as the next request). Each lets a request hidden in a body run
 * (request smuggling, RFC 9112 §6.3 and §11.2).
 *
 * The guard watches the bytes of each client connection as the socket adds
 * them to the input buffer, before evhttp reads them (an evbuffer callback on
 * the connection's socket bufferevent, made by obleth_http_frame_bev). It
 * checks each header line when its LF arrives and follows the body's framing
 * (Content-Length or chunked) to know where the next header section starts.
 * evhttp reads whole lines only, so a refused line is still unread: the guard
 * cuts the input there and puts a marker in its place — a whole marker
 * request (REFUSED_PREFIX + code) when evhttp has not read the section's
 * request line yet, else a marker header (REFUSED_HEADER: code) that ends the
 * section. obleth_http_frame_refused answers the marked request with 400 and
 * "Connection: close"; nothing after the marker is read. A chunked body whose
 * framing breaks closes the connection (no answer could be framed).
 *
 * The connection's close callback belongs to the guard (it frees its state);
 * http_server.c sets its own through obleth_http_frame_set_closecb.
 *
 * The guard also keeps the server's connection limits (obleth_http_conns): it
 * counts the connections, knows which ones wait for a header section (a new
 * connection, or a kept-alive one whose answers are all complete) and closes
 * them at the header or idle deadline; at the cap, or when accept() finds no
 * descriptor, it closes the one that has waited longest (not one just accepted
 * and not read yet), else refuses the new one with a minimal 503. At most a
 * quarter of the cap is accepted per loop turn, so new connections are read
 * before the next batch may need their room. A connection's input is read at most READ_HIGH bytes
 * ahead of what evhttp has parsed, and its pipelined requests run at a lower
 * event priority than new input (loop.c sets up three priorities), so a client
 * that pipelines hundreds of requests cannot delay other clients by a round.
 */
#define _GNU_SOURCE
#include "http_internal.h"
#include "util.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define REFUSED_PREFIX "/.obleth-refused/"
#define REFUSED_HEADER "X-Obleth-Refused"
#define HEAD_MAX (72 * 1024) /* a header section (evhttp's own cap is 64 KiB of headers) */
#define LINE_MAX_ 8192       /* a chunk-size or trailer line */
#define BUCKETS 4096         /* connection -> guard map */
#define READ_HIGH (128 * 1024) /* bytes read ahead of evhttp's parser (a header section fits) */
#define PRIO_PIPELINED 2     /* the event priority of requests already buffered (loop.c: 3 levels) */
#define PRIO_NORMAL 1

enum { S_HEAD, S_BODY, S_CHUNK_LINE, S_CHUNK_DATA, S_CHUNK_END, S_TRAILER, S_DEAD };

typedef struct frame {
    int state;
    uint64_t left;        /* bytes left of a body or a chunk */
    uint64_t added;       /* bytes the socket added to the input buffer so far */
    uint64_t sec_start;   /* S_HEAD: stream offset of the section's first byte */
    uint64_t line_start;  /* stream offset of the current line's first byte */
    int lineno;           /* S_HEAD: lines of the section so far (0 = request line) */
    int has_body;         /* the method may carry a body (POST, PUT, PATCH) */
    int te;               /* Transfer-Encoding: chunked seen */
    int64_t cl;           /* Content-Length seen (-1: none) */
    char *line;           /* the current line so far */
    size_t linelen, linecap;
    int busy;             /* rewriting the input: ignore our own changes */
    struct bufferevent *bev;
    struct evbuffer_cb_entry *cbent;
    struct evhttp_connection *evcon; /* once known */
    void (*closecb)(struct evhttp_connection *, void *);
    void *closearg;
    struct frame *next; /* in its map bucket */
    obleth_http_conns *conns;    /* the server's limits (NULL in the fuzzer) */
    uint64_t sections, answered; /* header sections complete; answers complete */
    int waiting, idle;           /* in conns' wait list; with no byte of a next request */
    int seen;                    /* its input has been read at least once */
    unsigned long gen;           /* the batch of accepts it came in (conns->gen) */
    double wait_since;           /* when it began to wait */
    struct frame *wprev, *wnext;
    struct event *timer;         /* the header or idle deadline */
    struct event *adopt_ev;      /* until adopted: the callback that adopts it */
    struct frame *pnext, *pprev; /* until adopted: in conns->pending */
} frame;

obleth_http_conn_stats obleth_http_stats;

static void pending_remove(frame *f);

/* ---- connection limits ---------------------------------------------------------- */

static struct timeval tv_of(double s) {
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

static void wait_leave(frame *f) {
    if (!f->waiting) return;
    obleth_http_conns *c = f->conns;
    if (f->wprev) f->wprev->wnext = f->wnext; else c->wait_head = f->wnext;
    if (f->wnext) f->wnext->wprev = f->wprev; else c->wait_tail = f->wprev;
    f->wprev = f->wnext = NULL;
    f->waiting = 0;
    if (f->timer) evtimer_del(f->timer);
}

static void arm(frame *f) {
    double t = f->idle ? f->conns->idle_timeout : f->conns->header_timeout;
    if (f->timer && t > 0) {
        struct timeval tv = tv_of(t);
        evtimer_add(f->timer, &tv);
    }
}

/* The connection now waits for a header section (idle: no byte of it yet). */
static void wait_enter(frame *f, int idle) {
    if (!f->conns) return;
    wait_leave(f);
    obleth_http_conns *c = f->conns;
    f->wprev = c->wait_tail;
    f->wnext = NULL;
    if (c->wait_tail) c->wait_tail->wnext = f; else c->wait_head = f;
    c->wait_tail = f;
    f->waiting = 1;
    f->idle = idle;
    f->wait_since = obleth_mono();
    arm(f);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    frame *f = arg;
    if (!f->waiting || !f->evcon) return;
    if (f->idle) obleth_http_stats.idle_closes++;
    else obleth_http_stats.header_timeouts++;
    evhttp_connection_free(f->evcon); /* close_cb frees f */
}

/* Close the connection that has waited longest for a header section (not `except`). A
   connection whose input has not been read yet is passed over while it came in the current or
   the previous batch of accepts (and is younger than half a second): its whole request may be
   waiting in the socket; *protected_ says there was one. Looks at EVICT_SCAN connections at most. */
#define EVICT_SCAN 64
static int evict_oldest(obleth_http_conns *c, frame *except, int *protected_) {
    double now = obleth_mono();
    int n = 0;
    if (protected_) *protected_ = 0;
    for (frame *f = c->wait_head; f && n < EVICT_SCAN; f = f->wnext, n++) {
        if (f == except || !f->evcon) continue;
        if (!f->seen && f->gen + 2 > c->gen && now - f->wait_since < 0.5) {
            if (protected_) *protected_ = 1;
            continue;
        }
        obleth_http_stats.evicted++;
        c->episode_evicted++;
        evhttp_connection_free(f->evcon);
        return 1;
    }
    return 0;
}

/* Stop accepting for ms milliseconds (connections wait in the listen queue meanwhile). */
static void pause_accept(obleth_http_conns *c, long ms) {
    if (!c->lst || !c->resume) return;
    struct timeval tv = {ms / 1000, (suseconds_t)((ms % 1000) * 1000)};
    evconnlistener_disable(c->lst);
    evtimer_add(c->resume, &tv);
}

static const char REFUSAL_BODY[] =
    "{\"error\":{\"message\":\"the server holds as many connections as it takes; try again\","
    "\"type\":\"server_error\",\"param\":null,\"code\":\"too_many_connections\"}}";

/* A minimal 503 written straight to the socket (one try, never waiting). */
static void refuse_fd(int fd) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                      "Content-Length: %zu\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s",
                     sizeof REFUSAL_BODY - 1, REFUSAL_BODY);
    if (n > 0 && (size_t)n < sizeof msg) {
        ssize_t w = send(fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
    }
    obleth_http_stats.refused++;
}

/* Descriptors or the cap ran short: said once per episode, and once when it is over. */
static void episode_note(obleth_http_conns *c, const char *why, int err) {
    c->episode_at = obleth_mono();
    if (c->episode) return;
    c->episode = 1;
    c->episode_refused = c->episode_evicted = 0;
    obleth_log("warn", "http_connections_short", "reason=%s%s%s open=%d max_connections=%d", why,
               err ? " error=" : "", err ? strerror(err) : "", c->open, c->max_conns);
}

static void episode_check_end(obleth_http_conns *c) {
    if (!c->episode || obleth_mono() - c->episode_at < 1.0) return;
    c->episode = 0;
    obleth_log("info", "http_connections_recovered", "refused=%lu evicted=%lu open=%d", c->episode_refused,
               c->episode_evicted, c->open);
}

static void read_ahead(frame *f, uint64_t body);
static obleth_http_conns *g_conns; /* every server's limits: listener -> limits */

static obleth_http_conns *conns_of(struct evconnlistener *lst) {
    for (obleth_http_conns *c = g_conns; c; c = c->next)
        if (c->lst == lst) return c;
    return NULL;
}

static void resume_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    obleth_http_conns *c = arg;
    c->burst = 0;
    c->gen++;
    if (c->lst) evconnlistener_enable(c->lst);
}

/* accept() failed (libevent retries EAGAIN, EINTR, ECONNABORTED itself). Out of descriptors:
   close the connection waiting longest for its header; else use the reserve descriptor to take
   one connection off the queue with a 503; else stop accepting for 100 ms. Never a busy loop. */
static void accept_error_cb(struct evconnlistener *lst, void *arg) {
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    obleth_http_conns *c = conns_of(lst);
    obleth_http_stats.accept_errors++;
    if (!c) { evconnlistener_disable(lst); return; }
    episode_note(c, "accept_failed", err);
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        int young = 0;
        if (evict_oldest(c, NULL, &young)) return; /* a descriptor is free: accepted next turn */
        /* connections just accepted and not read yet: read them first, accept again soon */
        if (young) { pause_accept(c, 50); return; }
        if (c->reserve_fd >= 0) {
            close(c->reserve_fd);
            int fd = accept4(evconnlistener_get_fd(lst), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                refuse_fd(fd);
                c->episode_refused++;
                close(fd);
            }
            c->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd >= 0) return;
        }
    }
    pause_accept(c, 100);
}

int obleth_http_conns_init(obleth_http_conns *c, struct evconnlistener *lst) {
    c->lst = lst;
    struct rlimit rl;
    long room = c->max_conns;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur - 32 < room)
        room = (long)rl.rlim_cur - 32;
    c->burst_max = room / 4 > 8 ? (int)(room / 4) : 8;
    c->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    c->resume = evtimer_new(evconnlistener_get_base(lst), resume_cb, c);
    if (!c->resume) return -1;
    evconnlistener_set_error_cb(lst, accept_error_cb);
    c->next = g_conns;
    g_conns = c;
    return 0;
}

void obleth_http_conns_unlisten(obleth_http_conns *c) {
    if (c->resume) evtimer_del(c->resume);
    c->lst = NULL;
}

void obleth_http_conns_free(obleth_http_conns *c) {
    for (obleth_http_conns **pp = &g_conns; *pp; pp = &(*pp)->next)
        if (*pp == c) { *pp = c->next; break; }
    if (c->resume) { event_free(c->resume); c->resume = NULL; }
    if (c->reserve_fd >= 0) { close(c->reserve_fd); c->reserve_fd = -1; }
    /* connections still open (evhttp_free closes them all first) leave the list */
    while (c->wait_head) wait_leave(c->wait_head);
    /* connections accepted in the loop turn the server closed in: evhttp freed their
       bufferevent; their guard never started */
    while (c->pending) {
        frame *f = c->pending;
        pending_remove(f);
        event_free(f->adopt_ev);
        free(f);
    }
    c->lst = NULL;
}

static frame *g_map[BUCKETS];

static size_t bucket(const void *p) { return ((uintptr_t)p >> 4) % BUCKETS; }

static frame *find(struct evhttp_connection *c) {
    for (frame *f = g_map[bucket(c)]; f; f = f->next)
        if (f->evcon == c) return f;
    return NULL;
}

static void unmap(frame *f) {
    for (frame **pp = &g_map[bucket(f->evcon)]; *pp; pp = &(*pp)->next)
        if (*pp == f) { *pp = f->next; return; }
}

static const struct { const char *code, *message; } REFUSALS[] = {
    {"bad_content_length", "Content-Length must be digits only, given once (or twice the same), not with "
                           "Transfer-Encoding, and only on POST, PUT and PATCH"},
    {"bad_transfer_encoding", "the only Transfer-Encoding accepted is chunked, given once"},
    {"folded_header", "a header line starts with a space or a tab (obs-fold is not accepted)"},
    {"bare_lf", "a line of the header section ends in LF without CR"},
    {"bad_header", "a header line is malformed (no name, a space before the colon, a NUL or a lone CR)"},
    {"headers_too_large", "the header section is larger than 72 KiB"},
    {"bad_target", "the request target has a space, a control character or a non-ASCII byte"},
    {NULL, NULL}};

/* Out of memory is fatal (CONVENTIONS.md). */
static void oom(void) {
    fputs("obleth: out of memory\n", stderr);
    abort();
}

static int ieq(const char *a, size_t n, const char *lit) {
    return strlen(lit) == n && strncasecmp(a, lit, n) == 0;
}

/* A complete line of a header section (f->line, ending in LF). NULL, or a refusal code;
   at the section's empty line, sets the body's state. */
static const char *head_line(frame *f) {
    const char *p = f->line;
    size_t n = f->linelen;
    /* in the request line, a NUL or a lone CR is a bad target (as the server says of control bytes) */
    const char *bad = f->lineno == 0 ? "bad_target" : "bad_header";
    if (memchr(p, 0, n)) return bad;
    if (n < 2 || p[n - 2] != '\r') return "bare_lf";
    size_t len = n - 2;
    if (memchr(p, '\r', len)) return bad;
    if (f->lineno == 0) {
        const char *sp = memchr(p, ' ', len);
        size_t ml = sp ? (size_t)(sp - p) : len;
        f->has_body = ieq(p, ml, "POST") || ieq(p, ml, "PUT") || ieq(p, ml, "PATCH");
        f->te = 0;
        f->cl = -1;
    } else if (len == 0) { /* the section ends: where does the next one start? */
        if (f->te && f->cl >= 0) return "bad_content_length";
        if (!f->has_body && (f->te || f->cl > 0)) return "bad_content_length";
        if (f->te) f->state = S_CHUNK_LINE;
        else if (f->cl > 0) { f->state = S_BODY; f->left = (uint64_t)f->cl; read_ahead(f, f->left); }
        f->lineno = -1; /* the next line starts a new section */
    } else {
        if (*p == ' ' || *p == '\t') return "folded_header";
        const char *colon = memchr(p, ':', len);
        if (!colon || colon == p || colon[-1] == ' ' || colon[-1] == '\t') return "bad_header";
        const char *v = colon + 1, *ve = p + len;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        size_t nl = (size_t)(colon - p), vl = (size_t)(ve - v);
        if (ieq(p, nl, "Content-Length")) {
            if (vl == 0 || vl > 18) return "bad_content_length";
            int64_t x = 0;
            for (size_t i = 0; i < vl; i++) {
                if (v[i] < '0' || v[i] > '9') return "bad_content_length";
                x = x * 10 + (v[i] - '0');
            }
            if (f->cl >= 0 && x != f->cl) return "bad_content_length";
            f->cl = x;
        } else if (ieq(p, nl, "Transfer-Encoding")) {
            if (f->te || !ieq(v, vl, "chunked")) return "bad_transfer_encoding";
            f->te = 1;
        }
    }
    return NULL;
}

/* A body's framing broke after its headers went on: close the connection. */
static void kill_conn(frame *f) {
    f->state = S_DEAD;
    evutil_socket_t fd = bufferevent_getfd(f->bev);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

/* A complete line of a chunked body (f->line, ending in LF). */
static void chunk_line(frame *f) {
    size_t n = f->linelen;
    if (n < 2 || f->line[n - 2] != '\r' || memchr(f->line, 0, n)) { kill_conn(f); return; }
    n -= 2;
    if (f->state == S_CHUNK_END) {
        if (n != 0) kill_conn(f); else f->state = S_CHUNK_LINE;
    } else if (f->state == S_TRAILER) {
        if (n == 0) { f->state = S_HEAD; f->lineno = -1; }
    } else { /* S_CHUNK_LINE: hex size, then ";ext" */
        uint64_t size = 0;
        size_t i = 0;
        for (; i < n && i < 16; i++) {
            char c = f->line[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) break;
            size = size * 16 + (uint64_t)d;
        }
        if (i == 0 || i >= 16 || (i < n && f->line[i] != ';' && f->line[i] != ' ' && f->line[i] != '\t')) {
            kill_conn(f);
            return;
        }
        if (size == 0) f->state = S_TRAILER;
        else { f->left = size; f->state = S_CHUNK_DATA; read_ahead(f, size); }
    }
}

/* evhttp takes a Content-Length body, or a chunk, only once it is whole in the input buffer: the
   read-ahead must cover it, else a body over READ_HIGH is never read (the client waits forever).
   Up to the server's body limit (a larger one is answered 413 from its Content-Length); back to
   READ_HIGH when the next header section starts. */
static void read_ahead(frame *f, uint64_t body) {
    if (!f->bev) return;
    uint64_t lim = f->conns ? f->conns->body_limit : 0;
    if (body > lim) body = lim;
    bufferevent_setwatermark(f->bev, EV_READ, 0, READ_HIGH + (size_t)body);
}

/* Cut the input at the refused line: evhttp reads a marker instead, then nothing. */
static void refuse(frame *f, struct evbuffer *buf, const char *code) {
    uint64_t base = f->added - evbuffer_get_length(buf); /* stream offset of buf[0] */
    int whole = f->sec_start >= base;                     /* evhttp has not read the request line */
    size_t keep = (size_t)((whole ? f->sec_start : f->line_start) - base);
    struct evbuffer *tmp = evbuffer_new();
    if (!tmp) oom();
    f->busy = 1;
    evbuffer_remove_buffer(buf, tmp, keep);
    evbuffer_drain(buf, evbuffer_get_length(buf));
    evbuffer_add_buffer(buf, tmp);
    if (whole)
        evbuffer_add_printf(buf, "GET " REFUSED_PREFIX "%s HTTP/1.1\r\nHost: -\r\nConnection: close\r\n\r\n", code);
    else
        evbuffer_add_printf(buf, REFUSED_HEADER ": %s\r\nConnection: close\r\n\r\n", code);
    f->busy = 0;
    evbuffer_free(tmp);
    f->state = S_DEAD;
}

static void input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    frame *f = arg;
    if (f->busy || info->n_added == 0) return;
    f->seen = 1;
    size_t len = evbuffer_get_length(buf);
    size_t off = len - info->n_added; /* the new bytes are at the end */
    uint64_t at = f->added;           /* stream offset of buf[off] */
    f->added += info->n_added;
    if (f->state == S_DEAD) return;   /* a marker is in place: evhttp reads no further */
    struct evbuffer_ptr pos;
    evbuffer_ptr_set(buf, &pos, off, EVBUFFER_PTR_SET);
    struct evbuffer_iovec v[8];
    while (at < f->added && f->state != S_DEAD) {
        int nv = evbuffer_peek(buf, (ev_ssize_t)(f->added - at), &pos, v, 8);
        if (nv <= 0) break;
        for (int k = 0; k < nv && k < 8 && f->state != S_DEAD; k++) {
            const unsigned char *p = v[k].iov_base;
            size_t n = v[k].iov_len, i = 0;
            while (i < n && f->state != S_DEAD) {
                if (f->state == S_BODY || f->state == S_CHUNK_DATA) {
                    size_t s = (uint64_t)(n - i) < f->left ? n - i : (size_t)f->left;
                    i += s;
                    at += s;
                    f->left -= s;
                    if (f->left == 0) f->state = f->state == S_BODY ? S_HEAD : S_CHUNK_END;
                    if (f->state == S_HEAD) { f->lineno = -1; read_ahead(f, 0); }
                    continue;
                }
                unsigned char c = p[i++];
                at++;
                if (f->state == S_HEAD && f->lineno < 0) {
                    /* empty lines before a request line are ignored (RFC 9112 §2.2) */
                    if (c == '\r' || c == '\n') continue;
                    f->lineno = 0;
                    f->sec_start = at - 1;
                    /* a kept-alive connection's next request begins: its header deadline starts */
                    if (f->waiting && f->idle) { f->idle = 0; arm(f); }
                }
                if (f->linelen == 0) f->line_start = at - 1;
                size_t cap = f->state == S_HEAD ? HEAD_MAX : LINE_MAX_;
                if (f->linelen >= cap || (f->state == S_HEAD && at - f->sec_start > HEAD_MAX)) {
                    if (f->state == S_HEAD) refuse(f, buf, "headers_too_large");
                    else kill_conn(f);
                    return;
                }
                if (f->linelen == f->linecap) {
                    size_t nc = f->linecap ? f->linecap * 2 : 256;
                    char *nl = realloc(f->line, nc);
                    if (!nl) oom();
                    f->line = nl;
                    f->linecap = nc;
                }
                f->line[f->linelen++] = (char)c;
                if (c != '\n') continue;
                if (f->state == S_HEAD) {
                    const char *code = head_line(f);
                    if (code) { refuse(f, buf, code); return; }
                    if (f->lineno >= 0) f->lineno++;
                    else { /* the section is complete: a request, no longer waiting */
                        f->sections++;
                        wait_leave(f);
                    }
                } else {
                    chunk_line(f);
                }
                f->linelen = 0;
            }
            evbuffer_ptr_set(buf, &pos, v[k].iov_len, EVBUFFER_PTR_ADD);
        }
    }
}

static void close_cb(struct evhttp_connection *evcon, void *arg) {
    frame *f = arg;
    if (f->closecb) f->closecb(evcon, f->closearg);
    if (f->conns) {
        wait_leave(f);
        f->conns->open--;
        obleth_http_stats.open--;
    }
    if (f->timer) event_free(f->timer);
    evbuffer_remove_cb_entry(bufferevent_get_input(f->bev), f->cbent);
    unmap(f);
    free(f->line);
    free(f);
}

/* Right after evhttp made the connection (before any of its I/O): take its close callback. */
static void pending_remove(frame *f) {
    obleth_http_conns *c = f->conns;
    if (f->pprev) f->pprev->pnext = f->pnext; else if (c && c->pending == f) c->pending = f->pnext;
    if (f->pnext) f->pnext->pprev = f->pprev;
    f->pnext = f->pprev = NULL;
}

static void adopt_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    frame *f = arg;
    pending_remove(f);
    event_free(f->adopt_ev);
    f->adopt_ev = NULL;
    bufferevent_data_cb rd, wr;
    bufferevent_event_cb ev;
    void *cbarg = NULL;
    bufferevent_getcb(f->bev, &rd, &wr, &ev, &cbarg);
    if (!cbarg) { /* evhttp dropped the connection while making it (out of memory) */
        free(f);
        return;
    }
    f->evcon = cbarg; /* evhttp's callback argument is the connection */
    f->next = g_map[bucket(f->evcon)];
    g_map[bucket(f->evcon)] = f;
    f->cbent = evbuffer_add_cb(bufferevent_get_input(f->bev), input_cb, f);
    if (!f->cbent) oom();
    evhttp_connection_set_closecb(f->evcon, close_cb, f);
    /* new input runs at the normal priority; evhttp's "read the next pipelined request"
       callback keeps the low one it was made with (obleth_http_frame_bev) */
    /* (an event's priority is set while it is not pending: evhttp has enabled reading) */
    short en = bufferevent_get_enabled(f->bev);
    bufferevent_disable(f->bev, EV_READ | EV_WRITE);
    bufferevent_priority_set(f->bev, PRIO_NORMAL);
    bufferevent_enable(f->bev, en);
    bufferevent_setwatermark(f->bev, EV_READ, 0, READ_HIGH);
    /* what a client sent in one go is read in one go: its requests after the first then wait
       at the low priority, not behind a read event each */
    bufferevent_set_max_single_read(f->bev, 64 * 1024);
    obleth_http_conns *c = f->conns;
    if (!c) return;
    c->open++;
    obleth_http_stats.open++;
    f->timer = evtimer_new(bufferevent_get_base(f->bev), timer_cb, f);
    if (!f->timer) oom();
    wait_enter(f, 0); /* the header deadline runs from the accept */
    episode_check_end(c);
    if (c->max_conns > 0 && c->open > c->max_conns) {
        episode_note(c, "max_connections", 0);
        int young = 0;
        if (evict_oldest(c, f, &young)) {
            /* room made */
        } else if (young && c->open <= c->max_conns + c->burst_max) {
            /* the others waiting were just accepted and not read yet (this one's request may be
               complete in its socket, as may theirs): keep it, over the cap by at most one
               batch, and accept again once they have been read */
            pause_accept(c, 50);
        } else {
            c->episode_refused++;
            refuse_fd(bufferevent_getfd(f->bev));
            evhttp_connection_free(f->evcon); /* close_cb frees f */
        }
    }
}

static void complete_cb(struct evhttp_request *req, void *arg) {
    (void)req;
    frame *f = arg;
    if (f->answered < f->sections) f->answered++;
    /* every request seen is answered: the connection waits for the next one */
    if (f->answered == f->sections) wait_enter(f, f->state == S_HEAD && f->lineno < 0);
}

void obleth_http_frame_request(struct evhttp_request *req) {
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    frame *f = c ? find(c) : NULL;
    if (f && f->conns) evhttp_request_set_on_complete_cb(req, complete_cb, f);
}

struct bufferevent *obleth_http_frame_bev(struct event_base *base, void *arg) {
    frame *f = calloc(1, sizeof *f);
    if (!f) oom();
    f->lineno = -1;
    f->cl = -1;
    f->conns = arg;
    f->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!f->bev) oom();
    /* evhttp makes its deferred "read more" callback (pipelined requests) with this priority */
    bufferevent_priority_set(f->bev, PRIO_PIPELINED);
    /* activated now: runs before any read on this connection can (an event of our own, not
       event_base_once: a server closed before it runs frees it, see obleth_http_conns_free) */
    f->adopt_ev = event_new(base, -1, 0, adopt_cb, f);
    if (!f->adopt_ev) oom();
    event_active(f->adopt_ev, EV_TIMEOUT, 1);
    obleth_http_conns *c = f->conns;
    if (c) {
        f->gen = c->gen;
        f->pnext = c->pending;
        if (f->pnext) f->pnext->pprev = f;
        c->pending = f;
        /* at most a quarter of what the server can hold is accepted per loop turn (this runs
           inside the listener's accept loop, which stops when the listener is disabled): the
           new ones are read, so their complete requests no longer wait, before the next batch
           may need their room */
        if (++c->burst >= c->burst_max && c->lst && c->resume) {
            struct timeval now0 = {0, 0};
            evconnlistener_disable(c->lst);
            evtimer_add(c->resume, &now0);
        }
    }
    return f->bev;
}

void obleth_http_frame_set_closecb(struct evhttp_connection *c, void (*cb)(struct evhttp_connection *, void *),
                                   void *arg) {
    frame *f = find(c);
    if (!f) {
        evhttp_connection_set_closecb(c, cb, arg);
        return;
    }
    f->closecb = cb;
    f->closearg = arg;
}

int obleth_http_frame_refused(struct evhttp_request *req) {
    const char *uri = evhttp_request_get_uri(req);
    const char *code = NULL;
    if (uri && strncmp(uri, REFUSED_PREFIX, sizeof REFUSED_PREFIX - 1) == 0) code = uri + sizeof REFUSED_PREFIX - 1;
    if (!code) code = evhttp_find_header(evhttp_request_get_input_headers(req), REFUSED_HEADER);
    if (!code) return 0;
    const char *message = "the request is malformed";
    const char *known = "bad_request";
    for (int i = 0; REFUSALS[i].code; i++)
        if (strcmp(code, REFUSALS[i].code) == 0) { known = REFUSALS[i].code; message = REFUSALS[i].message; }
    obleth_log("info", "http_request", "status=400 code=%s", known);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    evhttp_add_header(out, "Connection", "close");
    evhttp_add_header(out, "Content-Type", "application/json");
    struct evbuffer *b = evbuffer_new();
    if (!b) oom();
    evbuffer_add_printf(b, "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\","
                           "\"param\":null,\"code\":\"%s\"}}", message, known);
    evhttp_send_reply(req, 400, "Bad Request", b);
    evbuffer_free(b);
    return 1;
}

/* For the fuzzer (spec/fuzz/fuzz.c): run the guard over data as a client connection would
   deliver it, in pieces of 1..64 bytes (data[0] picks the size), with "evhttp" reading
   whole lines from the front after each piece when data[1] is odd. Returns 1 when the
   guard refused a request (the input ends in a marker), else 0. */
int obleth_http_frame_feed(const unsigned char *data, size_t n) {
    if (n < 2) return 0;
    size_t piece = (size_t)(data[0] % 64) + 1;
    int reads = data[1] & 1;
    data += 2;
    n -= 2;
    frame *f = calloc(1, sizeof *f);
    if (!f) oom();
    f->lineno = -1;
    f->cl = -1;
    f->bev = bufferevent_socket_new(obleth_base(), -1, 0);
    if (!f->bev) oom();
    struct evbuffer *buf = bufferevent_get_input(f->bev);
    f->cbent = evbuffer_add_cb(buf, input_cb, f);
    for (size_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;
        evbuffer_add(buf, data + off, k);
        if (reads && f->state != S_DEAD) {
            struct evbuffer_ptr lf = evbuffer_search(buf, "\n", 1, NULL);
            size_t upto = 0;
            while (lf.pos >= 0) {
                upto = (size_t)lf.pos + 1;
                evbuffer_ptr_set(buf, &lf, 1, EVBUFFER_PTR_ADD);
                lf = evbuffer_search(buf, "\n", 1, &lf);
            }
            f->busy = 1;
            evbuffer_drain(buf, upto);
            f->busy = 0;
        }
    }
    int refused = f->state == S_DEAD;
    evbuffer_remove_cb_entry(buf, f->cbent);
    bufferevent_free(f->bev);
    free(f->line);
    free(f);
    return refused;
}
