/*
 * http_internal.h — what the server (http_server.c) and the proxy
 * (http_proxy.c) of obleth.http share. Not a public interface.
 */
#ifndef OBLETH_HTTP_INTERNAL_H
#define OBLETH_HTTP_INTERNAL_H

#include "host.h"

#include <stddef.h>

struct evhttp_request;
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
