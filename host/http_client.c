/*
 * http_client.c — HTTP client on libcurl's multi-socket API, driven by the
 * libevent loop (part of obleth.http).
 *
 * Lua API:
 *   http.request{
 *     url = "http://host:port/path",      -- http or https only
 *     method = "GET",                      -- any token; POST/PUT/PATCH send body
 *     headers = {["Name"] = "value"},
 *     body = "bytes",
 *     timeout = 30,                        -- seconds for the whole transfer
 *     connect_timeout = 10,                -- seconds
 *     unix_socket = "/path/to.sock",       -- connect over a unix socket
 *     ca_file = "/path/ca.pem",
 *     verify = true,                       -- TLS peer and host verification;
 *                                          -- turned off only by verify = false
 *     max_body = 67108864,                 -- bytes; larger responses fail "too_large"
 *     stream = false,                      -- true: return after the headers
 *     path_as_is = false,                  -- true: send "/a/../b" as written
 *   }
 *   -> {status = 200, headers = {["lower-case-name"] = "value"}, body = "..."}
 *   -> nil, {code = "timeout"|"unreachable"|"tls"|"bad_url"|"too_large"|
 *                   "closed"|"error", message = "..."}
 *   Must be called inside a task; it yields that task only. Repeated header
 *   names are joined with ", ".
 *
 *   With stream = true the response has no body; read it with
 *   resp:read() -> chunk | nil (end) | nil, err   and abort with resp:close().
 *
 *   http.held() -> bytes of response bodies C holds for Lua (received, not yet
 *   handed over). A body goes to Lua, or is freed, as soon as its call ends
 *   (a failed call included), never later by the collector.
 */
#define _POSIX_C_SOURCE 200809L
#include "host.h"
#include "util.h"
#include "buf.h"

#include <ctype.h>
#include <curl/curl.h>
#include <event2/event.h>
#include <math.h>
#include <string.h>

#define REQ_MT "obleth.http.response"
#define STREAM_HIGH_WATER (1 << 20)

typedef struct sockctx {
    struct event *ev;
    curl_socket_t fd;
    struct sockctx *prev, *next;
} sockctx;

static CURLM *g_multi;
static struct event *g_timer;
static sockctx *g_socks;

typedef struct {
    CURL *easy;
    struct curl_slist *hdrs;
    struct event *notify;   /* deferred wake-up, safe to fire from curl callbacks */
    obuf body;              /* received bytes not yet handed to Lua */
    obuf head;              /* raw header lines of the final response */
    obuf reqbody;
    char errbuf[CURL_ERROR_SIZE];
    obleth_waiter w;
    int self_ref;
    int stream;
    int headers_done;
    int done;               /* transfer finished */
    int paused;
    int in_multi;
    int waiting;            /* 0 none, 1 request(), 2 read() */
    int delivered_head;
    CURLcode result;
    size_t max_body;
    int too_large;
} request;

/* ---- libevent <-> curl glue ---------------------------------------------- */

static void check_multi_info(void);

static void notify_later(request *r) {
    if (r->notify) event_active(r->notify, EV_TIMEOUT, 0);
}

