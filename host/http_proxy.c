/*
 * http_proxy.c — res:proxy: pass the request being answered on to an
 * upstream HTTP/1.1 server and its answer back, all in C (part of
 * obleth.http). The router (lua/obleth/router/init.lua) picks the endpoint and
 * keeps the books; the bytes never go through Lua.
 *
 *   status, why, message, ttfb = res:proxy{
 *     host = "10.0.0.5", port = 8000,  -- the endpoint (a name is resolved once per
 *                                      -- endpoint with getaddrinfo, then cached)
 *     target = "/v1/chat/completions", -- default: the client's request target
 *     stream = false,         -- pass the answer through from its first byte
 *     connect_timeout = 5,    -- seconds to wait for the TCP connection
 *     timeout = 3600,         -- seconds the whole exchange may take
 *     buffer_limit = 1048576, -- bytes of a non-streamed answer held back to be
 *                             -- sent with a Content-Length; more is passed through
 *     usage = false,          -- keep the answer's last USAGE_TAIL bytes and read the
 *                             -- engine's "usage" from them (prompt, completion below)
 *   }
 *
 * It must be called from the handler's task, before anything was sent
 * through res. It returns when the exchange is over:
 *   status, nil, nil, ttfb[, prompt_tokens, completion_tokens]
 *                                  the answer went through (status is the endpoint's);
 *                                  with usage = true, the token counts of the last
 *                                  "usage" object in the answer's end (nil when none)
 *   nil, {code, message}          nothing reached the client; code is
 *       "unreachable"      the connection was refused or could not be made
 *       "connect_timeout"  no connection within connect_timeout
 *       "closed"           the endpoint closed the connection before answering
 *       "timeout"          no complete answer within timeout
 *       "bad_response"     the answer's status line or headers were invalid
 *       "upstream_broke"   the answer broke off before any of it was sent on
 *   status, "upstream_broke", message, ttfb
 *                                  the answer broke off after the client got its
 *                                  start: the client connection is closed without
 *                                  the end of the message, so it sees the break
 *   499, "client_gone", nil, ttfb  the client went away; the upstream request was
 *                                  cancelled (its connection closed)
 * ttfb is the seconds from sending until the answer's headers arrived.
 *
 * Headers (RFC 9110 section 7.6.1): hop-by-hop headers (Connection, Keep-Alive,
 * TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*), those the client's
 * Connection header names, Host, Content-Length, Expect and Authorization (the
 * client's obleth key) are not forwarded; X-Forwarded-For gets the client's
 * address appended; the option via (e.g. "1.1 obleth-3f2a") is added as a
 * Via header after the client's own (RFC 9110 section 7.6.3). The answer's
 * hop-by-hop headers and Content-Length are dropped (the server frames the
 * answer itself).
 *
 * Connections are kept alive and reused, at most POOL_MAX idle ones per
 * endpoint; an endpoint unused for POOL_IDLE_SECS is forgotten. An idle
 * connection is reused only when nothing waits to be read on it (checked with
 * a peek just before): one the endpoint closed, or one with bytes after its last
 * answer, is closed instead. A failed request is never sent again here; the
 * router decides about another replica.
 *
 * A client that goes away is noticed when its answer is written, and, for an
 * exchange still waiting after a second, by watching its connection; the
 * upstream request is then cancelled.
 */
#define _POSIX_C_SOURCE 200809L
#include "http_internal.h"
#include "util.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <math.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define POOL_MAX 64             /* idle connections kept per endpoint */
#define POOL_IDLE_SECS 300.0    /* an endpoint unused this long is forgotten */
#define MAX_NAMED 16            /* header names a Connection header may list */
#define CLIENT_BACKLOG (4 << 20) /* bytes queued to a slow client before reading pauses */
#define USAGE_TAIL 4096         /* bytes of an answer's end kept to read its "usage" from */

/* res:proxy's options (see the top of this file). */
typedef struct {
    const char *host;   /* a name or a numeric address */
    int port;
    const char *target; /* NULL: the client's request target */
    int stream;
    double connect_timeout, timeout; /* seconds */
    size_t buffer_limit;             /* bytes */
    const char *via;    /* NULL, or this proxy's Via entry ("1.1 obleth-..."), sent after the client's */
    int usage;          /* keep the answer's end and read its token usage */
} proxy_opts;

/* How an exchange ended: status 0 when nothing reached the client (code says why:
   "unreachable", "connect_timeout", "closed", "timeout", "bad_response",
   "upstream_broke"); otherwise the status sent (code NULL, "upstream_broke" after
   the answer's start, or "client_gone" with status 499). ttfb in seconds. */
typedef struct {
    int status;
    const char *code;
    const char *message;
    double ttfb;
    long long prompt, completion; /* from the answer's "usage"; -1: none */
} proxy_result;

typedef struct endpoint {
    struct endpoint *next;
    char *host;    /* as given */
    char *address; /* numeric; NULL while the name does not resolve */
    int port;
    int users;     /* proxies using one of its connections now */
    int stale;     /* a connection failed: resolve the name again before the next one */
    double resolved_at;
    double last_used;
    int n;
    struct evhttp_connection *idle[POOL_MAX];
} endpoint;

