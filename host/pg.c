/*
 * pg.c — obleth.pg: a thin binding of libpq's asynchronous API on the event
 * loop. Every call that talks to the server yields the calling task and is
 * resumed when libpq is done: PQconnectStart / PQconnectPoll, then
 * PQsendQuery(Params) / PQflush / PQconsumeInput / PQgetResult, the socket
 * watched by libevent. Never PQexec, never a blocking call on the loop (but
 * see "Host names" below). Values are always bound, never spliced into SQL.
 *
 * Lua API
 * -------
 * pg.connect(conninfo [, opts]) -> conn  |  nil, err
 *     conninfo: a libpq connection string or URI ("postgresql://u@h:5432/db",
 *     "host=/run/pg port=5440 dbname=x"). opts: timeout = 10 (seconds to
 *     connect, else err.code "connection"). Raises outside a task.
 *     Host names: libpq resolves a host name with a blocking getaddrinfo
 *     inside PQconnectStart / PQconnectPoll; give an address (hostaddr=, or
 *     an IP in the URI) or a unix socket directory to keep the loop free of
 *     DNS, as the store's pool does for loopback.
 *
 * conn:query(sql, ...) -> rows, changes  |  nil, err
 *     One statement; its parameters $1..$n take the varargs in order
 *     (select('#', ...) counts, so nil holes bind NULL), sent as text:
 *       nil -> NULL, boolean -> "true"/"false", integer -> decimal,
 *       float -> "%.17g" (inf, nan as PostgreSQL spells them), string ->
 *       its bytes (a string holding a NUL byte raises). Any other type raises.
 *     rows = {row, ...}; a row is keyed by column name. Column values by
 *     type: bool -> boolean; int2, int4, int8, oid -> integer; float4,
 *     float8 -> float; numeric -> number (integer when it is one); NULL -> absent
 *     (nil); every other type -> its text. changes: the command's row count
 *     (PQcmdTuples) as an integer, or nil for a command without one.
 * conn:exec(script) -> true  |  nil, err
 *     Runs every statement of `script` (no parameters; migrations); rows are
 *     discarded; the first error is returned.
 * conn:notifications([seconds]) -> list  |  nil, err
 *     The notifications (LISTEN / NOTIFY) received so far; when there is
 *     none, waits until one arrives or `seconds` pass ({} then). Each is
 *     {channel=, payload=, pid=}.
 * conn:escape_identifier(s) -> "quoted"   (PQescapeIdentifier; for LISTEN)
 * conn:status() -> "ok" | "bad" | "closed"
 * conn:busy() -> true while a task waits on the connection
 * conn:backend_pid() -> integer | nil
 * conn:close()   idempotent; also __close and __gc. A task waiting on the
 *                connection is resumed with nil, err (code "closed").
 * pg.version     libpq's version (PQlibVersion), e.g. 150018
 *
 * One operation at a time per connection: a call while another task waits
 * on it raises "connection is busy" (the store's pool gives each task its
 * own connection).
 *
 * Errors (expected failures, returned as nil, err):
 *     err = {code=, message=, sqlstate=} with metatable "obleth.pg.error"
 *     (tostring gives "code: message"). code: "connection" (cannot connect,
 *     the connection was lost, or class 08 / 57P01-57P03), "constraint"
 *     (class 23; constraint = "unique" | "foreignkey" | "notnull" | "check"
 *     | "exclusion" | "other"), "serialization" (40001, 40P01), "busy"
 *     (55P03 lock not available, 57014 query cancelled), "readonly" (25006),
 *     "full" (class 53), "syntax" (class 42), "closed" (the connection was
 *     closed), "error" (the rest). message: the server's primary message,
 *     or libpq's. sqlstate: the five-character SQLSTATE when the server sent one.
 *     Misuse (wrong types, a closed or busy connection) raises.
 *     The server's notices (NOTICE, WARNING) are dropped.
 */
#define _POSIX_C_SOURCE 200809L
#include "pg.h"
#include "host.h"
#include "util.h"

#include <event2/event.h>
#include <lauxlib.h>
#include <libpq-fe.h>
#include <lua.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONN_MT "obleth.pg.conn"
#define ERROR_MT "obleth.pg.error"

/* type oids (catalog/pg_type_d.h, which libpq-dev does not ship) */
#define BOOLOID 16
#define INT8OID 20
#define INT2OID 21
#define INT4OID 23
#define OIDOID 26
#define FLOAT4OID 700
#define FLOAT8OID 701
#define NUMERICOID 1700

