/*
 * http_server.c — HTTP/1.1 server on libevent's evhttp (part of obleth.http).
 *
 * Each request runs its handler in its own task, so a handler may sleep,
 * make HTTP requests or stream a response without blocking other requests.
 *
 * Lua API:
 *   srv = http.server{
 *     host = "127.0.0.1", port = 8080,   -- port 0 picks a free port
 *     handler = function(req, res) ... end,
 *     body_limit = 1048576,              -- bytes; larger bodies get 413
 *     timeout = 300,                     -- seconds of inactivity within a request
 *     max_connections = n,               -- open client connections at most (default: half of
 *                                           the descriptor limit less 32, at least 16)
 *     header_timeout = 10,               -- seconds for a header section to arrive whole
 *                                           (from the accept, or a kept-alive connection's
 *                                           first byte of its next request)
 *     idle_timeout = 5,                  -- seconds a kept-alive connection may wait idle
 *   }                                    -> server | nil, message, code
 *   At the cap (or when accept() finds no descriptor) the connection that has waited longest
 *   for a header section is closed (not one just accepted and not read yet: then accepting
 *   pauses 50 ms); when every connection is busy with a request, the new one gets
 *   "503, Connection: close" (code too_many_connections) written straight to its socket,
 *   then is closed. See http_frame.c.
 *   code: "addr_in_use" | "permission" | "addr_not_available" | "bad_address" | "error"
 *   srv:port() -> the bound port;  srv:close()
 *   srv:stop_listening()  refuse new connections, keep serving open ones
 *   http.server_stats() -> {open=, refused=, evicted=, header_timeouts=, idle_closes=,
 *                           accept_errors=}: every server of the process, since it started
 *
 *   req = {method=, target= (raw request target), path= (raw, before '?'),
 *          query = {name = value} (decoded; a piece without '=' has the value ""),
 *          query_error = why the query string could not be read (a name given twice or empty, a
 *          NUL byte): then query is {} (nothing of it is used), headers = {["lower-name"] = v}
 *          (a header sent more than once: its values joined with ", ", and
 *          repeated = {["lower-name"] = times} says so),
 *          body = "bytes", remote_addr = "127.0.0.1", remote_port = n}
 *
 *   The handler either returns {status=, headers=, body=} (or status,
 *   headers, body), or answers through res:
 *     res:send(status, headers, body)
 *     res:start(status, headers)   -- chunked transfer (SSE: text/event-stream)
 *     res:write(chunk)             -- waits until the chunk is handed to the
 *                                     socket; true | nil, "closed"
 *     res:finish()
 *     res:sent(), res:closed()
 *     res:client_gone()            -- before any answer: peeks whether the client closed
 *                                     its connection (then closes it: res:closed())
 *   A handler that raises gets a 500 with a JSON error body; the error and
 *   traceback are logged, never sent to the client.
 */
#define _POSIX_C_SOURCE 200809L
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define SERVER_MT "obleth.http.server"
typedef struct {
    struct evhttp *http;
    struct evhttp_bound_socket *bound; /* NULL once no longer listening */
    int handler_ref;
    int self_ref;
    int port;
    obleth_http_conns conns;
    int conns_live; /* conns was initialised */
} server;

const char *obleth_http_reason(int status) {
    switch (status) {
    case 200: return "OK"; case 201: return "Created"; case 202: return "Accepted";
    case 204: return "No Content"; case 301: return "Moved Permanently"; case 302: return "Found";
    case 304: return "Not Modified"; case 400: return "Bad Request"; case 401: return "Unauthorized";
    case 403: return "Forbidden"; case 404: return "Not Found"; case 405: return "Method Not Allowed";
    case 409: return "Conflict"; case 413: return "Payload Too Large"; case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests"; case 500: return "Internal Server Error";
    case 502: return "Bad Gateway"; case 503: return "Service Unavailable"; case 504: return "Gateway Timeout";
    default: return "";
    }
}