static endpoint *g_endpoints;
/* counts since start, for http.proxy_stats() */
static struct { lua_Integer opened, reused, completed, failed, client_gone; } g_stats;
static int g_closed; /* the Lua state is closing: keep nothing idle */

struct proxy_op {
    response *res;                  /* NULL once abandoned */
    endpoint *ep;
    struct evhttp_request *up;      /* the upstream request while evhttp holds it */
    struct evhttp_connection *conn; /* the connection it goes over */
    struct event *done_ev;          /* activated to finish outside evhttp's callbacks */
                                    /* (done_ev, timer, slow and target live in the op's block) */
    struct event *timer;            /* the exchange's time limit */
    struct event *connw;            /* watches a new connection come up */
    struct event *slow;             /* a second into the exchange: start watching the client */
    struct event *clientw;          /* watches the client's connection for its end */
    struct evbuffer_cb_entry *incb; /* notes bytes arriving from the endpoint */
    struct evbuffer *held;          /* a non-streamed answer, held back */
    char *target;
    char *tail;                     /* the answer's last bytes (usage = true), in the op's block */
    size_t tail_n;
    double t0, ttfb, connect_timeout, timeout;
    size_t buffer_limit;
    int status;
    int mode;        /* 0 no answer yet, 1 holding it back, 2 passing it through */
    int stream, head, fresh;
    int err;         /* the evhttp_request_error, or -1 */
    int failed_connect; /* evhttp gave up before a connection was made */
    int got_bytes;   /* some bytes of an answer arrived on this attempt */
    int bad;         /* the answer's status was not one to pass on */
    int finished;    /* evhttp is done with up */
    int complete;    /* the whole answer arrived */
    int client_gone, timed_out, connect_timed_out, paused;
};

/* ---- the connection pool --------------------------------------------------- */

/* Drop an endpoint's idle connections. */
static void endpoint_drop_idle(endpoint *e) {
    for (int i = 0; i < e->n; i++) evhttp_connection_free(e->idle[i]);
    e->n = 0;
}

static void endpoint_free(endpoint *e) {
    endpoint_drop_idle(e);
    free(e->host);
    free(e->address);
    free(e);
}

/* Forget endpoints nobody used for POOL_IDLE_SECS (replicas come and go). */
static void pool_prune(double now) {
    endpoint **pp = &g_endpoints;
    while (*pp) {
        endpoint *e = *pp;
        if (e->users == 0 && now - e->last_used > POOL_IDLE_SECS) {
            *pp = e->next;
            endpoint_free(e);
        } else {
            pp = &e->next;
        }
    }
}

/* Resolve host to a numeric address (getaddrinfo, so /etc/hosts and NSS apply).
   0 | -1 with *why set. */
static int resolve(const char *host, char *addr, size_t n, const char **why) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc != 0 || !ai) {
        *why = rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc);
        if (ai) freeaddrinfo(ai);
        return -1;
    }
    const void *src = ai->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                                : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
    evutil_inet_ntop(ai->ai_family, src, addr, n);
    freeaddrinfo(ai);
    return 0;
}

/* The endpoint for host:port. A name is resolved when the endpoint is first
   used, and again after a connection to it failed (at most once a second); a
   name that does not resolve is not looked up again for NEGATIVE_SECS. The
   lookup blocks the loop, so a numeric address (what the provisioner registers
   when Slurm reports one) costs nothing. NULL and *why set when it cannot be
   resolved. */
#define NEGATIVE_SECS 5.0
static endpoint *pool_endpoint(const char *host, int port, double now, const char **why) {
    static double last_prune;
    if (now - last_prune > 10) {
        pool_prune(now);
        last_prune = now;
    }
    endpoint *e = NULL;
    for (endpoint *x = g_endpoints; x; x = x->next)
        if (x->port == port && strcmp(x->host, host) == 0) {
            e = x;
            break;
        }
    if (e && e->address && !(e->stale && now - e->resolved_at > 1)) return e;
    if (e && !e->address && now - e->resolved_at < NEGATIVE_SECS) {
        *why = "the name did not resolve a moment ago";
        return NULL;
    }
    char addr[64] = "";
    int rc = resolve(host, addr, sizeof addr, why);
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->host = strdup(host))) {
            free(e);
            *why = "out of memory";
            return NULL;
        }
        e->port = port;
        e->next = g_endpoints;
        g_endpoints = e;
    }
    e->resolved_at = now;
    e->stale = 0;
    if (rc != 0) {
        endpoint_drop_idle(e);
        free(e->address);
        e->address = NULL;
        e->last_used = now;
        return NULL;
    }
    if (!e->address || strcmp(e->address, addr) != 0) {
        endpoint_drop_idle(e);
        free(e->address);
        e->address = strdup(addr);
        if (!e->address) {
            *why = "out of memory";
            return NULL;
        }
    }
    return e;
}

/* May an idle connection carry the next request? Only when nothing is waiting
   to be read on it: bytes after a complete answer (a Content-Length that lied,
   a body on a 204 or HEAD answer, an answer nobody asked for) would be taken
   as the next request's answer, and an end-of-file means the endpoint closed it. */