enum op { OP_IDLE, OP_CONNECT, OP_SEND, OP_READ, OP_NOTIFY, OP_CLOSED };

typedef struct conn_ud {
    PGconn *pg;         /* NULL once closed */
    struct event *ev;   /* the socket (or a wake-up after close) */
    enum op op;
    int exec;           /* the running operation is exec() */
    int self_ref;       /* registry ref to the userdata while connecting */
    PGresult *res;      /* the result kept so far (the first error wins) */
    char *lost;         /* a connection-level error message (malloc'd) */
    double timeout;     /* seconds for connect / notifications; <= 0: none */
    obleth_waiter w;
} conn_ud;

static void conn_cb(evutil_socket_t fd, short what, void *arg);

/* ---- errors ------------------------------------------------------------- */

static const char *code_of(const char *state) {
    if (!state || strlen(state) != 5) return "error";
    if (strncmp(state, "08", 2) == 0 || strcmp(state, "57P01") == 0 || strcmp(state, "57P02") == 0 ||
        strcmp(state, "57P03") == 0)
        return "connection";
    if (strncmp(state, "23", 2) == 0) return "constraint";
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0) return "serialization";
    if (strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0) return "busy";
    if (strcmp(state, "25006") == 0) return "readonly";
    if (strncmp(state, "53", 2) == 0) return "full";
    if (strncmp(state, "42", 2) == 0) return "syntax";
    return "error";
}

static const char *constraint_of(const char *state) {
    if (strcmp(state, "23505") == 0) return "unique";
    if (strcmp(state, "23503") == 0) return "foreignkey";
    if (strcmp(state, "23502") == 0) return "notnull";
    if (strcmp(state, "23514") == 0) return "check";
    if (strcmp(state, "23P01") == 0) return "exclusion";
    return "other";
}

/* Pushes {code, message [, sqlstate, constraint]}; trailing newlines of msg are dropped. */
static void push_err(lua_State *L, const char *code, const char *msg, const char *state) {
    size_t n = msg ? strlen(msg) : 0;
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) n--;
    obleth_error_push(L, ERROR_MT, code, msg, n, "PostgreSQL failed without a message");
    if (state) {
        lua_pushstring(L, state);
        lua_setfield(L, -2, "sqlstate");
        if (strncmp(state, "23", 2) == 0) {
            lua_pushstring(L, constraint_of(state));
            lua_setfield(L, -2, "constraint");
        }
    }
}

static void push_result_err(lua_State *L, const PGresult *r) {
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    const char *detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
    if (!primary) {
        push_err(L, state ? code_of(state) : "connection", PQresultErrorMessage(r), state);
        return;
    }
    if (detail) {
        lua_pushfstring(L, "%s (%s)", primary, detail);
        push_err(L, code_of(state), lua_tostring(L, -1), state);
        lua_remove(L, -2);
    } else {
        push_err(L, code_of(state), primary, state);
    }
}

/* ---- the connection's state ------------------------------------------------ */

static conn_ud *check_conn(lua_State *L, int i) { return luaL_checkudata(L, i, CONN_MT); }

static conn_ud *check_open(lua_State *L, int i) {
    conn_ud *c = check_conn(L, i);
    if (!c->pg || c->op == OP_CLOSED) luaL_error(L, "the PostgreSQL connection is closed");
    if (c->op != OP_IDLE) luaL_error(L, "the PostgreSQL connection is busy (another task waits on it)");
    return c;
}

static void set_lost(conn_ud *c, const char *msg) {
    if (c->lost) return;
    c->lost = strdup(msg && *msg ? msg : "the connection to PostgreSQL was lost");
}

static void clear_state(conn_ud *c) {
    if (c->res) PQclear(c->res);
    c->res = NULL;
    free(c->lost);
    c->lost = NULL;
}

/* Watch the socket for `what` (EV_READ / EV_WRITE), with the timeout when `timed`. */
static int watch(conn_ud *c, short what, int timed) {
    int fd = PQsocket(c->pg);
    if (fd < 0) return -1;
    struct timeval tv, *tvp = NULL;
    if (timed && c->timeout > 0) {
        tv = obleth_tv(c->timeout);
        tvp = &tv;
        event_base_update_cache_time(obleth_base());
    }
    return obleth_fd_wait(&c->ev, fd, what, conn_cb, c, tvp);
}

/* ---- results to Lua ---------------------------------------------------------- */

