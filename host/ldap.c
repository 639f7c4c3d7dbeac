/*
 * ldap.c — obleth.ldap: a thin binding of libldap's asynchronous API on the
 * event loop, for signing users in against the site's directory
 * (docs/access.md "LDAP"). Every call that talks to the server yields the
 * calling task and is resumed when the answer is there: the TCP connect is
 * made here, non-blocking, then handed to libldap (ldap_init_fd); a bind
 * (ldap_sasl_bind, LDAP_SASL_SIMPLE) or a search (ldap_search_ext) is sent,
 * and ldap_result is polled with a zero timeout each time libevent says the
 * socket (LDAP_OPT_DESC) is readable. Never a blocking call on the loop (but
 * see "Host names" below); every operation has a deadline.
 *
 * Lua API
 * -------
 * ldap.open(url [, opts]) -> conn  |  nil, err
 *     url: "ldap://host[:port]" (port 389 by default). ldaps:// and StartTLS
 *     are not supported yet (err.code "invalid"). opts: timeout = 10 (seconds
 *     for the connect and for each later operation). Raises outside a task.
 *     Host names: a name that is not an address is resolved with a blocking
 *     getaddrinfo; give an address to keep the loop free of DNS.
 * conn:bind(dn, password) -> true  |  nil, err
 *     A simple bind. An empty password is refused here (err.code
 *     "invalid_credentials"): the server would take it as an unauthenticated
 *     bind and answer success. The password is never logged nor kept.
 * conn:search(base, scope, filter [, attrs [, opts]]) -> entries  |  nil, err
 *     scope: "base" | "one" | "sub". attrs: a list of attribute names (nil:
 *     all user attributes). opts: limit = 100 (entries at most; more is not an
 *     error: the first ones). entries = {{dn = "...", attrs = {name = {v, ...}}}, ...}
 *     (attribute names as the server spells them). A base that does not exist
 *     answers {} (no entries). Values put in the filter must be escaped with
 *     ldap.escape_filter.
 * conn:close()   idempotent; also __close and __gc. A task waiting on the
 *                connection is resumed with nil, err (code "closed").
 * ldap.escape_filter(s) -> s'   every byte but [A-Za-z0-9] and "-._@ " as \XX
 *                (RFC 4515 assertion value: an allowlist, not a blocklist)
 * ldap.escape_dn(s) -> s'       every byte but [A-Za-z0-9] and "-._@" as \XX
 *                (RFC 4514 attribute value)
 *
 * One operation at a time per connection: a call while another task waits on
 * it raises "connection is busy".
 *
 * Errors (expected failures, returned as nil, err): err = {code=, message=
 * [, ldap_code=]} with metatable "obleth.ldap.error" (tostring "code: message").
 * code: "invalid_credentials" (LDAP result 49, or an empty password),
 * "connection" (cannot connect, or the connection was lost), "timeout" (the
 * deadline passed; the operation is abandoned), "closed", "invalid" (a bad
 * URL, filter or DN), "error" (the rest; ldap_code is the LDAP result code).
 * Misuse (wrong types, a closed or busy connection) raises.
 */
#define _POSIX_C_SOURCE 200809L
#define LDAP_DEPRECATED 0
#include "ldap.h"
#include "host.h"
#include "util.h"

#include <event2/event.h>
#include <lauxlib.h>
#include <ldap.h>
#include <lua.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* libldap exports ldap_init_fd (OPENLDAP_2.5; since 2.4) but declares it in its private
 * ldap_pvt.h, which libldap-dev does not ship: declared here as SSSD does, for the same reason
 * (the connect is made non-blocking by the caller, then handed to libldap). */
#ifndef LDAP_PROTO_TCP
#define LDAP_PROTO_TCP 1
#endif
int ldap_init_fd(ber_socket_t fd, int proto, LDAP_CONST char *url, LDAP **ldp);

#define CONN_MT "obleth.ldap.conn"
#define ERROR_MT "obleth.ldap.error"

enum op { OP_IDLE, OP_CONNECT, OP_BIND, OP_SEARCH, OP_CLOSED };

typedef struct conn_ud {
    LDAP *ld;          /* NULL until connected, and once closed */
    int fd;            /* the socket while connecting (libldap owns it after) */
    char *url;         /* malloc'd, while connecting */
    struct event *ev;
    enum op op;
    int msgid;
    int limit;         /* search: entries at most */
    int self_ref;      /* registry ref to the userdata while connecting */
    double timeout;    /* seconds per operation */
    double deadline;   /* monotonic seconds */
    obleth_waiter w;
} conn_ud;