static void event_cb(evutil_socket_t fd, short kind, void *arg) {
    (void)arg;
    int action = ((kind & EV_READ) ? CURL_CSELECT_IN : 0) | ((kind & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(g_multi, fd, action, &running);
    check_multi_info();
}

static void timer_cb(evutil_socket_t fd, short kind, void *arg) {
    (void)fd; (void)kind; (void)arg;
    int running;
    curl_multi_socket_action(g_multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info();
}

static int multi_timer_cb(CURLM *multi, long timeout_ms, void *arg) {
    (void)multi; (void)arg;
    if (timeout_ms < 0) {
        evtimer_del(g_timer);
    } else {
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        event_base_update_cache_time(obleth_base());
        evtimer_add(g_timer, &tv);
    }
    return 0;
}

static void sock_remove(sockctx *s) {
    if (s->ev) event_free(s->ev);
    if (s->prev) s->prev->next = s->next; else g_socks = s->next;
    if (s->next) s->next->prev = s->prev;
    free(s);
}

static int sock_cb(CURL *e, curl_socket_t fd, int what, void *cbp, void *sockp) {
    (void)e; (void)cbp;
    sockctx *s = sockp;
    if (what == CURL_POLL_REMOVE) {
        if (s) { curl_multi_assign(g_multi, fd, NULL); sock_remove(s); }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return -1;
        s->fd = fd;
        s->next = g_socks;
        if (g_socks) g_socks->prev = s;
        g_socks = s;
        curl_multi_assign(g_multi, fd, s);
    }
    short kind = (short)(((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0) | EV_PERSIST);
    if (s->ev) event_free(s->ev);
    s->ev = event_new(obleth_base(), fd, kind, event_cb, NULL);
    if (!s->ev) return -1;
    event_add(s->ev, NULL);
    return 0;
}

/* Bytes allocated for response bodies of all requests (http.held). */
static size_t g_held;

static void body_add(request *r, const char *p, size_t n) {
    size_t cap = r->body.cap;
    obuf_add(&r->body, p, n);
    g_held += r->body.cap - cap;
}

static void body_free(request *r) {
    g_held -= r->body.cap;
    obuf_free(&r->body);
}

/* ---- curl callbacks (never call into Lua or curl_multi_* here) ---------------- */

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
    request *r = ud;
    size_t n = size * nmemb;
    if (r->body.n + n > r->max_body && !r->stream) { r->too_large = 1; return 0; }
    if (r->stream && r->body.n >= STREAM_HIGH_WATER) { r->paused = 1; return CURL_WRITEFUNC_PAUSE; }
    body_add(r, ptr, n);
    if (r->stream) notify_later(r);
    return n;
}

static size_t header_cb(char *ptr, size_t size, size_t nmemb, void *ud) {
    request *r = ud;
    size_t n = size * nmemb;
    if (n >= 5 && memcmp(ptr, "HTTP/", 5) == 0) {
        obuf_reset(&r->head); /* a new response (after 1xx): keep only the last */
        r->headers_done = 0;
    } else if ((n == 2 && ptr[0] == '\r') || (n == 1 && ptr[0] == '\n')) {
        long code = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) {
            r->headers_done = 1;
            if (r->stream) notify_later(r);
        }
        return n;
    }
    if (r->head.n + n > (1u << 20)) return 0;
    obuf_add(&r->head, ptr, n);
    return n;
}

/* ---- pushing results to Lua -------------------------------------------------- */

static const char *err_code(CURLcode c, int too_large) {
    if (too_large) return "too_large";
    switch (c) {
    case CURLE_OPERATION_TIMEDOUT: return "timeout";
    case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return "unreachable";
    case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM: case CURLE_SSL_CIPHER: case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR: case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS: case CURLE_SSL_CRL_BADFILE: return "tls";
    case CURLE_URL_MALFORMAT: case CURLE_UNSUPPORTED_PROTOCOL: return "bad_url";
    case CURLE_GOT_NOTHING: case CURLE_RECV_ERROR: case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return "closed";
    default: return "error";
    }
}

static void push_error(lua_State *L, request *r) {
    lua_pushnil(L);
    lua_createtable(L, 0, 2);
    lua_pushstring(L, err_code(r->result, r->too_large));
    lua_setfield(L, -2, "code");
    if (r->too_large) lua_pushfstring(L, "response body larger than %d bytes", (int)r->max_body);
    else lua_pushstring(L, r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->result));
    lua_setfield(L, -2, "message");
}

/* Parse the raw header block into a table of lower-case names. */
static void push_headers(lua_State *L, request *r) {
    lua_newtable(L);
    const char *p = r->head.p ? r->head.p : "";
    const char *end = p + r->head.n;
    int first = 1;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *le = eol;
        if (le > p && le[-1] == '\r') le--;
        if (!first) {
            const char *colon = memchr(p, ':', (size_t)(le - p));
            if (colon && colon > p) {
                char name[256];
                size_t nl = (size_t)(colon - p);
                if (nl >= sizeof name) nl = sizeof name - 1;
                for (size_t i = 0; i < nl; i++) name[i] = (char)tolower((unsigned char)p[i]);
                name[nl] = 0;
                const char *v = colon + 1;
                while (v < le && (*v == ' ' || *v == '\t')) v++;
                const char *ve = le;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
                if (lua_getfield(L, -1, name) == LUA_TSTRING) {
                    lua_pushliteral(L, ", ");
                    lua_pushlstring(L, v, (size_t)(ve - v));
                    lua_concat(L, 3);
                } else {
                    lua_pop(L, 1);
                    lua_pushlstring(L, v, (size_t)(ve - v));
                }
                lua_setfield(L, -2, name);
            }
        }
        first = 0;
        p = eol + 1;
    }
}