static const char *method_name(enum evhttp_cmd_type c) {
    switch (c) {
    case EVHTTP_REQ_GET: return "GET"; case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD"; case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE"; case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE"; case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return "UNKNOWN";
    }
}

/* ---- response object --------------------------------------------------------- */

static response *check_res(lua_State *L) { return luaL_checkudata(L, 1, RES_MT); }

static void conn_close_cb(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    response *r = arg;
    r->closed = 1;
    if (r->proxy) obleth_proxy_client_gone(r->proxy);
    if (r->req) {
        /* On EOF libevent detaches a request the user has not finished
           (evcon == NULL) and leaves it to us to free; a request still
           attached is freed by libevent with its connection. */
        if (evhttp_request_get_connection(r->req) == NULL) evhttp_request_free(r->req);
        r->req = NULL;
    }
    if (r->writing) {
        r->writing = 0;
        lua_State *co = r->w.co;
        if (co) {
            lua_pushnil(co);
            lua_pushliteral(co, "closed");
            obleth_wait_resume(&r->w, 2);
        }
    }
}

/* Hear about the client connection's close; the framing guard owns the connection's close
   callback slot, so it is set through the guard. */
static void watch_close(response *r) {
    struct evhttp_connection *c = r->req ? evhttp_request_get_connection(r->req) : NULL;
    if (c) obleth_http_frame_set_closecb(c, conn_close_cb, r);
}

void obleth_http_detach_close_cb(response *r) {
    if (!r->req) return;
    struct evhttp_connection *c = evhttp_request_get_connection(r->req);
    if (c) obleth_http_frame_set_closecb(c, NULL, NULL);
}

static int add_headers(lua_State *L, int idx, struct evhttp_request *req) {
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (lua_isnoneornil(L, idx)) return 0;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) == LUA_TSTRING && lua_isstring(L, -1)) {
            const char *k = lua_tostring(L, -2), *v = lua_tostring(L, -1);
            if (strpbrk(k, "\r\n:") || strpbrk(v, "\r\n")) {
                lua_pop(L, 2);
                return luaL_error(L, "response header '%s' contains CR, LF or ':'", k);
            }
            evhttp_remove_header(out, k);
            evhttp_add_header(out, k, v);
        }
        lua_pop(L, 1);
    }
    return 0;
}

static int res_send(lua_State *L) {
    response *r = check_res(L);
    int status = (int)luaL_checkinteger(L, 2);
    size_t n = 0;
    const char *body = luaL_optlstring(L, 4, "", &n);
    if (r->state != 0) return luaL_error(L, "response already sent");
    r->state = 2;
    if (!r->req) { lua_pushnil(L); lua_pushliteral(L, "closed"); return 2; }
    add_headers(L, 3, r->req);
    struct evbuffer *b = evbuffer_new();
    if (!b) return luaL_error(L, "out of memory");
    if (evhttp_request_get_command(r->req) == EVHTTP_REQ_HEAD) {
        /* a HEAD answer has headers only; announce the length a GET would get */
        char cl[32];
        snprintf(cl, sizeof cl, "%zu", n);
        struct evkeyvalq *out = evhttp_request_get_output_headers(r->req);
        if (!evhttp_find_header(out, "Content-Length")) evhttp_add_header(out, "Content-Length", cl);
    } else {
        evbuffer_add(b, body, n);
    }
    obleth_http_detach_close_cb(r);
    evhttp_send_reply(r->req, status, obleth_http_reason(status), b);
    evbuffer_free(b);
    r->req = NULL;
    lua_pushboolean(L, 1);
    return 1;
}

static int res_start(lua_State *L) {
    response *r = check_res(L);
    int status = (int)luaL_checkinteger(L, 2);
    if (r->state != 0) return luaL_error(L, "response already started");
    r->state = 1;
    if (!r->req) { lua_pushnil(L); lua_pushliteral(L, "closed"); return 2; }
    add_headers(L, 3, r->req);
    evhttp_send_reply_start(r->req, status, obleth_http_reason(status));
    lua_pushboolean(L, 1);
    return 1;
}