static int conn_is_clean(struct evhttp_connection *c) {
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c);
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0 || evbuffer_get_length(bufferevent_get_input(bev)) > 0) return 0;
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* A connection to e: a clean idle one if there is one (*fresh = 0), else a new one. */
static struct evhttp_connection *pool_take(endpoint *e, int *fresh) {
    while (e->n > 0) {
        struct evhttp_connection *c = e->idle[--e->n];
        if (conn_is_clean(c)) {
            *fresh = 0;
            g_stats.reused++;
            return c;
        }
        evhttp_connection_free(c); /* closed by the endpoint, or bytes nobody asked for */
    }
    *fresh = 1;
    g_stats.opened++;
    struct evhttp_connection *c = evhttp_connection_base_new(obleth_base(), NULL, e->address, (ev_uint16_t)e->port);
    if (c) {
        evhttp_connection_set_retries(c, 0);
        evhttp_connection_set_max_headers_size(c, 64 * 1024);
        /* not EVHTTP_CON_READ_ON_WRITE_ERROR: with it, libevent 2.1 answers an
           end-of-file that leaves part of an answer unread by waiting for more
           bytes that never come, until the time limit */
    }
    return c;
}

static void pool_give(endpoint *e, struct evhttp_connection *c, int reusable) {
    /* bytes already read past the answer rule it out now; the peek waits for pool_take */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c);
    if (reusable && !g_closed && e->n < POOL_MAX && bufferevent_getfd(bev) >= 0 &&
        evbuffer_get_length(bufferevent_get_input(bev)) == 0)
        e->idle[e->n++] = c;
    else evhttp_connection_free(c);
}

/* ---- one exchange ---------------------------------------------------------- */

/* The headers the exchange treats apart, known by name (case-insensitive). */
enum { H_OTHER, H_HOP, H_CONTENT_LENGTH, H_HOST, H_EXPECT, H_AUTHORIZATION, H_XFF };

/* Which of them name is: hop-by-hop (RFC 9110 section 7.6.1: Connection,
   Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade,
   Proxy-Authenticate, Proxy-Authorization) or one handled on its own. Names are
   told apart by length first: most headers are compared with none of them. */
static int header_kind(const char *name) {
#define K(s, kind) {s, sizeof s - 1, kind}
    static const struct { const char *name; size_t len; int kind; } known[] = {
        K("te", H_HOP), K("host", H_HOST), K("expect", H_EXPECT), K("trailer", H_HOP), K("upgrade", H_HOP),
        K("connection", H_HOP), K("keep-alive", H_HOP), K("authorization", H_AUTHORIZATION),
        K("content-length", H_CONTENT_LENGTH), K("x-forwarded-for", H_XFF), K("proxy-connection", H_HOP),
        K("transfer-encoding", H_HOP), K("proxy-authenticate", H_HOP), K("proxy-authorization", H_HOP),
    };
#undef K
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].len == n && strcasecmp(name, known[i].name) == 0) return known[i].kind;
    return H_OTHER;
}

/* Split a Connection header's value into the header names it lists. */
static int connection_named(const char *value, char names[MAX_NAMED][64]) {
    int n = 0;
    const char *p = value;
    while (p && *p && n < MAX_NAMED) {
        while (*p == ',' || *p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, ", \t");
        if (len > 0 && len < 64) {
            memcpy(names[n], p, len);
            names[n][len] = '\0';
            n++;
        }
        p += len;
    }
    return n;
}

static int named_in(const char *name, char names[MAX_NAMED][64], int n) {
    for (int i = 0; i < n; i++)
        if (strcasecmp(name, names[i]) == 0) return 1;
    return 0;
}

/* Is this a header to pass on at all? Its name is an RFC 9110 token and its
   value has no control character but tab (a name like "Content-Length " or a
   value with a bare CR would mean something else to the next hop). */
static int header_ok(const char *k, const char *v) {
    static const char tchar[] = "!#$%&'*+-.^_`|~";
    if (!*k) return 0;
    for (const unsigned char *p = (const unsigned char *)k; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              strchr(tchar, *p)))
            return 0;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) return 0;
    return 1;
}

/* Is h an end-to-end header to pass on, in either direction? Not one that is
   malformed, hop-by-hop, named by the message's Connection header, or the
   Content-Length (the next hop's framing is made anew). */
static int end_to_end(const struct evkeyval *h, int kind, char named[MAX_NAMED][64], int nn) {
    return kind != H_HOP && kind != H_CONTENT_LENGTH && header_ok(h->key, h->value) && !named_in(h->key, named, nn);
}

/* Copy the answer's end-to-end headers to the client's answer. */
static void copy_answer_headers(struct evhttp_request *up, struct evhttp_request *client) {
    struct evkeyvalq *in = evhttp_request_get_input_headers(up);
    struct evkeyvalq *out = evhttp_request_get_output_headers(client);
    char named[MAX_NAMED][64];
    int nn = connection_named(evhttp_find_header(in, "Connection"), named);
    for (struct evkeyval *h = in->tqh_first; h; h = h->next.tqe_next)
        if (end_to_end(h, header_kind(h->key), named, nn)) evhttp_add_header(out, h->key, h->value);
}

static void op_finish_later(struct proxy_op *op) { event_active(op->done_ev, EV_TIMEOUT, 1); }

