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

/* The number t[k] (default dflt when nil); raises "<who>: 'k' must be ..." unless it
   is a number in lo..hi. */
double obleth_http_opt_number(lua_State *L, int t, const char *k, double dflt, double lo, double hi, const char *who);

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

/* What obleth_proxy_start needs to pass a request on (see res:proxy in http_proxy.c). */
typedef struct {
    const char *host;   /* a name or a numeric address */
    int port;
    const char *target; /* NULL: the client's request target */
    int stream;
    double connect_timeout, timeout; /* seconds */
    size_t buffer_limit;             /* bytes */
} obleth_proxy_opts;

/* How an exchange ended: status 0 when nothing reached the client (code says why:
   "unreachable", "connect_timeout", "closed", "timeout", "bad_response",
   "upstream_broke"); otherwise the status sent (code NULL, "upstream_broke" after
   the answer's start, or "client_gone" with status 499). ttfb in seconds. */
typedef struct {
    int status;
    const char *code;
    const char *message;
    double ttfb;
} obleth_proxy_result;

typedef void (*obleth_proxy_done)(response *r, const obleth_proxy_result *res, void *arg);

/* Pass r's request (r->req set, nothing sent yet) on to o->host:o->port. done is
   called from the loop when the exchange is over (after r->proxy is cleared; r may
   be freed there). NULL and *why set when the name does not resolve or memory ran out. */
struct proxy_op *obleth_proxy_start(response *r, const obleth_proxy_opts *o, obleth_proxy_done done, void *arg,
                                    const char **why);

/* The "model" and "stream" of a request body (jsonscan.c): 1 with *model pointing
   into text when the body is one JSON object with a plain string "model"; 0 otherwise. */
int obleth_jsonscan_model(const char *text, size_t len, const char **model, size_t *mlen, int *stream);

/* A first attempt the fast path made, for the Lua router (req.prior). */
typedef struct {
    const char *endpoint, *code, *message;
    double started; /* monotonic seconds the request arrived */
} obleth_http_prior;

/* Hear about r->req's client connection closing (sets r->closed, tells r->proxy). */
void obleth_http_watch_close(response *r);
/* Run the server's Lua handler (by its registry reference) on from->req in a new
   task, with a res object that takes over from `from` (its request and close
   callback); prior, when given, becomes req.prior. Nothing happens when
   from->req is NULL (the client is gone). */
void obleth_http_run_handler(int handler_ref, response *from, const obleth_http_prior *prior);

/* The router's fast path (http_fast.c). */
struct obleth_fast;
/* Answer req without Lua when the table knows how: 1 when it took the request. */
int obleth_fast_try(struct obleth_fast *ft, struct evhttp_request *req, int handler_ref);
/* The fast table at idx, or NULL. */
struct obleth_fast *obleth_fast_check(lua_State *L, int idx);
/* Add http.fast to the module table at the top of the stack. */
void obleth_http_fast_open(lua_State *L);

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