/* Push the response table: {status, headers, body?}; the userdata itself is
   the response object in stream mode so :read works. */
static void push_response(lua_State *L, request *r) {
    long code = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    if (r->stream) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->self_ref); /* the userdata */
        lua_getiuservalue(L, -1, 1);                    /* its field table */
    } else {
        lua_createtable(L, 0, 3);
    }
    lua_pushinteger(L, code);
    lua_setfield(L, -2, "status");
    push_headers(L, r);
    lua_setfield(L, -2, "headers");
    if (r->stream) {
        lua_pop(L, 1); /* leave the userdata */
    } else {
        lua_pushlstring(L, r->body.p ? r->body.p : "", r->body.n);
        lua_setfield(L, -2, "body");
        body_free(r);
    }
}

static void release(lua_State *L, request *r) {
    if (r->self_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, r->self_ref);
        r->self_ref = LUA_NOREF;
    }
}

static void detach(request *r) {
    if (r->in_multi) {
        curl_multi_remove_handle(g_multi, r->easy);
        r->in_multi = 0;
    }
}

/* Deliver whatever the waiting task is waiting for, if it is ready. */
static void deliver(request *r) {
    if (!r->waiting || r->w.ref == LUA_NOREF) return;
    lua_State *co = r->w.co;
    if (r->waiting == 1) {
        if (!(r->done || (r->stream && r->headers_done))) return;
        r->waiting = 0;
        int ok = r->done ? (r->result == CURLE_OK && !r->too_large) : 1;
        if (ok) {
            r->delivered_head = 1;
            push_response(co, r);
            if (!r->stream) { detach(r); release(co, r); }
            obleth_wait_resume(&r->w, 1);
        } else {
            push_error(co, r);
            detach(r);
            body_free(r); /* at once: a failed call may hold up to max_body */
            obuf_free(&r->head);
            obuf_free(&r->reqbody);
            release(co, r);
            obleth_wait_resume(&r->w, 2);
        }
    } else if (r->waiting == 2) {
        if (r->body.n > 0) {
            r->waiting = 0;
            lua_pushlstring(co, r->body.p, r->body.n);
            obuf_reset(&r->body);
            if (r->paused && !r->done) { r->paused = 0; curl_easy_pause(r->easy, CURLPAUSE_CONT); }
            obleth_wait_resume(&r->w, 1);
        } else if (r->done) {
            r->waiting = 0;
            if (r->result == CURLE_OK) {
                lua_pushnil(co);
                detach(r); release(co, r);
                obleth_wait_resume(&r->w, 1);
            } else {
                push_error(co, r);
                detach(r); release(co, r);
                obleth_wait_resume(&r->w, 2);
            }
        }
    }
}

static void notify_cb(evutil_socket_t fd, short kind, void *arg) {
    (void)fd; (void)kind;
    deliver(arg);
}

static void check_multi_info(void) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(g_multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) continue;
        request *r = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (!r) continue;
        r->done = 1;
        r->result = msg->data.result;
        notify_later(r);
    }
}