/* Cancel the upstream request if evhttp still holds it: its connection is closed,
   up_error_cb hears of the cancel and up_done_cb is not called. */
static void op_cancel(struct proxy_op *op) {
    if (!op->up) return;
    struct evhttp_request *up = op->up;
    op->up = NULL;
    op->finished = 1;
    if (op->connw) event_del(op->connw);
    evhttp_cancel_request(up);
}

static void client_written_cb(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    struct proxy_op *op = arg;
    if (op->paused && op->conn) {
        op->paused = 0;
        bufferevent_enable(evhttp_connection_get_bufferevent(op->conn), EV_READ);
    }
}

/* Keep the last USAGE_TAIL bytes of the answer so far, buf's bytes being the newest. */
static void tail_note(struct proxy_op *op, struct evbuffer *buf) {
    size_t len = evbuffer_get_length(buf);
    if (!op->tail || len == 0) return;
    if (len >= USAGE_TAIL) {
        struct evbuffer_ptr at;
        if (evbuffer_ptr_set(buf, &at, len - USAGE_TAIL, EVBUFFER_PTR_SET) != 0) return;
        op->tail_n = evbuffer_copyout_from(buf, &at, op->tail, USAGE_TAIL) == USAGE_TAIL ? USAGE_TAIL : 0;
        return;
    }
    size_t keep = op->tail_n + len > USAGE_TAIL ? USAGE_TAIL - len : op->tail_n;
    memmove(op->tail, op->tail + op->tail_n - keep, keep);
    ev_ssize_t got = evbuffer_copyout(buf, op->tail + keep, len);
    op->tail_n = keep + (got > 0 ? (size_t)got : 0);
}

/* Pass what is in buf on to the client (it has had the answer's start). */
static void pass_on(struct proxy_op *op, struct evbuffer *buf) {
    tail_note(op, buf);
    struct evhttp_request *client = op->res ? op->res->req : NULL;
    if (!client || op->head) { /* nobody to send it to, or an answer to HEAD has no body */
        evbuffer_drain(buf, evbuffer_get_length(buf));
        return;
    }
    evhttp_send_reply_chunk_with_cb(client, buf, client_written_cb, op);
    struct evhttp_connection *cc = evhttp_request_get_connection(client);
    if (cc && op->conn &&
        evbuffer_get_length(bufferevent_get_output(evhttp_connection_get_bufferevent(cc))) > CLIENT_BACKLOG) {
        op->paused = 1; /* a slow client: stop reading until its backlog is written */
        bufferevent_disable(evhttp_connection_get_bufferevent(op->conn), EV_READ);
    }
}

static void start_passing(struct proxy_op *op, struct evhttp_request *up) {
    op->mode = 2;
    struct evhttp_request *client = op->res ? op->res->req : NULL;
    if (!client) return;
    op->res->state = 1;
    copy_answer_headers(up, client);
    evhttp_send_reply_start(client, op->status, obleth_http_reason(op->status));
}

static int up_header_cb(struct evhttp_request *up, void *arg) {
    struct proxy_op *op = arg;
    int code = evhttp_request_get_response_code(up);
    if (code == 100) return 0; /* 100 Continue: evhttp reads the real answer next */
    if (code < 200 || code > 599) {
        /* another 1xx (evhttp would take it for the answer), a 101 nobody asked
           for, or no status at all: not an answer to pass on */
        op->bad = 1;
        return -1;
    }
    op->status = code;
    op->ttfb = obleth_mono() - op->t0;
    const char *ctype = evhttp_find_header(evhttp_request_get_input_headers(up), "Content-Type");
    if (op->stream || (ctype && strstr(ctype, "text/event-stream"))) start_passing(op, up);
    else op->mode = 1;
    return 0;
}

static void up_chunk_cb(struct evhttp_request *up, void *arg) {
    struct proxy_op *op = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(up);
    if (op->mode == 1) {
        evbuffer_add_buffer(op->held, in);
        if (evbuffer_get_length(op->held) <= op->buffer_limit) return;
        start_passing(op, up);
        pass_on(op, op->held);
        return;
    }
    pass_on(op, in);
}

static void up_error_cb(enum evhttp_request_error err, void *arg) {
    struct proxy_op *op = arg;
    op->err = (int)err;
}

static void up_done_cb(struct evhttp_request *up, void *arg) {
    struct proxy_op *op = arg;
    op->finished = 1;
    op->up = NULL;
    if (op->connw) event_del(op->connw);
    if (op->clientw) event_del(op->clientw);
    if (up && evhttp_request_get_response_code(up) != 0 && op->err < 0) {
        op->complete = 1;
        if (op->mode == 0) { /* an answer without a body (204, 304, HEAD) */
            op->status = evhttp_request_get_response_code(up); /* checked by up_header_cb */
            op->ttfb = obleth_mono() - op->t0;
            op->mode = 1;
        }
        struct evhttp_request *client = op->res ? op->res->req : NULL;
        if (op->mode == 1) tail_note(op, op->held);
        if (client && op->mode == 1) {
            copy_answer_headers(up, client);
            if (op->head) {
                const char *cl = evhttp_find_header(evhttp_request_get_input_headers(up), "Content-Length");
                if (cl) evhttp_add_header(evhttp_request_get_output_headers(client), "Content-Length", cl);
                evbuffer_drain(op->held, evbuffer_get_length(op->held));
            }
            obleth_http_detach_close_cb(op->res);
            evhttp_send_reply(client, op->status, obleth_http_reason(op->status), op->held);
            op->res->req = NULL;
            op->res->state = 2;
        } else if (client && op->mode == 2) {
            obleth_http_detach_close_cb(op->res);
            evhttp_send_reply_end(client);
            op->res->req = NULL;
            op->res->state = 2;
        }
    } else if (up && op->err < 0) {
        op->failed_connect = 1; /* evhttp gives up on a connection it could not make */
        if (op->fresh && obleth_mono() - op->t0 >= op->connect_timeout * 0.99) op->connect_timed_out = 1;
    }
    if (!op->complete && !op->got_bytes) op->ep->stale = 1; /* no connection, or nothing came back */
    op_finish_later(op);
}