static void chunk_sent_cb(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    response *r = arg;
    if (!r->writing) return;
    r->writing = 0;
    lua_pushboolean(r->w.co, 1);
    obleth_wait_resume(&r->w, 1);
}

static int res_write(lua_State *L) {
    response *r = check_res(L);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    if (r->state != 1) return luaL_error(L, "write: call res:start first");
    if (!r->req) { lua_pushnil(L); lua_pushliteral(L, "closed"); return 2; }
    if (n == 0) { lua_pushboolean(L, 1); return 1; }
    struct evbuffer *b = evbuffer_new();
    if (!b) return luaL_error(L, "out of memory");
    evbuffer_add(b, s, n);
    if (lua_isyieldable(L)) {
        evhttp_send_reply_chunk_with_cb(r->req, b, chunk_sent_cb, r);
        evbuffer_free(b);
        r->writing = 1;
        obleth_wait_begin(L, &r->w, "res:write");
        return lua_yield(L, 0);
    }
    evhttp_send_reply_chunk(r->req, b);
    evbuffer_free(b);
    lua_pushboolean(L, 1);
    return 1;
}

static int res_finish(lua_State *L) {
    response *r = check_res(L);
    if (r->state == 2) return 0;
    if (r->state != 1) return luaL_error(L, "finish: call res:start first");
    r->state = 2;
    if (r->req) {
        obleth_http_detach_close_cb(r);
        evhttp_send_reply_end(r->req);
        r->req = NULL;
    }
    return 0;
}

static int res_sent(lua_State *L) {
    response *r = check_res(L);
    lua_pushboolean(L, r->state != 0);
    return 1;
}

static int res_closed(lua_State *L) {
    response *r = check_res(L);
    lua_pushboolean(L, r->closed);
    return 1;
}

/* res:client_gone(): has the client closed its connection while its answer is still to come? A peek
   at the socket (nothing is read): an end-of-file or an error closes the connection (the close
   callback runs: res:closed() is true from then on); bytes of a pipelined request, or none yet,
   say it is still there. For a handler that waits before answering (the router's hold of a model at
   zero), where libevent itself does not watch the connection. */
static int res_client_gone(lua_State *L) {
    response *r = check_res(L);
    if (!r->closed && r->req && r->state == 0) {
        struct evhttp_connection *cc = evhttp_request_get_connection(r->req);
        evutil_socket_t fd = cc ? bufferevent_getfd(evhttp_connection_get_bufferevent(cc)) : -1;
        if (fd >= 0) {
            char byte;
            ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                evhttp_connection_free(cc); /* runs conn_close_cb: r->closed */
        }
    }
    lua_pushboolean(L, r->closed);
    return 1;
}

static int res_gc(lua_State *L) {
    response *r = check_res(L);
    if (r->proxy) {
        obleth_proxy_abandon(r->proxy);
        r->proxy = NULL;
    }
    if (r->req) {
        /* a handler task that vanished without answering (shutdown) */
        obleth_http_detach_close_cb(r);
        if (r->state == 1) evhttp_send_reply_end(r->req);
        else evhttp_send_error(r->req, 500, "Internal Server Error");
        r->req = NULL;
    }
    obleth_wait_drop(L, &r->w);
    return 0;
}

/* ---- per-request dispatch ------------------------------------------------------ */

static const char trampoline_src[] =
    "local handler, req, res, log = ...\n"
    "local ok, a, b, c = xpcall(handler, debug.traceback, req, res)\n"
    "if not ok then\n"
    "  log.error('http_handler_error', {method = req.method, path = req.path, error = tostring(a)})\n"
    "  if not res:sent() then\n"
    "    res:send(500, {['Content-Type'] = 'application/json'},\n"
    "      '{\"error\":{\"code\":\"internal\",\"message\":\"internal server error\"}}')\n"
    "  elseif not res:closed() then res:finish() end\n"
    "  return\n"
    "end\n"
    "if res:sent() or res:closed() then return end -- answered, or nobody left to answer\n"
    "if type(a) == 'table' then res:send(a.status or 200, a.headers, a.body or '')\n"
    "elseif type(a) == 'number' then res:send(a, b, c or '')\n"
    "else\n"
    "  log.error('http_handler_error', {method = req.method, path = req.path, error = 'handler returned no response'})\n"
    "  res:send(500, {['Content-Type'] = 'application/json'},\n"
    "    '{\"error\":{\"code\":\"internal\",\"message\":\"handler returned no response\"}}')\n"
    "end\n";