static void conn_cb(evutil_socket_t fd, short what, void *arg);

/* ---- errors ------------------------------------------------------------- */

static void push_err(lua_State *L, const char *code, const char *msg, int ldap_code) {
    obleth_error_push(L, ERROR_MT, code, msg, msg ? strlen(msg) : 0, "the directory failed without a message");
    if (ldap_code >= 0) {
        lua_pushinteger(L, ldap_code);
        lua_setfield(L, -2, "ldap_code");
    }
}

static const char *code_of(int rc) {
    switch (rc) {
    case LDAP_INVALID_CREDENTIALS: return "invalid_credentials";
    case LDAP_SERVER_DOWN:
    case LDAP_CONNECT_ERROR:
    case LDAP_UNAVAILABLE: return "connection";
    case LDAP_TIMEOUT:
    case LDAP_TIMELIMIT_EXCEEDED: return "timeout";
    case LDAP_FILTER_ERROR:
    case LDAP_INVALID_DN_SYNTAX:
    case LDAP_PARAM_ERROR: return "invalid";
    default: return "error";
    }
}

/* Pushes the error for LDAP result code rc (with the server's message when there is one). */
static void push_ldap_err(lua_State *L, int rc, const char *server_msg) {
    if (server_msg && *server_msg)
        lua_pushfstring(L, "%s (%s)", ldap_err2string(rc), server_msg);
    else
        lua_pushstring(L, ldap_err2string(rc));
    push_err(L, code_of(rc), lua_tostring(L, -1), rc);
    lua_remove(L, -2);
}

/* ---- the connection's state ------------------------------------------------ */

static conn_ud *check_conn(lua_State *L, int i) { return luaL_checkudata(L, i, CONN_MT); }

static conn_ud *check_open(lua_State *L, int i) {
    conn_ud *c = check_conn(L, i);
    if (!c->ld || c->op == OP_CLOSED) luaL_error(L, "the LDAP connection is closed");
    if (c->op != OP_IDLE) luaL_error(L, "the LDAP connection is busy (another task waits on it)");
    return c;
}

/* Watch fd for `what` until the deadline. */
static int watch(conn_ud *c, int fd, short what) {
    struct timeval tv = obleth_tv(c->deadline - obleth_mono());
    return obleth_fd_wait(&c->ev, fd, what, conn_cb, c, &tv);
}

static int ldap_fd(conn_ud *c) {
    int fd = -1;
    if (ldap_get_option(c->ld, LDAP_OPT_DESC, &fd) != LDAP_OPT_SUCCESS) return -1;
    return fd;
}

/* Resume the waiting task with the n values on its stack. */
static void done(conn_ud *c, int n) {
    c->op = c->ld ? OP_IDLE : OP_CLOSED;
    c->msgid = -1;
    if (c->ev) event_del(c->ev);
    obleth_wait_resume(&c->w, n);
}

/* ---- connecting --------------------------------------------------------------- */

static void connect_failed(conn_ud *c, const char *msg) {
    lua_State *co = c->w.co;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->url);
    c->url = NULL;
    luaL_unref(co, LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
    lua_pushnil(co);
    push_err(co, "connection", msg, -1);
    c->op = OP_CLOSED;
    if (c->ev) event_del(c->ev);
    obleth_wait_resume(&c->w, 2);
}