static void connw_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    struct proxy_op *op = arg;
    if (!op->up || !op->conn) return;
    if (what & EV_WRITE) {
        /* connected (or failed, which evhttp reports): from now on the idle limit is the exchange's */
        struct timeval tv = obleth_tv(op->timeout);
        evhttp_connection_set_timeout_tv(op->conn, &tv);
        return;
    }
    op->connect_timed_out = 1;
    op_cancel(op);
    op_finish_later(op);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct proxy_op *op = arg;
    if (!op->up) return;
    op->timed_out = 1;
    op_cancel(op);
    op_finish_later(op);
}

static int op_send(struct proxy_op *op, const char *via);

static void up_input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    (void)buf;
    struct proxy_op *op = arg;
    if (info->n_added > 0) op->got_bytes = 1;
}

/* The client's connection became readable while its answer is awaited: an
   end-of-file (or a reset) means the client went away, so close its connection,
   which cancels the upstream request (obleth_proxy_client_gone). Bytes of a
   next, pipelined request say nothing; watching stops either way. */
static void clientw_cb(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct proxy_op *op = arg;
    struct evhttp_request *client = op->res ? op->res->req : NULL;
    if (!client || op->finished) return;
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        struct evhttp_connection *cc = evhttp_request_get_connection(client);
        if (cc) evhttp_connection_free(cc); /* runs the close callback: client gone */
    }
}

/* A second into the exchange and the client still waits: watch its connection,
   so a client that leaves while the endpoint is silent is noticed. (Quick
   exchanges never pay for the watch.) */
static void slow_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct proxy_op *op = arg;
    struct evhttp_request *client = op->res ? op->res->req : NULL;
    if (!client || op->finished || op->mode == 2) return; /* a passed-through answer notices by writing */
    struct evhttp_connection *cc = evhttp_request_get_connection(client);
    evutil_socket_t cfd = cc ? bufferevent_getfd(evhttp_connection_get_bufferevent(cc)) : -1;
    if (cfd < 0) return;
    op->clientw = event_new(obleth_base(), cfd, EV_READ, clientw_cb, op);
    if (op->clientw) event_add(op->clientw, NULL);
}

/* Release what the exchange holds; the connection goes back to the pool when clean. */
static void op_release_conn(struct proxy_op *op, int reusable) {
    if (op->connw) event_del(op->connw);
    if (op->conn && op->incb) {
        evbuffer_remove_cb_entry(bufferevent_get_input(evhttp_connection_get_bufferevent(op->conn)), op->incb);
        op->incb = NULL;
    }
    if (op->conn) {
        if (op->paused) {
            bufferevent_enable(evhttp_connection_get_bufferevent(op->conn), EV_READ);
            op->paused = 0;
        }
        pool_give(op->ep, op->conn, reusable);
        op->conn = NULL;
    }
}

static void op_free(struct proxy_op *op) {
    op_cancel(op);
    op_release_conn(op, 0);
    if (op->ep && --op->ep->users == 0 && g_closed) {
        for (endpoint **pp = &g_endpoints; *pp; pp = &(*pp)->next)
            if (*pp == op->ep) {
                *pp = op->ep->next;
                break;
            }
        endpoint_free(op->ep);
    }
    /* done_ev, timer and slow live in op's own block (proxy_start) */
    event_del(op->done_ev);
    event_del(op->timer);
    event_del(op->slow);
    if (op->connw) event_free(op->connw);
    if (op->clientw) event_free(op->clientw);
    if (op->held) evbuffer_free(op->held);
    free(op);
}

/* res:proxy's outcome, handed to the waiting handler task. */
static void proxy_done(response *r, const proxy_result *res) {
    lua_State *co = r->w.co;
    if (!co) return;
    int nret = 4;
    if (res->status == 0) { /* nil, {code, message} (docs/errors.md) */
        lua_pushnil(co);
        obleth_error_push(co, NULL, res->code, res->message, strlen(res->message), NULL);
        nret = 2;
    } else {
        lua_pushinteger(co, res->status);
        if (res->code) lua_pushstring(co, res->code);
        else lua_pushnil(co);
        if (res->message) lua_pushstring(co, res->message);
        else lua_pushnil(co);
        lua_pushnumber(co, res->ttfb);
        if (res->prompt >= 0 || res->completion >= 0) {
            if (res->prompt >= 0) lua_pushinteger(co, (lua_Integer)res->prompt);
            else lua_pushnil(co);
            if (res->completion >= 0) lua_pushinteger(co, (lua_Integer)res->completion);
            else lua_pushnil(co);
            nret = 6;
        }
    }
    obleth_wait_resume(&r->w, nret);
}