static void push_value(lua_State *L, const PGresult *r, int row, int col) {
    const char *v = PQgetvalue(r, row, col);
    int len = PQgetlength(r, row, col);
    switch (PQftype(r, col)) {
    case BOOLOID: lua_pushboolean(L, v[0] == 't'); return;
    case FLOAT4OID:
    case FLOAT8OID: { /* a float, as SQLite's REAL: 2 stays 2.0 */
        char *end;
        double d = strtod(v, &end);
        if (*end == '\0') { lua_pushnumber(L, (lua_Number)d); return; }
        break; /* NaN, Infinity: below */
    }
    case INT2OID:
    case INT4OID:
    case INT8OID:
    case OIDOID:
    case NUMERICOID:
        if (lua_stringtonumber(L, v) != 0) return;
        if (strcmp(v, "NaN") == 0) { lua_pushnumber(L, NAN); return; }
        if (strcmp(v, "Infinity") == 0) { lua_pushnumber(L, HUGE_VAL); return; }
        if (strcmp(v, "-Infinity") == 0) { lua_pushnumber(L, -HUGE_VAL); return; }
        break;
    default: break;
    }
    lua_pushlstring(L, v, (size_t)len);
}

static void push_rows(lua_State *L, const PGresult *r) {
    int nrows = PQntuples(r), ncols = PQnfields(r);
    lua_createtable(L, nrows, 0);
    for (int i = 0; i < nrows; i++) {
        lua_createtable(L, 0, ncols);
        for (int j = 0; j < ncols; j++) {
            if (PQgetisnull(r, i, j)) continue;
            push_value(L, r, i, j);
            lua_setfield(L, -2, PQfname(r, j));
        }
        lua_rawseti(L, -2, i + 1);
    }
}

static int is_error(const PGresult *r) {
    ExecStatusType st = PQresultStatus(r);
    return st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR;
}

/* Pushes what the waiting task gets back; returns the count. */
static int push_outcome(lua_State *L, conn_ud *c) {
    if (c->res && !is_error(c->res) && !c->lost) {
        if (c->exec) { lua_pushboolean(L, 1); return 1; }
        push_rows(L, c->res);
        const char *n = PQcmdTuples(c->res);
        if (n && *n) lua_pushinteger(L, (lua_Integer)strtoll(n, NULL, 10));
        else lua_pushnil(L);
        return 2;
    }
    lua_pushnil(L);
    if (c->res) push_result_err(L, c->res);
    else if (c->lost) push_err(L, "connection", c->lost, NULL);
    else push_err(L, "connection", PQerrorMessage(c->pg), NULL);
    return 2;
}

/* The operation is over: resume the waiting task with its outcome. */
static void finish(conn_ud *c) {
    lua_State *co = c->w.co;
    c->op = OP_IDLE;
    if (c->ev) event_del(c->ev);
    if (!co) { clear_state(c); return; }
    int n = push_outcome(co, c);
    clear_state(c);
    obleth_wait_resume(&c->w, n);
}

/* Pushes the list of notifications: n (already taken from libpq's queue) and the rest. */
static void push_notifies(lua_State *L, PGconn *pg, PGnotify *n) {
    lua_newtable(L);
    int i = 0;
    for (; n != NULL; n = PQnotifies(pg)) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, n->relname);
        lua_setfield(L, -2, "channel");
        lua_pushstring(L, n->extra ? n->extra : "");
        lua_setfield(L, -2, "payload");
        lua_pushinteger(L, n->be_pid);
        lua_setfield(L, -2, "pid");
        lua_rawseti(L, -2, ++i);
        PQfreemem(n);
    }
}

/* ---- the socket's callback ----------------------------------------------------- */