/* One piece of a query string, percent-decoded ('+' is a space): a new string the caller frees, its
 * length in *n; NULL when it does not decode. */
static char *query_piece(const char *s, size_t len, size_t *n) {
    char *raw = malloc(len + 1);
    if (!raw) return NULL;
    memcpy(raw, s, len);
    raw[len] = '\0';
    char *out = evhttp_uridecode(raw, 1, n);
    free(raw);
    return out;
}

/* Sets the pieces of query string qs ("a=1&b=&c") into the table on top: each name once, its value a
 * string ("" for a piece without '='; empty pieces are skipped). Returns NULL, or why the query cannot
 * be read (a name given twice, an empty name, a NUL byte): the caller answers 400 rather than act on a
 * part of it. */
static const char *push_query(lua_State *L, const char *qs) {
    for (const char *s = qs; *s;) {
        const char *amp = strchr(s, '&');
        size_t len = amp ? (size_t)(amp - s) : strlen(s);
        if (len > 0) {
            const char *eq = memchr(s, '=', len);
            size_t kl = eq ? (size_t)(eq - s) : len, kn = 0, vn = 0;
            char *k = query_piece(s, kl, &kn);
            char *v = query_piece(eq ? eq + 1 : "", eq ? len - kl - 1 : 0, &vn);
            const char *why = NULL;
            if (!k || !v) why = "the query string could not be decoded";
            else if (kn == 0) why = "a query parameter has no name";
            else if (memchr(k, '\0', kn) || memchr(v, '\0', vn)) why = "a query parameter holds a NUL byte (%00)";
            else {
                lua_pushlstring(L, k, kn);
                if (lua_rawget(L, -2) != LUA_TNIL) why = "a query parameter is given more than once";
                lua_pop(L, 1);
            }
            if (!why) {
                lua_pushlstring(L, k, kn);
                lua_pushlstring(L, v, vn);
                lua_rawset(L, -3);
            }
            free(k);
            free(v);
            if (why) return why;
        }
        if (!amp) break;
        s = amp + 1;
    }
    return NULL;
}

static void push_request(lua_State *L, struct evhttp_request *req) {
    lua_createtable(L, 0, 9);
    lua_pushstring(L, method_name(evhttp_request_get_command(req)));
    lua_setfield(L, -2, "method");
    const char *target = evhttp_request_get_uri(req);
    lua_pushstring(L, target ? target : "/");
    lua_setfield(L, -2, "target");
    const char *q = target ? strchr(target, '?') : NULL;
    if (q) lua_pushlstring(L, target, (size_t)(q - target));
    else lua_pushstring(L, target ? target : "/");
    lua_setfield(L, -2, "path");
    lua_newtable(L);
    if (q) {
        const char *bad = push_query(L, q + 1);
        if (bad) {
            lua_pushstring(L, bad);
            lua_setfield(L, -3, "query_error");
            lua_pop(L, 1);
            lua_newtable(L); /* nothing of a query that could not be read is used */
        }
    }
    lua_setfield(L, -2, "query");
    lua_newtable(L); /* repeated: {["lower-name"] = times it came} for a header that came more than once */
    int rep = lua_gettop(L);
    lua_newtable(L);
    int hs = lua_gettop(L);
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    for (struct evkeyval *kv = in->tqh_first; kv; kv = kv->next.tqe_next) {
        luaL_Buffer lb;
        luaL_buffinit(L, &lb);
        for (const char *p = kv->key; *p; p++) {
            char c = *p;
            luaL_addchar(&lb, (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c);
        }
        luaL_pushresult(&lb);
        lua_pushvalue(L, -1);
        if (lua_rawget(L, hs) == LUA_TSTRING) {
            lua_pushvalue(L, -2); /* name */
            lua_pushvalue(L, -1);
            lua_Integer times = lua_rawget(L, rep) == LUA_TNUMBER ? lua_tointeger(L, -1) : 1;
            lua_pop(L, 1);
            lua_pushinteger(L, times + 1);
            lua_rawset(L, rep);
            lua_pushliteral(L, ", ");
            lua_pushstring(L, kv->value);
            lua_concat(L, 3);
        } else {
            lua_pop(L, 1);
            lua_pushstring(L, kv->value);
        }
        lua_rawset(L, hs);
    }
    lua_setfield(L, -3, "headers");
    lua_setfield(L, -2, "repeated");
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(body);
    if (n) {
        unsigned char *p = evbuffer_pullup(body, (ev_ssize_t)n);
        lua_pushlstring(L, (const char *)p, n);
    } else {
        lua_pushliteral(L, "");
    }
    lua_setfield(L, -2, "body");
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) {
        char *addr = NULL;
        ev_uint16_t port = 0;
        evhttp_connection_get_peer(c, &addr, &port);
        if (addr) { lua_pushstring(L, addr); lua_setfield(L, -2, "remote_addr"); }
        lua_pushinteger(L, port);
        lua_setfield(L, -2, "remote_port");
    }
}