/* The exchange is over, or its client went away: runs from the loop, never inside evhttp. */
static void done_ev_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct proxy_op *op = arg;
    if (op->client_gone) op_cancel(op);
    if (!op->finished) return;
    response *r = op->res;
    int reusable = op->complete && !op->client_gone;
    if (op->client_gone) g_stats.client_gone++;
    else if (op->complete) g_stats.completed++;
    else g_stats.failed++;
    op_release_conn(op, reusable);
    if (!r) { /* abandoned at shutdown */
        op_free(op);
        return;
    }
    r->proxy = NULL;
    proxy_result res = {0, NULL, NULL, op->ttfb, -1, -1};
    if (op->client_gone) {
        r->state = 2; /* nobody is left to answer */
        res.status = 499;
        res.code = "client_gone";
    } else if (op->complete) {
        res.status = op->status;
        if (op->tail && !obleth_usage_scan(op->tail, op->tail_n, &res.prompt, &res.completion))
            res.prompt = res.completion = -1;
    } else {
        if (op->connect_timed_out) {
            res.code = "connect_timeout";
            res.message = "no connection within the connect timeout";
        } else if (op->timed_out) {
            res.code = "timeout";
            res.message = "no complete answer within the time limit";
        } else if (op->failed_connect) {
            res.code = "unreachable";
            res.message = "the connection was refused or could not be made";
        } else if (op->bad) {
            res.code = "bad_response";
            res.message = "the answer's status was not one to pass on (1xx, 101, or out of range)";
        } else if (op->mode == 0 && (op->err == EVREQ_HTTP_INVALID_HEADER || op->err == EVREQ_HTTP_DATA_TOO_LONG)) {
            res.code = "bad_response";
            res.message = "the answer's status line or headers were invalid or too long";
        } else if (op->mode != 0 || op->got_bytes) {
            res.code = "upstream_broke";
            res.message = op->mode != 0 ? "the answer broke off" : "the answer broke off before its headers were complete";
        } else if (op->err == EVREQ_HTTP_TIMEOUT) {
            res.code = "timeout";
            res.message = "the endpoint went quiet for longer than the time limit";
        } else {
            res.code = "closed";
            res.message = "the endpoint closed the connection before answering";
        }
        if (op->mode == 2) {
            /* the client has the answer's start: close its connection without the end */
            struct evhttp_request *client = r->req;
            if (client) {
                struct evhttp_connection *cc = evhttp_request_get_connection(client);
                obleth_http_detach_close_cb(r);
                r->req = NULL;
                if (cc) evhttp_connection_free(cc);
            }
            r->state = 2;
            r->closed = 1;
            res.status = op->status;
        }
    }
    op_free(op);
    proxy_done(r, &res);
}

/* Copy the client's end-to-end headers onto the upstream request. */
static void copy_request_headers(struct evhttp_request *client, struct evhttp_request *up, endpoint *e,
                                 const char *via) {
    struct evkeyvalq *in = evhttp_request_get_input_headers(client);
    struct evkeyvalq *out = evhttp_request_get_output_headers(up);
    char named[MAX_NAMED][64];
    int nn = connection_named(evhttp_find_header(in, "Connection"), named);
    const char *xff = NULL;
    for (struct evkeyval *h = in->tqh_first; h; h = h->next.tqe_next) {
        int kind = header_kind(h->key);
        if (!end_to_end(h, kind, named, nn) || kind == H_HOST || kind == H_EXPECT || kind == H_AUTHORIZATION)
            continue;
        if (kind == H_XFF) {
            xff = h->value;
            continue;
        }
        evhttp_add_header(out, h->key, h->value);
    }
    char host[300];
    snprintf(host, sizeof host, strchr(e->host, ':') ? "[%s]:%d" : "%s:%d", e->host, e->port);
    evhttp_add_header(out, "Host", host);
    char *peer = NULL;
    ev_uint16_t pport = 0;
    struct evhttp_connection *cc = evhttp_request_get_connection(client);
    if (cc) evhttp_connection_get_peer(cc, &peer, &pport);
    if (peer) {
        size_t n = (xff ? strlen(xff) + 2 : 0) + strlen(peer) + 1;
        char *v = malloc(n);
        if (v) {
            if (xff) snprintf(v, n, "%s, %s", xff, peer);
            else snprintf(v, n, "%s", peer);
            evhttp_add_header(out, "X-Forwarded-For", v);
            free(v);
        }
    } else if (xff) {
        evhttp_add_header(out, "X-Forwarded-For", xff);
    }
    if (via) evhttp_add_header(out, "Via", via);
}