static void step_connect(conn_ud *c, short what) {
    lua_State *co = c->w.co;
    if (what & EV_TIMEOUT) {
        set_lost(c, "timed out connecting to PostgreSQL");
        goto failed;
    }
    switch (PQconnectPoll(c->pg)) {
    case PGRES_POLLING_READING: if (watch(c, EV_READ, 1) == 0) return; goto failed;
    case PGRES_POLLING_WRITING: if (watch(c, EV_WRITE, 1) == 0) return; goto failed;
    case PGRES_POLLING_OK:
        if (PQsetnonblocking(c->pg, 1) != 0) goto failed;
        c->op = OP_IDLE;
        if (c->ev) event_del(c->ev);
        lua_rawgeti(co, LUA_REGISTRYINDEX, c->self_ref);
        luaL_unref(co, LUA_REGISTRYINDEX, c->self_ref);
        c->self_ref = LUA_NOREF;
        obleth_wait_resume(&c->w, 1);
        return;
    default: goto failed;
    }
failed:
    c->op = OP_IDLE;
    if (c->ev) event_del(c->ev);
    luaL_unref(co, LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
    lua_pushnil(co);
    push_err(co, "connection", c->lost ? c->lost : PQerrorMessage(c->pg), NULL);
    clear_state(c);
    PQfinish(c->pg);
    c->pg = NULL;
    c->op = OP_CLOSED;
    obleth_wait_resume(&c->w, 2);
}

/* Read what arrived; collect results until libpq would block. Returns 1 when done. */
static int step_read(conn_ud *c) {
    if (!PQconsumeInput(c->pg)) {
        set_lost(c, PQerrorMessage(c->pg));
        return 1;
    }
    while (!PQisBusy(c->pg)) {
        PGresult *r = PQgetResult(c->pg);
        if (!r) return 1;
        if (!c->res) {
            c->res = r;
        } else if (is_error(c->res)) {
            PQclear(r); /* the first error wins */
        } else {
            PQclear(c->res); /* else the last result */
            c->res = r;
        }
        if (PQstatus(c->pg) == CONNECTION_BAD) {
            set_lost(c, PQerrorMessage(c->pg));
            return 1;
        }
    }
    return 0;
}

static void conn_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    conn_ud *c = arg;
    if (c->op == OP_CLOSED) { /* close() while a task waited: tell it */
        lua_State *co = c->w.co;
        if (co) {
            lua_pushnil(co);
            push_err(co, "closed", "the PostgreSQL connection was closed", NULL);
            obleth_wait_resume(&c->w, 2);
        }
        return;
    }
    if (!c->pg) return;
    switch (c->op) {
    case OP_CONNECT: step_connect(c, what); return;
    case OP_SEND: {
        if (what & EV_READ) {
            if (!PQconsumeInput(c->pg)) { set_lost(c, PQerrorMessage(c->pg)); finish(c); return; }
        }
        int f = PQflush(c->pg);
        if (f < 0) { set_lost(c, PQerrorMessage(c->pg)); finish(c); return; }
        if (f == 1) { if (watch(c, EV_READ | EV_WRITE, 0) != 0) { set_lost(c, NULL); finish(c); } return; }
        c->op = OP_READ;
        if (step_read(c)) { finish(c); return; }
        if (watch(c, EV_READ, 0) != 0) { set_lost(c, NULL); finish(c); }
        return;
    }
    case OP_READ:
        if (step_read(c)) { finish(c); return; }
        if (watch(c, EV_READ, 0) != 0) { set_lost(c, NULL); finish(c); }
        return;
    case OP_NOTIFY: {
        lua_State *co = c->w.co;
        int ok = (what & EV_TIMEOUT) || PQconsumeInput(c->pg);
        if (!ok) {
            c->op = OP_IDLE;
            lua_pushnil(co);
            push_err(co, "connection", PQerrorMessage(c->pg), NULL);
            obleth_wait_resume(&c->w, 2);
            return;
        }
        /* a result outside a query: the server reports an error (it shuts down) */
        while (!(what & EV_TIMEOUT) && !PQisBusy(c->pg)) {
            PGresult *r = PQgetResult(c->pg);
            if (!r) break;
            PQclear(r);
        }
        PGnotify *n = PQnotifies(c->pg);
        if (!n && !(what & EV_TIMEOUT)) {
            if (PQstatus(c->pg) == CONNECTION_BAD) {
                c->op = OP_IDLE;
                lua_pushnil(co);
                push_err(co, "connection", PQerrorMessage(c->pg), NULL);
                obleth_wait_resume(&c->w, 2);
                return;
            }
            /* keep waiting (something else was read: the timeout starts again) */
            if (watch(c, EV_READ, 1) != 0) {
                c->op = OP_IDLE;
                lua_pushnil(co);
                push_err(co, "connection", "cannot watch the PostgreSQL socket", NULL);
                obleth_wait_resume(&c->w, 2);
            }
            return;
        }
        c->op = OP_IDLE;
        if (c->ev) event_del(c->ev);
        push_notifies(co, c->pg, n);
        obleth_wait_resume(&c->w, 1);
        return;
    }
    default: return;
    }
}

/* ---- Lua functions ------------------------------------------------------------- */