/* A request target (RFC 9112 section 3.2) is printable ASCII with no space;
   libevent lets spaces, bare CRs and other control bytes through. */
int obleth_http_target_ok(const char *t) {
    if (!t) return 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f) return 0;
    return 1;
}

static void gen_cb(struct evhttp_request *req, void *arg) {
    server *s = arg;
    obleth_http_frame_request(req);
    if (obleth_http_frame_refused(req)) return;
    if (!obleth_http_target_ok(evhttp_request_get_uri(req))) {
        /* the target itself is not logged: it is what cannot be trusted on one line */
        obleth_log("info", "http_request", "method=%s status=400 code=bad_target",
                   method_name(evhttp_request_get_command(req)));
        struct evbuffer *b = evbuffer_new();
        if (b) {
            evbuffer_add_printf(b, "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\","
                                   "\"param\":null,\"code\":\"bad_target\"}}",
                                "the request target has a space, a control character or a non-ASCII byte");
            evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
            evhttp_send_reply(req, 400, "Bad Request", b);
            evbuffer_free(b);
        } else {
            evhttp_send_error(req, 400, NULL);
        }
        return;
    }
    lua_State *L = obleth_main_state();
    int top = lua_gettop(L);
    if (lua_getfield(L, LUA_REGISTRYINDEX, "obleth.http.trampoline") != LUA_TFUNCTION ||
        lua_rawgeti(L, LUA_REGISTRYINDEX, s->handler_ref) != LUA_TFUNCTION) {
        lua_settop(L, top);
        evhttp_send_error(req, 500, "Internal Server Error");
        return;
    }
    push_request(L, req);
    response *r = lua_newuserdatauv(L, sizeof *r, 0);
    memset(r, 0, sizeof *r);
    r->w.ref = LUA_NOREF;
    r->req = req;
    luaL_setmetatable(L, RES_MT);
    watch_close(r);
    lua_getfield(L, LUA_REGISTRYINDEX, "obleth.http.log");
    obleth_task_spawn(L, 4);
    lua_settop(L, top);
}

/* ---- server object --------------------------------------------------------------- */

static server *check_server(lua_State *L) {
    server *s = luaL_checkudata(L, 1, SERVER_MT);
    return s;
}

static void server_free(lua_State *L, server *s) {
    if (s->http) { evhttp_free(s->http); s->http = NULL; }
    if (s->conns_live) { obleth_http_conns_free(&s->conns); s->conns_live = 0; }
    if (s->handler_ref != LUA_NOREF) { luaL_unref(L, LUA_REGISTRYINDEX, s->handler_ref); s->handler_ref = LUA_NOREF; }
    if (s->self_ref != LUA_NOREF) { luaL_unref(L, LUA_REGISTRYINDEX, s->self_ref); s->self_ref = LUA_NOREF; }
}