/* Send the client's request to the endpoint (once), with via (or NULL) as our Via entry. 0 | -1. */
static int op_send(struct proxy_op *op, const char *via) {
    struct evhttp_request *client = op->res->req;
    op->conn = pool_take(op->ep, &op->fresh);
    if (!op->conn) return -1;
    op->incb = evbuffer_add_cb(bufferevent_get_input(evhttp_connection_get_bufferevent(op->conn)), up_input_cb, op);
    struct timeval tv = obleth_tv(op->fresh ? op->connect_timeout : op->timeout);
    evhttp_connection_set_timeout_tv(op->conn, &tv);
    struct evhttp_request *up = evhttp_request_new(up_done_cb, op);
    if (!up) return -1;
    evhttp_request_set_header_cb(up, up_header_cb);
    evhttp_request_set_chunked_cb(up, up_chunk_cb);
    evhttp_request_set_error_cb(up, up_error_cb);
    copy_request_headers(client, up, op->ep, via);
    struct evbuffer *body = evhttp_request_get_input_buffer(client);
    size_t n = evbuffer_get_length(body);
    enum evhttp_cmd_type method = evhttp_request_get_command(client);
    if (n > 0 || method == EVHTTP_REQ_POST || method == EVHTTP_REQ_PUT || method == EVHTTP_REQ_PATCH) {
        char cl[32];
        snprintf(cl, sizeof cl, "%zu", n);
        evhttp_add_header(evhttp_request_get_output_headers(up), "Content-Length", cl);
        /* copied, not moved: the router may send the request to another replica */
        if (n > 0) evbuffer_add(evhttp_request_get_output_buffer(up), evbuffer_pullup(body, -1), n);
    }
    op->up = up;
    op->t0 = obleth_mono();
    if (evhttp_make_request(op->conn, up, method, op->target) != 0) {
        /* evhttp freed the request */
        op->up = NULL;
        op->finished = 1;
        op->failed_connect = 1;
        op_finish_later(op);
        return 0;
    }
    if (op->fresh && op->up && !op->finished) {
        evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(op->conn));
        if (fd >= 0) {
            op->connw = event_new(obleth_base(), fd, EV_WRITE, connw_cb, op);
            struct timeval ct = obleth_tv(op->connect_timeout);
            if (op->connw) event_add(op->connw, &ct);
        }
    }
    return 0;
}

/* The number t[k] (default dflt when nil); raises "<who>: 'k' must be ..." unless it
   is a number in lo..hi. */
static double opt_number(lua_State *L, int t, const char *k, double dflt, double lo, double hi, const char *who) {
    double v = dflt;
    if (lua_getfield(L, t, k) != LUA_TNIL) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "%s: '%s' must be a number", who, k);
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    if (isnan(v) || v < lo || v > hi) luaL_error(L, "%s: '%s' must be %f..%f", who, k, lo, hi);
    return v;
}

/* Pass r's request (r->req set, nothing sent yet) on to o->host:o->port; proxy_done
   hears the outcome from the loop. NULL and *why set when the name does not resolve
   or memory ran out. */
static struct proxy_op *proxy_start(response *r, const proxy_opts *o, const char **why) {
    *why = NULL;
    double now = obleth_mono();
    endpoint *e = pool_endpoint(o->host, o->port, now, why);
    if (!e) return NULL;
    /* one block: the op, its three events (event_assign'ed, sized by the library
       at run time) and the request target */
    const char *uri = o->target ? o->target : evhttp_request_get_uri(r->req);
    if (!uri || *uri != '/') uri = "/";
    size_t evsz = (event_get_struct_event_size() + 15) & ~(size_t)15, tlen = strlen(uri) + 1;
    size_t head = (sizeof(struct proxy_op) + 15) & ~(size_t)15;
    size_t tailsz = o->usage ? USAGE_TAIL : 0;
    struct proxy_op *op = calloc(1, head + 3 * evsz + tlen + tailsz);
    if (!op) {
        *why = "out of memory";
        return NULL;
    }
    char *mem = (char *)op + head;
    op->done_ev = (struct event *)mem;
    op->timer = (struct event *)(mem + evsz);
    op->slow = (struct event *)(mem + 2 * evsz);
    op->target = mem + 3 * evsz;
    memcpy(op->target, uri, tlen);
    if (tailsz) op->tail = op->target + tlen;
    event_assign(op->done_ev, obleth_base(), -1, 0, done_ev_cb, op);
    evtimer_assign(op->timer, obleth_base(), timer_cb, op);
    evtimer_assign(op->slow, obleth_base(), slow_cb, op);
    op->res = r;
    op->ep = e;
    e->users++;
    e->last_used = now;
    op->stream = o->stream;
    op->head = evhttp_request_get_command(r->req) == EVHTTP_REQ_HEAD;
    op->connect_timeout = o->connect_timeout;
    op->timeout = o->timeout;
    op->buffer_limit = o->buffer_limit;
    op->err = -1;
    op->held = evbuffer_new();
    if (!op->held || op_send(op, o->via) != 0) {
        op_free(op);
        *why = "out of memory";
        return NULL;
    }
    event_base_update_cache_time(obleth_base());
    struct timeval tv = obleth_tv(o->timeout);
    evtimer_add(op->timer, &tv);
    struct timeval one = {1, 0};
    evtimer_add(op->slow, &one);
    r->proxy = op;
    return op;
}