static void step_connect(conn_ud *c, short what) {
    lua_State *co = c->w.co;
    char msg[256];
    if (what & EV_TIMEOUT) { connect_failed(c, "timed out connecting to the LDAP server"); return; }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
    if (soerr != 0) {
        snprintf(msg, sizeof msg, "cannot connect to the LDAP server: %s", strerror(soerr));
        connect_failed(c, msg);
        return;
    }
    LDAP *ld = NULL;
    int rc = ldap_init_fd(c->fd, LDAP_PROTO_TCP, c->url, &ld);
    if (rc != LDAP_SUCCESS || !ld) {
        snprintf(msg, sizeof msg, "libldap: %s", ldap_err2string(rc));
        connect_failed(c, msg);
        return;
    }
    c->fd = -1; /* libldap's now */
    free(c->url);
    c->url = NULL;
    int v3 = LDAP_VERSION3;
    ldap_set_option(ld, LDAP_OPT_PROTOCOL_VERSION, &v3);
    ldap_set_option(ld, LDAP_OPT_REFERRALS, LDAP_OPT_OFF);
    c->ld = ld;
    c->op = OP_IDLE;
    if (c->ev) event_del(c->ev);
    lua_rawgeti(co, LUA_REGISTRYINDEX, c->self_ref);
    luaL_unref(co, LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
    obleth_wait_resume(&c->w, 1);
}

/* ---- results ------------------------------------------------------------------ */

/* The bind's answer: true, or nil, err. */
static int push_bind(lua_State *L, conn_ud *c, LDAPMessage *res) {
    int err = 0;
    char *emsg = NULL;
    int rc = ldap_parse_result(c->ld, res, &err, NULL, &emsg, NULL, NULL, 0);
    if (rc != LDAP_SUCCESS) err = rc;
    if (err == LDAP_SUCCESS) {
        lua_pushboolean(L, 1);
        ldap_memfree(emsg);
        return 1;
    }
    lua_pushnil(L);
    push_ldap_err(L, err, emsg);
    ldap_memfree(emsg);
    return 2;
}

static void push_entry(lua_State *L, LDAP *ld, LDAPMessage *e) {
    lua_createtable(L, 0, 2);
    char *dn = ldap_get_dn(ld, e);
    lua_pushstring(L, dn ? dn : "");
    lua_setfield(L, -2, "dn");
    ldap_memfree(dn);
    lua_newtable(L);
    BerElement *ber = NULL;
    for (char *a = ldap_first_attribute(ld, e, &ber); a; a = ldap_next_attribute(ld, e, ber)) {
        struct berval **vals = ldap_get_values_len(ld, e, a);
        lua_newtable(L);
        for (int i = 0; vals && vals[i]; i++) {
            lua_pushlstring(L, vals[i]->bv_val, vals[i]->bv_len);
            lua_rawseti(L, -2, i + 1);
        }
        ldap_value_free_len(vals);
        lua_setfield(L, -2, a);
        ldap_memfree(a);
    }
    if (ber) ber_free(ber, 0);
    lua_setfield(L, -2, "attrs");
}

/* The search's answer: entries, or nil, err. */
static int push_search(lua_State *L, conn_ud *c, LDAPMessage *chain) {
    lua_newtable(L);
    int n = 0, err = LDAP_SUCCESS;
    char *emsg = NULL;
    for (LDAPMessage *m = ldap_first_message(c->ld, chain); m; m = ldap_next_message(c->ld, m)) {
        int t = ldap_msgtype(m);
        if (t == LDAP_RES_SEARCH_ENTRY) {
            if (n >= c->limit) continue;
            push_entry(L, c->ld, m);
            lua_rawseti(L, -2, ++n);
        } else if (t == LDAP_RES_SEARCH_RESULT) {
            int rc = ldap_parse_result(c->ld, m, &err, NULL, &emsg, NULL, NULL, 0);
            if (rc != LDAP_SUCCESS) err = rc;
        }
    }
    if (err == LDAP_SUCCESS || err == LDAP_SIZELIMIT_EXCEEDED || err == LDAP_NO_SUCH_OBJECT) {
        ldap_memfree(emsg);
        return 1;
    }
    lua_pop(L, 1);
    lua_pushnil(L);
    push_ldap_err(L, err, emsg);
    ldap_memfree(emsg);
    return 2;
}

/* ---- the socket's callback ----------------------------------------------------- */

static void conn_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    conn_ud *c = arg;
    lua_State *co = c->w.co;
    if (c->op == OP_CLOSED) { /* close() while a task waited: tell it */
        if (co) {
            lua_pushnil(co);
            push_err(co, "closed", "the LDAP connection was closed", -1);
            obleth_wait_resume(&c->w, 2);
        }
        return;
    }
    if (c->op == OP_CONNECT) { step_connect(c, what); return; }
    if (c->op != OP_BIND && c->op != OP_SEARCH) return;
    if (!co) { c->op = OP_IDLE; return; }
    LDAPMessage *res = NULL;
    struct timeval zero = {0, 0};
    int t = ldap_result(c->ld, c->msgid, LDAP_MSG_ALL, &zero, &res);
    if (t == 0) {
        if (obleth_mono() < c->deadline) {
            int sfd = ldap_fd(c);
            if (sfd >= 0 && watch(c, sfd, EV_READ) == 0) return;
        }
        ldap_abandon_ext(c->ld, c->msgid, NULL, NULL);
        lua_pushnil(co);
        push_err(co, "timeout", "the LDAP server did not answer in time", -1);
        done(c, 2);
        return;
    }
    if (t < 0 || !res) {
        int rc = LDAP_SERVER_DOWN;
        ldap_get_option(c->ld, LDAP_OPT_RESULT_CODE, &rc);
        if (res) ldap_msgfree(res);
        lua_pushnil(co);
        push_ldap_err(co, rc, NULL);
        done(c, 2);
        return;
    }
    int n = c->op == OP_BIND ? push_bind(co, c, res) : push_search(co, c, res);
    ldap_msgfree(res);
    done(c, n);
}