static int server_close(lua_State *L) { server_free(L, check_server(L)); return 0; }

/* srv:stop_listening(): close the listening socket; requests in flight and
   open keep-alive connections are still served (for a graceful shutdown). */
static int server_stop_listening(lua_State *L) {
    server *s = check_server(L);
    if (s->http && s->bound) {
        if (s->conns_live) obleth_http_conns_unlisten(&s->conns);
        evhttp_del_accept_socket(s->http, s->bound);
        s->bound = NULL;
    }
    return 0;
}
static int server_gc(lua_State *L) { server_free(L, check_server(L)); return 0; }

static int server_port(lua_State *L) {
    server *s = check_server(L);
    lua_pushinteger(L, s->port);
    return 1;
}

static int l_server(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "host");
    const char *host = luaL_optstring(L, -1, "127.0.0.1");
    lua_getfield(L, 1, "port");
    lua_Integer port = luaL_optinteger(L, -1, 0);
    lua_getfield(L, 1, "body_limit");
    lua_Integer limit = luaL_optinteger(L, -1, 1 << 20);
    lua_getfield(L, 1, "timeout");
    lua_Integer timeout = luaL_optinteger(L, -1, 300);
    struct rlimit rl;
    lua_Integer def_max = 16;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rl.rlim_cur - 64) / 2 > 16)
        def_max = (lua_Integer)((rl.rlim_cur - 64) / 2);
    else if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY)
        def_max = 1 << 20;
    lua_getfield(L, 1, "max_connections");
    lua_Integer max_conns = luaL_optinteger(L, -1, def_max);
    lua_getfield(L, 1, "header_timeout");
    lua_Number header_timeout = luaL_optnumber(L, -1, 10);
    lua_getfield(L, 1, "idle_timeout");
    lua_Number idle_timeout = luaL_optnumber(L, -1, 5);
    luaL_argcheck(L, max_conns >= 1 && max_conns <= (1 << 24), 1, "'max_connections' must be 1..16777216");
    luaL_argcheck(L, header_timeout > 0 && header_timeout <= 3600, 1, "'header_timeout' must be 0 < s <= 3600");
    luaL_argcheck(L, idle_timeout > 0 && idle_timeout <= 3600, 1, "'idle_timeout' must be 0 < s <= 3600");
    lua_getfield(L, 1, "handler");
    luaL_argcheck(L, lua_isfunction(L, -1), 1, "'handler' must be a function");
    luaL_argcheck(L, port >= 0 && port <= 65535, 1, "'port' must be 0..65535");
    luaL_argcheck(L, limit > 0, 1, "'body_limit' must be > 0");

    server *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    s->http = NULL; s->bound = NULL; s->handler_ref = LUA_NOREF; s->self_ref = LUA_NOREF; s->port = 0;
    s->conns.max_conns = (int)max_conns;
    s->conns.body_limit = (size_t)limit;
    s->conns.header_timeout = header_timeout;
    s->conns.idle_timeout = idle_timeout;
    s->conns.reserve_fd = -1;
    luaL_setmetatable(L, SERVER_MT);
    s->http = evhttp_new(obleth_base());
    if (!s->http) return luaL_error(L, "out of memory");
    evhttp_set_max_body_size(s->http, (ev_ssize_t)limit);
    evhttp_set_max_headers_size(s->http, 64 * 1024);
    evhttp_set_timeout(s->http, (int)timeout);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                            EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, gen_cb, s);
    evhttp_set_bevcb(s->http, obleth_http_frame_bev, &s->conns);
    /* our own listener: evhttp's default backlog (128) drops SYNs under bursts */
    struct evutil_addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICHOST;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", (int)port);
    struct evconnlistener *lst = NULL;
    int bind_errno = 0, bad_addr = 1;
    if (evutil_getaddrinfo(host, portstr, &hints, &ai) == 0 && ai) {
        bad_addr = 0;
        errno = 0;
        lst = evconnlistener_new_bind(obleth_base(), NULL, NULL,
                                      LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                      4096, ai->ai_addr, (int)ai->ai_addrlen);
        bind_errno = errno;
        evutil_freeaddrinfo(ai);
    }
    struct evhttp_bound_socket *h = lst ? evhttp_bind_listener(s->http, lst) : NULL;
    if (!h) {
        if (lst) evconnlistener_free(lst);
        server_free(L, s);
        /* nil, message, code: code is "addr_in_use" | "permission" |
           "addr_not_available" | "bad_address" | "error" */
        const char *code = bad_addr ? "bad_address"
                         : bind_errno == EADDRINUSE ? "addr_in_use"
                         : (bind_errno == EACCES || bind_errno == EPERM) ? "permission"
                         : bind_errno == EADDRNOTAVAIL ? "addr_not_available" : "error";
        lua_pushnil(L);
        if (bad_addr)
            lua_pushfstring(L, "cannot listen on %s:%d: not a numeric IP address", host, (int)port);
        else
            lua_pushfstring(L, "cannot listen on %s:%d: %s", host, (int)port, strerror(bind_errno));
        lua_pushstring(L, code);
        return 3;
    }
    s->bound = h;
    if (obleth_http_conns_init(&s->conns, lst) != 0) {
        server_free(L, s);
        return luaL_error(L, "out of memory");
    }
    s->conns_live = 1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(h), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6) s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    lua_pushvalue(L, -2); /* handler */
    s->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, -1);
    s->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 1;
}