/* ---- Lua-facing ---------------------------------------------------------- */

static request *check_req(lua_State *L, int i) { return luaL_checkudata(L, i, REQ_MT); }

static void req_free(lua_State *L, request *r) {
    detach(r);
    if (r->easy) { curl_easy_cleanup(r->easy); r->easy = NULL; }
    if (r->hdrs) { curl_slist_free_all(r->hdrs); r->hdrs = NULL; }
    if (r->notify) { event_free(r->notify); r->notify = NULL; }
    body_free(r);
    obuf_free(&r->head);
    obuf_free(&r->reqbody);
    obleth_wait_drop(L, &r->w);
    release(L, r);
}

static int req_gc(lua_State *L) {
    req_free(L, check_req(L, 1));
    return 0;
}

static const char *opt_string(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    const char *s = NULL;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "request: '%s' must be a string", k);
        s = lua_tostring(L, -1);
    }
    lua_pop(L, 1); /* still referenced by the options table */
    return s;
}

static double opt_number(lua_State *L, int t, const char *k, double def) {
    lua_getfield(L, t, k);
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "request: '%s' must be a number", k);
        v = lua_tonumber(L, -1);
        if (!(v >= 0) || isnan(v)) luaL_error(L, "request: '%s' must be >= 0", k);
    }
    lua_pop(L, 1);
    return v;
}

static int opt_bool(lua_State *L, int t, const char *k, int def) {
    lua_getfield(L, t, k);
    int v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static int l_request(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    if (!lua_isyieldable(L))
        return luaL_error(L, "http.request must be called inside a task (loop.spawn), not from the main thread");
    const char *url = opt_string(L, 1, "url");
    if (!url) return luaL_error(L, "request: 'url' is required");
    const char *method = opt_string(L, 1, "method");
    if (!method) method = "GET";
    const char *unix_socket = opt_string(L, 1, "unix_socket");
    const char *ca_file = opt_string(L, 1, "ca_file");
    double timeout = opt_number(L, 1, "timeout", 30);
    double ctimeout = opt_number(L, 1, "connect_timeout", 10);
    double max_body = opt_number(L, 1, "max_body", 64.0 * 1024 * 1024);
    int verify = opt_bool(L, 1, "verify", 1);
    int stream = opt_bool(L, 1, "stream", 0);
    int path_as_is = opt_bool(L, 1, "path_as_is", 0);
    size_t bodylen = 0;
    const char *body = NULL;
    lua_getfield(L, 1, "body");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "request: 'body' must be a string");
        body = lua_tolstring(L, -1, &bodylen);
    }
    lua_pop(L, 1);

    request *r = lua_newuserdatauv(L, sizeof *r, 1);
    memset(r, 0, sizeof *r);
    r->self_ref = LUA_NOREF;
    r->w.ref = LUA_NOREF;
    luaL_setmetatable(L, REQ_MT);
    lua_newtable(L); /* the response fields live in the uservalue table */
    lua_setiuservalue(L, -2, 1);
    r->stream = stream;
    r->max_body = (size_t)max_body;
    r->easy = curl_easy_init();
    r->notify = event_new(obleth_base(), -1, 0, notify_cb, r);
    if (!r->easy || !r->notify) return luaL_error(L, "out of memory");

    /* headers: build the list before touching curl so errors leave nothing half-set */
    lua_getfield(L, 1, "headers");
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1)) return luaL_error(L, "request: 'headers' must be a table");
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1))
                return luaL_error(L, "request: header names and values must be strings");
            const char *k = lua_tostring(L, -2);
            const char *v = lua_tostring(L, -1);
            if (strpbrk(k, "\r\n:") || strpbrk(v, "\r\n"))
                return luaL_error(L, "request: header '%s' contains CR, LF or ':'", k);
            lua_pushfstring(L, "%s: %s", k, v);
            struct curl_slist *n = curl_slist_append(r->hdrs, lua_tostring(L, -1));
            if (!n) return luaL_error(L, "out of memory");
            r->hdrs = n;
            lua_pop(L, 2);
        }
    }
    lua_pop(L, 1);
    /* no implicit "Expect: 100-continue" round trip */
    struct curl_slist *n = curl_slist_append(r->hdrs, "Expect:");
    if (!n) return luaL_error(L, "out of memory");
    r->hdrs = n;

    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(ctimeout * 1000) > 0 ? (long)(ctimeout * 1000) : 1L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (path_as_is) curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    if (unix_socket) curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, unix_socket);
    if (ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, ca_file);
    if (!verify) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (strcmp(method, "GET") == 0 && !body) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
        if (body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
            obuf_add(&r->reqbody, body ? body : "", bodylen);
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->reqbody.p);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)bodylen);
        }
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }

    lua_pushvalue(L, -1);
    r->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    CURLMcode mc = curl_multi_add_handle(g_multi, e);
    if (mc != CURLM_OK) {
        release(L, r);
        lua_pushnil(L);
        const char *why = curl_multi_strerror(mc);
        obleth_error_push(L, NULL, "error", why, strlen(why), NULL);
        return 2;
    }
    r->in_multi = 1;
    r->waiting = 1;
    obleth_wait_begin(L, &r->w, "http.request");
    return lua_yield(L, 0);
}

