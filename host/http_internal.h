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

/* The request-framing guard (http_frame.c), for evhttp_set_bevcb: the socket bufferevent of
   a new client connection, watched as bytes arrive; ambiguous framing (two Content-Lengths,
   "+15", obs-fold, NUL, bare LF, a body on GET) becomes a marked request, answered 400. */
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