/* The server's notices (NOTICE, WARNING) are not errors: libpq's default prints them on stderr. */
static void quiet_notice(void *arg, const char *message) { (void)arg; (void)message; }

static int l_connect(lua_State *L) {
    const char *info = luaL_checkstring(L, 1);
    double timeout = 10;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL) timeout = luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    if (!lua_isyieldable(L))
        return luaL_error(L, "pg.connect must be called inside a task (loop.spawn), not from the main thread");
    lua_settop(L, 1);
    conn_ud *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->w.ref = LUA_NOREF;
    c->self_ref = LUA_NOREF;
    c->op = OP_CLOSED;
    c->timeout = timeout;
    luaL_setmetatable(L, CONN_MT);
    lua_replace(L, 1);
    c->pg = PQconnectStart(info);
    if (!c->pg) {
        lua_pushnil(L);
        push_err(L, "connection", "out of memory", NULL);
        return 2;
    }
    if (PQstatus(c->pg) == CONNECTION_BAD) {
        lua_pushnil(L);
        push_err(L, "connection", PQerrorMessage(c->pg), NULL);
        PQfinish(c->pg);
        c->pg = NULL;
        return 2;
    }
    PQsetNoticeProcessor(c->pg, quiet_notice, NULL);
    c->op = OP_CONNECT;
    if (watch(c, EV_WRITE, 1) != 0) {
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the PostgreSQL socket", NULL);
        PQfinish(c->pg);
        c->pg = NULL;
        c->op = OP_CLOSED;
        return 2;
    }
    lua_pushvalue(L, 1);
    c->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 1);
    obleth_wait_begin(L, &c->w, "pg.connect");
    return lua_yield(L, 0);
}

/* Start sending; yield. The caller checked the connection is idle. */
static int start(lua_State *L, conn_ud *c, int sent, int exec) {
    if (!sent) {
        lua_pushnil(L);
        push_err(L, PQstatus(c->pg) == CONNECTION_BAD ? "connection" : "error", PQerrorMessage(c->pg), NULL);
        return 2;
    }
    if (!lua_isyieldable(L))
        return luaL_error(L, "a PostgreSQL query must be made inside a task (loop.spawn)");
    clear_state(c);
    c->exec = exec;
    c->op = OP_SEND;
    if (watch(c, EV_WRITE, 0) != 0) {
        c->op = OP_IDLE;
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the PostgreSQL socket", NULL);
        return 2;
    }
    lua_settop(L, 1); /* the conn stays on the waiting task's stack: it cannot be collected */
    obleth_wait_begin(L, &c->w, "pg query");
    return lua_yield(L, 0);
}

static int conn_query(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    size_t sqllen;
    const char *sql = luaL_checklstring(L, 2, &sqllen);
    int n = lua_gettop(L) - 2;
    if (n > 65535) return luaL_error(L, "too many parameters (%d)", n);
    if (!lua_isyieldable(L))
        return luaL_error(L, "a PostgreSQL query must be made inside a task (loop.spawn)");
    const char **values = n > 0 ? lua_newuserdatauv(L, sizeof(char *) * (size_t)n, 0) : NULL;
    int *lengths = n > 0 ? lua_newuserdatauv(L, sizeof(int) * (size_t)n, 0) : NULL;
    for (int i = 0; i < n; i++) {
        int idx = 3 + i;
        size_t len = 0;
        char num[64];
        switch (lua_type(L, idx)) {
        case LUA_TNIL: values[i] = NULL; lengths[i] = 0; continue;
        case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false"); break;
        case LUA_TNUMBER:
            if (lua_isinteger(L, idx)) {
                snprintf(num, sizeof num, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, idx));
            } else {
                double d = lua_tonumber(L, idx);
                if (isnan(d)) snprintf(num, sizeof num, "NaN");
                else if (isinf(d)) snprintf(num, sizeof num, d > 0 ? "Infinity" : "-Infinity");
                else snprintf(num, sizeof num, "%.17g", d);
            }
            lua_pushstring(L, num);
            break;
        case LUA_TSTRING: lua_pushvalue(L, idx); break;
        default:
            return luaL_argerror(L, idx, lua_pushfstring(L, "cannot bind a %s", luaL_typename(L, idx)));
        }
        values[i] = lua_tolstring(L, -1, &len);
        if (strlen(values[i]) != len) return luaL_argerror(L, idx, "a PostgreSQL text value cannot hold a NUL byte");
        lengths[i] = (int)len;
        lua_replace(L, idx); /* keeps the string alive in the argument's slot until the call returns */
    }
    (void)sqllen;
    int sent = PQsendQueryParams(c->pg, sql, n, NULL, n > 0 ? values : NULL, n > 0 ? lengths : NULL, NULL, 0);
    return start(L, c, sent, 0);
}