static int l_server_stats(lua_State *L) {
    const obleth_http_conn_stats *st = &obleth_http_stats;
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, (lua_Integer)st->open);
    lua_setfield(L, -2, "open");
    lua_pushinteger(L, (lua_Integer)st->refused);
    lua_setfield(L, -2, "refused");
    lua_pushinteger(L, (lua_Integer)st->evicted);
    lua_setfield(L, -2, "evicted");
    lua_pushinteger(L, (lua_Integer)st->header_timeouts);
    lua_setfield(L, -2, "header_timeouts");
    lua_pushinteger(L, (lua_Integer)st->idle_closes);
    lua_setfield(L, -2, "idle_closes");
    lua_pushinteger(L, (lua_Integer)st->accept_errors);
    lua_setfield(L, -2, "accept_errors");
    return 1;
}

void obleth_http_server_open(lua_State *L) {
    /* stack: module table */
    static const luaL_Reg server_m[] = {{"port", server_port}, {"close", server_close},
                                        {"stop_listening", server_stop_listening}, {NULL, NULL}};
    static const luaL_Reg res_m[] = {{"send", res_send}, {"start", res_start}, {"write", res_write},
                                     {"finish", res_finish}, {"sent", res_sent}, {"closed", res_closed},
                                     {"client_gone", res_client_gone},
                                     {"proxy", obleth_res_proxy}, {NULL, NULL}};
    obleth_newclass(L, SERVER_MT, &(obleth_class){.methods = server_m, .gc = server_gc, .close = server_close});
    obleth_newclass(L, RES_MT, &(obleth_class){.methods = res_m, .gc = res_gc});
    if (luaL_loadbuffer(L, trampoline_src, sizeof trampoline_src - 1, "=http.trampoline") != LUA_OK)
        lua_error(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "obleth.http.trampoline");
    luaL_requiref(L, "obleth.log", luaopen_obleth_log, 0);
    lua_setfield(L, LUA_REGISTRYINDEX, "obleth.http.log");
    lua_pushcfunction(L, l_server);
    lua_setfield(L, -2, "server");
    lua_pushcfunction(L, l_server_stats);
    lua_setfield(L, -2, "server_stats");
    obleth_http_proxy_open(L);
}

void obleth_http_client_open(lua_State *L);

int luaopen_obleth_http(lua_State *L) {
    lua_newtable(L);
    obleth_http_client_open(L);
    obleth_http_server_open(L);
    return 1;
}