/* ---- Lua functions ------------------------------------------------------------- */

static int l_open(lua_State *L) {
    const char *url = luaL_checkstring(L, 1);
    double timeout = 10;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL) timeout = luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    luaL_argcheck(L, timeout > 0 && timeout < 1e6, 2, "timeout must be > 0");
    if (!lua_isyieldable(L))
        return luaL_error(L, "ldap.open must be called inside a task (loop.spawn), not from the main thread");
    LDAPURLDesc *lud = NULL;
    if (ldap_url_parse(url, &lud) != LDAP_URL_SUCCESS || !lud) {
        lua_pushnil(L);
        push_err(L, "invalid", "not an LDAP URL (ldap://host[:port])", -1);
        return 2;
    }
    if (strcmp(lud->lud_scheme, "ldap") != 0) {
        ldap_free_urldesc(lud);
        lua_pushnil(L);
        push_err(L, "invalid", "only ldap:// URLs are supported (not ldaps://, ldapi://)", -1);
        return 2;
    }
    char host[256], port[16];
    snprintf(host, sizeof host, "%s", lud->lud_host && *lud->lud_host ? lud->lud_host : "127.0.0.1");
    snprintf(port, sizeof port, "%d", lud->lud_port > 0 ? lud->lud_port : 389);
    ldap_free_urldesc(lud);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    int gerr = getaddrinfo(host, port, &hints, &ai);
    if (gerr == EAI_NONAME) { /* a name, not an address: resolved (blocking; see the header) */
        hints.ai_flags = AI_NUMERICSERV;
        gerr = getaddrinfo(host, port, &hints, &ai);
    }
    if (gerr != 0 || !ai) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot resolve the LDAP server %s: %s", host, gai_strerror(gerr));
        push_err(L, "connection", lua_tostring(L, -1), -1);
        return 2;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    int cr = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
    int cerr = errno;
    freeaddrinfo(ai);
    if (fd < 0 || (cr != 0 && cerr != EINPROGRESS)) {
        if (fd >= 0) close(fd);
        lua_pushnil(L);
        lua_pushfstring(L, "cannot connect to the LDAP server %s:%s: %s", host, port, strerror(cerr));
        push_err(L, "connection", lua_tostring(L, -1), -1);
        return 2;
    }
    lua_settop(L, 1);
    conn_ud *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->w.ref = LUA_NOREF;
    c->self_ref = LUA_NOREF;
    c->fd = fd;
    c->msgid = -1;
    c->timeout = timeout;
    c->deadline = obleth_mono() + timeout;
    c->op = OP_CONNECT;
    luaL_setmetatable(L, CONN_MT);
    c->url = strdup(url);
    if (!c->url || watch(c, fd, EV_WRITE) != 0) {
        close(fd);
        c->fd = -1;
        c->op = OP_CLOSED;
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the LDAP socket", -1);
        return 2;
    }
    lua_pushvalue(L, -1);
    c->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    obleth_wait_begin(L, &c->w, "ldap.open");
    return lua_yield(L, 0);
}

/* The request was sent (msgid) or not (rc): wait for its answer. */
static int start(lua_State *L, conn_ud *c, int rc, int msgid, enum op op, const char *what) {
    if (rc != LDAP_SUCCESS) {
        lua_pushnil(L);
        push_ldap_err(L, rc, NULL);
        return 2;
    }
    int fd = ldap_fd(c);
    c->msgid = msgid;
    c->op = op;
    c->deadline = obleth_mono() + c->timeout;
    if (fd < 0 || watch(c, fd, EV_READ) != 0) {
        ldap_abandon_ext(c->ld, msgid, NULL, NULL);
        c->op = OP_IDLE;
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the LDAP socket", -1);
        return 2;
    }
    lua_settop(L, 1); /* the conn stays on the waiting task's stack: it cannot be collected */
    obleth_wait_begin(L, &c->w, what);
    return lua_yield(L, 0);
}

static int conn_bind(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    const char *dn = luaL_checkstring(L, 2);
    size_t pwlen;
    const char *pw = luaL_checklstring(L, 3, &pwlen);
    if (!lua_isyieldable(L)) return luaL_error(L, "an LDAP bind must be made inside a task (loop.spawn)");
    if (pwlen == 0) {
        lua_pushnil(L);
        push_err(L, "invalid_credentials", "an empty password is refused (it would be an unauthenticated bind)", -1);
        return 2;
    }
    struct berval cred;
    cred.bv_val = (char *)pw;
    cred.bv_len = pwlen;
    int msgid = -1;
    int rc = ldap_sasl_bind(c->ld, dn, LDAP_SASL_SIMPLE, &cred, NULL, NULL, &msgid);
    return start(L, c, rc, msgid, OP_BIND, "ldap bind");
}