/* resp:read() -> chunk | nil | nil, err (stream mode) */
static int resp_read(lua_State *L) {
    request *r = check_req(L, 1);
    if (!r->stream) return luaL_error(L, "read: response was not requested with stream = true");
    if (!r->easy) { lua_pushnil(L); return 1; }
    if (r->body.n > 0) {
        lua_pushlstring(L, r->body.p, r->body.n);
        obuf_reset(&r->body);
        if (r->paused && !r->done) { r->paused = 0; curl_easy_pause(r->easy, CURLPAUSE_CONT); }
        return 1;
    }
    if (r->done) {
        detach(r);
        release(L, r);
        if (r->result == CURLE_OK) { lua_pushnil(L); return 1; }
        push_error(L, r);
        return 2;
    }
    r->waiting = 2;
    obleth_wait_begin(L, &r->w, "response:read");
    return lua_yield(L, 0);
}

/* resp:close(): abort the transfer (idempotent) */
static int resp_close(lua_State *L) {
    request *r = check_req(L, 1);
    detach(r);
    r->done = 1;
    release(L, r);
    return 0;
}

static int resp_index(lua_State *L) {
    check_req(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, -2) != LUA_TNIL) return 1;
    lua_pop(L, 2);
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int global_gc(lua_State *L) {
    (void)L;
    if (g_timer) { event_free(g_timer); g_timer = NULL; }
    if (g_multi) { curl_multi_cleanup(g_multi); g_multi = NULL; }
    while (g_socks) sock_remove(g_socks);
    return 0;
}

static int l_held(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)g_held);
    return 1;
}

void obleth_http_client_open(lua_State *L) {
    /* stack: module table */
    if (!g_multi) {
        g_multi = curl_multi_init();
        if (!g_multi) luaL_error(L, "curl_multi_init failed");
        curl_multi_setopt(g_multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
        curl_multi_setopt(g_multi, CURLMOPT_TIMERFUNCTION, multi_timer_cb);
        g_timer = evtimer_new(obleth_base(), timer_cb, NULL);
        obleth_sentinel(L, "obleth.http.client", global_gc);
    }
    static const luaL_Reg methods[] = {{"read", resp_read}, {"close", resp_close}, {NULL, NULL}};
    obleth_newclass(L, REQ_MT,
                    &(obleth_class){.methods = methods, .index = resp_index, .gc = req_gc, .close = resp_close});
    lua_pushcfunction(L, l_request);
    lua_setfield(L, -2, "request");
    lua_pushcfunction(L, l_held);
    lua_setfield(L, -2, "held");
}