int obleth_res_proxy(lua_State *L) {
    response *r = luaL_checkudata(L, 1, RES_MT);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (r->state != 0) return luaL_error(L, "proxy: the response was already sent");
    if (r->proxy) return luaL_error(L, "proxy: a proxy is already in progress");
    proxy_opts o;
    lua_getfield(L, 2, "host");
    o.host = lua_tostring(L, -1);
    if (!o.host || !*o.host || strlen(o.host) > 253 || strpbrk(o.host, " \t\r\n/?#@"))
        return luaL_error(L, "proxy: 'host' must be a host name or address");
    lua_Integer port = 0;
    lua_getfield(L, 2, "port");
    if (lua_isinteger(L, -1)) port = lua_tointeger(L, -1);
    if (port < 1 || port > 65535) return luaL_error(L, "proxy: 'port' must be an integer 1..65535");
    o.port = (int)port;
    lua_getfield(L, 2, "target");
    o.target = lua_tostring(L, -1);
    if (o.target) {
        if (o.target[0] != '/') return luaL_error(L, "proxy: 'target' must start with '/'");
        if (!obleth_http_target_ok(o.target))
            return luaL_error(L, "proxy: 'target' must not contain spaces, control characters or non-ASCII bytes");
    }
    lua_getfield(L, 2, "via");
    o.via = lua_tostring(L, -1);
    if (o.via) {
        size_t n = strlen(o.via);
        int ok = n > 0 && n <= 128;
        for (size_t i = 0; ok && i < n; i++) ok = o.via[i] >= 0x20 && o.via[i] < 0x7f;
        if (!ok) return luaL_error(L, "proxy: 'via' must be 1..128 printable ASCII characters");
    }
    lua_getfield(L, 2, "stream");
    o.stream = lua_toboolean(L, -1);
    lua_getfield(L, 2, "usage");
    o.usage = lua_toboolean(L, -1);
    lua_pop(L, 2); /* host's, target's and via's strings stay anchored on the stack until the call returns */
    o.connect_timeout = opt_number(L, 2, "connect_timeout", 5, 0.001, 1e6, "proxy");
    o.timeout = opt_number(L, 2, "timeout", 3600, 0.001, 1e7, "proxy");
    o.buffer_limit = (size_t)opt_number(L, 2, "buffer_limit", 1048576, 0, 1 << 30, "proxy");
    if (!lua_isyieldable(L)) return luaL_error(L, "res:proxy must be called inside the handler's task");
    if (!r->req) {
        lua_pushinteger(L, 499);
        lua_pushliteral(L, "client_gone");
        lua_pushnil(L);
        lua_pushnumber(L, 0);
        return 4;
    }
    const char *why = NULL;
    if (!proxy_start(r, &o, &why)) {
        if (why && strcmp(why, "out of memory") == 0) return luaL_error(L, "out of memory");
        lua_pushnil(L);
        lua_pushliteral(L, "unreachable");
        lua_pushfstring(L, "cannot resolve %s: %s", o.host, why ? why : "unknown error");
        return 3;
    }
    obleth_wait_begin(L, &r->w, "res:proxy");
    return lua_yield(L, 0);
}

void obleth_proxy_client_gone(struct proxy_op *op) {
    if (op->clientw) event_del(op->clientw); /* its descriptor is about to close */
    op->client_gone = 1;
    op_finish_later(op);
}

void obleth_proxy_abandon(struct proxy_op *op) {
    op->res = NULL;
    op_free(op);
}

/* http.proxy_stats() -> {connections_opened, connections_reused, completed, failed,
   client_gone, endpoints, idle_connections}: counts since the process started, and the pool now. */
static int l_proxy_stats(lua_State *L) {
    lua_Integer eps = 0, idle = 0;
    for (endpoint *e = g_endpoints; e; e = e->next) {
        eps++;
        idle += e->n;
    }
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, g_stats.opened); lua_setfield(L, -2, "connections_opened");
    lua_pushinteger(L, g_stats.reused); lua_setfield(L, -2, "connections_reused");
    lua_pushinteger(L, g_stats.completed); lua_setfield(L, -2, "completed");
    lua_pushinteger(L, g_stats.failed); lua_setfield(L, -2, "failed");
    lua_pushinteger(L, g_stats.client_gone); lua_setfield(L, -2, "client_gone");
    lua_pushinteger(L, eps); lua_setfield(L, -2, "endpoints");
    lua_pushinteger(L, idle); lua_setfield(L, -2, "idle_connections");
    return 1;
}

/* At lua_close: free the idle connections; an endpoint still in use goes with its last proxy. */
static int pool_gc(lua_State *L) {
    (void)L;
    g_closed = 1;
    endpoint **pp = &g_endpoints;
    while (*pp) {
        endpoint *e = *pp;
        if (e->users == 0) {
            *pp = e->next;
            endpoint_free(e);
        } else {
            endpoint_drop_idle(e);
            pp = &e->next;
        }
    }
    return 0;
}

void obleth_http_proxy_open(lua_State *L) {
    /* stack: the obleth.http module table */
    lua_pushcfunction(L, l_proxy_stats);
    lua_setfield(L, -2, "proxy_stats");
    obleth_sentinel(L, "obleth.http.proxy_pool", pool_gc);
}