static int conn_exec(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    const char *sql = luaL_checkstring(L, 2);
    if (!lua_isyieldable(L))
        return luaL_error(L, "a PostgreSQL query must be made inside a task (loop.spawn)");
    return start(L, c, PQsendQuery(c->pg, sql), 1);
}

static int conn_notifications(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    double secs = luaL_optnumber(L, 2, -1);
    if (!PQconsumeInput(c->pg)) {
        lua_pushnil(L);
        push_err(L, "connection", PQerrorMessage(c->pg), NULL);
        return 2;
    }
    PGnotify *n = PQnotifies(c->pg);
    if (n) {
        push_notifies(L, c->pg, n);
        return 1;
    }
    if (secs == 0) { lua_newtable(L); return 1; }
    if (!lua_isyieldable(L))
        return luaL_error(L, "notifications must be waited for inside a task (loop.spawn)");
    c->op = OP_NOTIFY;
    double keep = c->timeout;
    c->timeout = secs;
    int w = watch(c, EV_READ, secs > 0);
    c->timeout = keep;
    if (w != 0) {
        c->op = OP_IDLE;
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the PostgreSQL socket", NULL);
        return 2;
    }
    lua_settop(L, 1);
    obleth_wait_begin(L, &c->w, "pg notifications");
    return lua_yield(L, 0);
}

static int conn_escape_identifier(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    if (!c->pg) return luaL_error(L, "the PostgreSQL connection is closed");
    char *q = PQescapeIdentifier(c->pg, s, len);
    if (!q) return luaL_error(L, "cannot quote the identifier: %s", PQerrorMessage(c->pg));
    lua_pushstring(L, q);
    PQfreemem(q);
    return 1;
}

static int conn_status(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    if (!c->pg || c->op == OP_CLOSED) lua_pushliteral(L, "closed");
    else if (PQstatus(c->pg) == CONNECTION_OK) lua_pushliteral(L, "ok");
    else lua_pushliteral(L, "bad");
    return 1;
}

static int conn_busy(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    lua_pushboolean(L, c->pg && c->op != OP_IDLE && c->op != OP_CLOSED);
    return 1;
}

static int conn_backend_pid(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    if (!c->pg || c->op == OP_CLOSED) return 0;
    lua_pushinteger(L, PQbackendPID(c->pg));
    return 1;
}

static int conn_close(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    int waiting = c->w.co != NULL && c->op != OP_CLOSED && c->op != OP_IDLE;
    if (c->self_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, c->self_ref);
        c->self_ref = LUA_NOREF;
    }
    clear_state(c);
    if (c->pg) PQfinish(c->pg);
    c->pg = NULL;
    c->op = OP_CLOSED;
    /* a waiting task is resumed on the next loop turn, with nil, err (conn_cb) */
    obleth_fd_wait_stop(c->ev, waiting, conn_cb, c);
    return 0;
}

static int conn_gc(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    clear_state(c);
    if (c->pg) PQfinish(c->pg);
    c->pg = NULL;
    c->op = OP_CLOSED;
    if (c->ev) { event_free(c->ev); c->ev = NULL; }
    obleth_wait_drop(L, &c->w);
    return 0;
}

static int conn_tostring(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    lua_pushfstring(L, "obleth.pg.conn (%s)", c->pg ? "open" : "closed");
    return 1;
}

int luaopen_obleth_pg(lua_State *L) {
    static const luaL_Reg conn_m[] = {
        {"query", conn_query},       {"exec", conn_exec},
        {"notifications", conn_notifications},
        {"escape_identifier", conn_escape_identifier},
        {"status", conn_status},     {"busy", conn_busy},
        {"backend_pid", conn_backend_pid},
        {"close", conn_close},       {NULL, NULL}};
    obleth_newclass(L, CONN_MT,
                    &(obleth_class){.methods = conn_m, .gc = conn_gc, .close = conn_close, .tostring = conn_tostring});
    obleth_error_class(L, ERROR_MT);
    static const luaL_Reg fns[] = {{"connect", l_connect}, {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_pushinteger(L, PQlibVersion());
    lua_setfield(L, -2, "version");
    return 1;
}