static int conn_search(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    const char *base = luaL_checkstring(L, 2);
    static const char *const scopes[] = {"base", "one", "sub", NULL};
    static const int scope_v[] = {LDAP_SCOPE_BASE, LDAP_SCOPE_ONELEVEL, LDAP_SCOPE_SUBTREE};
    int scope = scope_v[luaL_checkoption(L, 3, NULL, scopes)];
    const char *filter = luaL_checkstring(L, 4);
    int limit = 100;
    if (!lua_isnoneornil(L, 6)) {
        luaL_checktype(L, 6, LUA_TTABLE);
        if (lua_getfield(L, 6, "limit") != LUA_TNIL) limit = (int)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
        luaL_argcheck(L, limit > 0 && limit <= 100000, 6, "limit must be 1..100000");
    }
    if (!lua_isyieldable(L)) return luaL_error(L, "an LDAP search must be made inside a task (loop.spawn)");
    char **attrs = NULL;
    int nattrs = 0;
    if (!lua_isnoneornil(L, 5)) {
        luaL_checktype(L, 5, LUA_TTABLE);
        nattrs = (int)luaL_len(L, 5);
        luaL_argcheck(L, nattrs >= 0 && nattrs <= 64, 5, "at most 64 attributes");
        attrs = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nattrs + 1), 0);
        for (int i = 0; i < nattrs; i++) {
            lua_rawgeti(L, 5, i + 1);
            attrs[i] = (char *)luaL_checkstring(L, -1); /* kept alive by the table at 5 */
            lua_pop(L, 1);
        }
        attrs[nattrs] = NULL;
    }
    c->limit = limit;
    struct timeval tl;
    tl.tv_sec = (time_t)c->timeout;
    tl.tv_usec = 0;
    if (tl.tv_sec < 1) tl.tv_sec = 1;
    int msgid = -1;
    int rc = ldap_search_ext(c->ld, base, scope, filter, attrs, 0, NULL, NULL, &tl, limit, &msgid);
    return start(L, c, rc, msgid, OP_SEARCH, "ldap search");
}

static void release(conn_ud *c) {
    if (c->ld) ldap_unbind_ext(c->ld, NULL, NULL); /* sends the unbind, closes the socket; no wait */
    c->ld = NULL;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->url);
    c->url = NULL;
}

static int conn_close(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    int waiting = c->w.co != NULL && c->op != OP_CLOSED && c->op != OP_IDLE;
    if (c->self_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, c->self_ref);
        c->self_ref = LUA_NOREF;
    }
    release(c);
    c->op = OP_CLOSED;
    /* a waiting task is resumed on the next loop turn, with nil, err (conn_cb) */
    obleth_fd_wait_stop(c->ev, waiting, conn_cb, c);
    return 0;
}

static int conn_gc(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    release(c);
    c->op = OP_CLOSED;
    if (c->ev) { event_free(c->ev); c->ev = NULL; }
    obleth_wait_drop(L, &c->w);
    return 0;
}

static int conn_tostring(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    lua_pushfstring(L, "obleth.ldap.conn (%s)", c->ld ? "open" : "closed");
    return 1;
}

/* Every byte outside the allowlist as \XX (two hex digits). */
static int escape(lua_State *L, const char *allow) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            (ch != '\0' && strchr(allow, ch))) {
            luaL_addchar(&b, (char)ch);
        } else {
            char hex[4];
            snprintf(hex, sizeof hex, "\\%02x", ch);
            luaL_addlstring(&b, hex, 3);
        }
    }
    luaL_pushresult(&b);
    return 1;
}

static int l_escape_filter(lua_State *L) { return escape(L, "-._@ "); }
static int l_escape_dn(lua_State *L) { return escape(L, "-._@"); }

int luaopen_obleth_ldap(lua_State *L) {
    static const luaL_Reg conn_m[] = {
        {"bind", conn_bind}, {"search", conn_search}, {"close", conn_close}, {NULL, NULL}};
    obleth_newclass(L, CONN_MT,
                    &(obleth_class){.methods = conn_m, .gc = conn_gc, .close = conn_close, .tostring = conn_tostring});
    obleth_error_class(L, ERROR_MT);
    static const luaL_Reg fns[] = {
        {"open", l_open}, {"escape_filter", l_escape_filter}, {"escape_dn", l_escape_dn}, {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
