/*
 * http_internal.h — what the server (http_server.c) and the proxy
 * (http_proxy.c) of obleth.http share. Not a public interface.
 */
#ifndef OBLETH_HTTP_INTERNAL_H
#define OBLETH_HTTP_INTERNAL_H

#include "host.h"

#include <stddef.h>

struct evhttp_request;
struct evhttp_connection;
struct event_base;
struct bufferevent;
struct proxy_op;

#define RES_MT "obleth.http.res"

/* The `res` object a handler answers through. */
typedef struct {
    struct evhttp_request *req; /* NULL once answered or the connection is gone */
    int state;                  /* 0 new, 1 streaming, 2 done */
    int closed;                 /* the client's connection closed */
    int writing;                /* a res:write waits for its chunk to go out */
    struct proxy_op *proxy;     /* a res:proxy in progress, or NULL */
    obleth_waiter w;            /* the handler task, while it waits */
} response;

/* The reason phrase of a status code ("" for an unusual one). */
const char *obleth_http_reason(int status);

/* Is t a request target to accept or send: printable ASCII, no space (RFC 9112 3.2)? */
int obleth_http_target_ok(const char *t);

/* A server's connection limits and the connections it holds (http_frame.c keeps them up to date):
   at most max_conns open; a header section must be complete header_timeout seconds after the
   connection opened (or after its first byte, on a kept-alive connection); a kept-alive connection
   with no byte of a next request closes after idle_timeout seconds. When the cap is reached or
   accept() runs out of descriptors, the connection that has waited longest for its header section
   (idle ones included; not one just accepted and not read yet) is closed to make room; when there
   is none, the new one gets a 503. */
struct evconnlistener;
struct frame;
typedef struct obleth_http_conns {
    int max_conns;
    double header_timeout, idle_timeout;
    size_t body_limit;                 /* the largest request body (evhttp answers 413 above it) */
    int open;                          /* connections now open */
    struct frame *wait_head, *wait_tail; /* waiting for a header section, the longest first */
    struct evconnlistener *lst;        /* for the accept back-off */
    int reserve_fd;                    /* a descriptor kept for refusing when none is left */
    struct event *resume;              /* re-enables a paused listener */
    int episode;                       /* accept() is failing: logged once, until it recovers */
    double episode_at;                 /* when accept last failed */
    unsigned long episode_refused, episode_evicted;
    int burst, burst_max;              /* connections accepted since the listener last resumed */
    unsigned long gen;                 /* batches of accepts (the listener resumed) so far */
    struct frame *pending;             /* accepted, not yet adopted by the guard */
    struct obleth_http_conns *next;    /* every server's, for the accept error callback */
} obleth_http_conns;

/* Counters of every server in the process, for /metrics (http.server_stats). */
typedef struct {
    unsigned long long refused, evicted, header_timeouts, idle_closes, accept_errors;
    long long open;
} obleth_http_conn_stats;
extern obleth_http_conn_stats obleth_http_stats;

/* Start the limits of a server (c zeroed, limits set) on its listener; 0, or -1 (out of memory). */
int obleth_http_conns_init(obleth_http_conns *c, struct evconnlistener *lst);
/* The listener is gone (srv:stop_listening): no more accept back-off for it. */
void obleth_http_conns_unlisten(obleth_http_conns *c);
/* Release them (after evhttp_free closed the connections). */
void obleth_http_conns_free(obleth_http_conns *c);
/* A request reached the handler: hear when its answer is complete (the connection waits again). */
void obleth_http_frame_request(struct evhttp_request *req);

/* The request-framing guard (http_frame.c), for evhttp_set_bevcb (arg: the server's
   obleth_http_conns): the socket bufferevent of a new client connection, watched as bytes
   arrive; ambiguous framing (two Content-Lengths, "+15", obs-fold, NUL, bare LF, a body on
   GET) becomes a marked request, answered 400. */
struct bufferevent *obleth_http_frame_bev(struct event_base *base, void *arg);

/* The close callback of a client connection (the guard owns the connection's own slot;
   cb NULL: none). Connections the guard does not watch get it set directly. */
void obleth_http_frame_set_closecb(struct evhttp_connection *c, void (*cb)(struct evhttp_connection *, void *),
                                   void *arg);

/* Is req the marker the guard put in place of a refused request? Then it is answered
   (400, its code, Connection: close) and 1 is returned; else 0. */
int obleth_http_frame_refused(struct evhttp_request *req);

/* For the fuzzer: the guard over data delivered in pieces; 1 when it refused a request. */
int obleth_http_frame_feed(const unsigned char *data, size_t n);

/* Stop hearing about the client connection's close (the answer is complete). */
void obleth_http_detach_close_cb(response *r);

/* res:proxy(opts) (http_proxy.c). */
int obleth_res_proxy(lua_State *L);
/* The client's connection closed while r->proxy was in progress. */
void obleth_proxy_client_gone(struct proxy_op *op);
/* The response object is being collected (shutdown): drop the proxy without resuming. */
void obleth_proxy_abandon(struct proxy_op *op);
/* Add http.proxy_stats to the module table at the top of the stack and
   register the connection pool's finalizer (once). */
void obleth_http_proxy_open(lua_State *L);

#endif
