/*
 * sqlite.c — obleth.sqlite: a binding of the SQLite C API, prepared
 * statements only (values are always bound, never spliced into SQL).
 *
 * Lua API
 * -------
 * sqlite.open(path [, opts]) -> db  |  nil, err
 *     path is a file name or ":memory:". opts (all optional; an unknown key
 *     or a wrong type raises):
 *       readonly      = false    open read-only (no CREATE; journal_mode
 *                                is left alone since it cannot be changed)
 *       busy_timeout  = 5000     milliseconds to wait on a locked database
 *       wal           = true     PRAGMA journal_mode=WAL, checked to have
 *                                taken effect (an in-memory db stays "memory")
 *       foreign_keys  = true     PRAGMA foreign_keys=ON
 *       synchronous   = "NORMAL" or "FULL"
 *     Single-threaded use: the connection is opened with SQLITE_OPEN_NOMUTEX.
 *
 * db:exec(script) -> true  |  nil, err
 *     Runs every statement of `script` in order (migrations); no parameters,
 *     rows are discarded. Stops at the first failing statement.
 *
 * db:query(sql, ...) -> rows  |  nil, err
 *     `sql` is one statement. rows = {row1, row2, ...}; a row is a table
 *     keyed by column name. Column values: INTEGER -> Lua integer, FLOAT ->
 *     float, TEXT and BLOB -> string (all bytes), NULL -> absent (nil).
 *     Parameters are bound, never interpolated:
 *       - positionally from the varargs (`?`, `?NNN`); the number of
 *         arguments (select('#', ...), so nil holes count) must equal the
 *         statement's parameter count, else it raises;
 *       - or, when the only argument is a table, by name: `:name`, `$name`,
 *         `@name` take t.name, `?` takes t[i], `?NNN` takes t[NNN]; a
 *         missing key binds NULL. Table access is raw (no metamethods).
 *     Lua value -> SQLite: nil -> NULL, boolean -> 0/1, integer -> INTEGER
 *     (64-bit), float -> REAL, string -> TEXT with its length (embedded NUL
 *     bytes kept). Any other type raises.
 *     Statements are cached per db by SQL text (LRU of 64); a cached
 *     statement is reset and its bindings cleared after every use.
 *     SQL that holds no statement, or more than one, raises (use db:exec).
 *
 * db:first(sql, ...) -> row  |  nil (no row)  |  nil, err
 * db:execute(sql, ...) -> changes, last_insert_rowid  |  nil, err
 *     Runs the statement to completion (rows, e.g. from RETURNING, are
 *     discarded) and returns sqlite3_changes64 / sqlite3_last_insert_rowid.
 *
 * db:prepare(sql) -> stmt  |  nil, err
 *     An uncached statement owned by the returned userdata (which keeps the
 *     db alive). Closing the db finalizes it; using it afterwards raises
 *     "statement is closed".
 *   stmt:bind(...) -> stmt  |  nil, err   reset, clear bindings, bind (as query)
 *   stmt:step() -> row  |  nil (done)  |  nil, err
 *                     at the end and after an error the statement is reset
 *                     (bindings kept), so the next step starts over
 *   stmt:rows([...]) -> iterator for a generic for; with arguments it binds
 *                     them first. Errors are raised (the err table). The
 *                     4th value closes over the loop: breaking out resets
 *                     the statement.
 *   stmt:reset() -> stmt   (bindings kept)
 *   stmt:close()           idempotent; also __close and __gc
 *
 * db:transaction(fn, ...) -> fn's results (true when fn returns none)
 *                          |  nil, err
 *     Outside a transaction: BEGIN IMMEDIATE, fn(...) in a protected call,
 *     COMMIT on success; ROLLBACK and nil, err if fn raised (err is the
 *     value it raised, no traceback added) or if COMMIT failed (err is the
 *     SQLite error). Inside a transaction (nested call, or after a manual
 *     BEGIN) it uses SAVEPOINT / RELEASE / ROLLBACK TO, so only the inner
 *     work is undone. fn may yield (the call is lua_pcallk); other tasks
 *     using the same db meanwhile run inside this transaction.
 *
 * db:close() -> true      idempotent; finalizes every statement first.
 *                         Also __close; __gc does the same.
 * db:changes(), db:last_insert_rowid(), db:errmsg()
 * db:stats() -> {cached=, hits=, misses=, open_statements=}
 *     statement cache counters; open_statements counts every sqlite3_stmt
 *     of the connection (cached and prepare()d).
 * sqlite.version      sqlite3_libversion()
 *
 * Errors (expected failures, returned as nil, err):
 *     err = {code=, message=, sqlite_code=} with metatable
 *     "obleth.sqlite.error" (tostring gives "code: message").
 *     code: "busy" (BUSY, LOCKED), "constraint", "readonly", "corrupt"
 *     (CORRUPT, NOTADB), "full", "cantopen", "misuse", "error" (the rest).
 *     message: sqlite3_errmsg. sqlite_code: the extended result code.
 *     Constraint violations add constraint = "unique" | "primarykey" |
 *     "foreignkey" | "notnull" | "check" | "trigger" | "rowid" | "datatype"
 *     | ... | "other".
 *     Misuse from Lua (wrong argument types, a closed db or statement,
 *     parameter count mismatch) raises with luaL_error / luaL_argerror.
 *
 * Memory: the db userdata owns the sqlite3 handle, the statement cache
 * (statements plus sqlite3_malloc'd key copies) and the list of its
 * prepare()d statements; a stmt userdata owns its sqlite3_stmt and holds
 * its db userdata as uservalue. Nothing malloc'd is held in a C local
 * across a call that can raise.
 */
#include "sqlite.h"
#include "host.h"
#include "util.h"

#include <lauxlib.h>
#include <lua.h>
#include <sqlite3.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DB_MT "obleth.sqlite.db"
#define STMT_MT "obleth.sqlite.stmt"
#define ROWS_MT "obleth.sqlite.rows"
#define ERROR_MT "obleth.sqlite.error"

#define CACHE_SIZE 64

/* prepare_one results besides SQLite's codes */
#define PREP_EMPTY (-1) /* the SQL holds no statement */
#define PREP_MULTI (-2) /* the SQL holds more than one statement */

typedef struct cache_entry {
    char *sql; /* sqlite3_malloc'd copy of the key; NULL when the slot is free */
    size_t len;
    sqlite3_stmt *st;
    unsigned long long used; /* LRU tick */
} cache_entry;

typedef struct stmt_ud stmt_ud;

typedef struct db_ud {
    sqlite3 *db;    /* NULL once closed */
    stmt_ud *stmts; /* open prepare()d statements, doubly linked */
    unsigned long long tick, hits, misses;
    cache_entry cache[CACHE_SIZE];
} db_ud;

struct stmt_ud {
    sqlite3_stmt *st; /* NULL once closed */
    db_ud *owner;     /* NULL once closed */
    stmt_ud *prev, *next;
};

/* ---- errors ------------------------------------------------------------- */

static const char *code_name(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return "busy";
    case SQLITE_CONSTRAINT: return "constraint";
    case SQLITE_READONLY: return "readonly";
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return "corrupt";
    case SQLITE_FULL: return "full";
    case SQLITE_CANTOPEN: return "cantopen";
    case SQLITE_MISUSE: return "misuse";
    default: return "error";
    }
}

static const char *constraint_name(int rc)
{
    switch (rc) {
    case SQLITE_CONSTRAINT_UNIQUE: return "unique";
    case SQLITE_CONSTRAINT_PRIMARYKEY: return "primarykey";
    case SQLITE_CONSTRAINT_FOREIGNKEY: return "foreignkey";
    case SQLITE_CONSTRAINT_NOTNULL: return "notnull";
    case SQLITE_CONSTRAINT_CHECK: return "check";
    case SQLITE_CONSTRAINT_TRIGGER: return "trigger";
    case SQLITE_CONSTRAINT_ROWID: return "rowid";
    case SQLITE_CONSTRAINT_FUNCTION: return "function";
    case SQLITE_CONSTRAINT_VTAB: return "vtab";
    case SQLITE_CONSTRAINT_COMMITHOOK: return "commithook";
#ifdef SQLITE_CONSTRAINT_PINNED
    case SQLITE_CONSTRAINT_PINNED: return "pinned";
#endif
#ifdef SQLITE_CONSTRAINT_DATATYPE
    case SQLITE_CONSTRAINT_DATATYPE: return "datatype";
#endif
    default: return "other";
    }
}

/* Pushes the error table for result code rc; message is msg, or the
 * connection's errmsg, or sqlite3_errstr(rc). */
static void push_err(lua_State *L, sqlite3 *db, int rc, const char *msg)
{
    if (!msg) msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    obleth_error_push(L, ERROR_MT, code_name(rc), msg, msg ? strlen(msg) : 0, NULL);
    lua_pushinteger(L, rc);
    lua_setfield(L, -2, "sqlite_code");
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
        lua_pushstring(L, constraint_name(rc));
        lua_setfield(L, -2, "constraint");
    }
}

/* Pushes nil, err; returns 2 (for `return fail(...)`). */
static int fail(lua_State *L, sqlite3 *db, int rc, const char *msg)
{
    lua_pushnil(L);
    push_err(L, db, rc, msg);
    return 2;
}

/* ---- statements: prepare, bind, rows ------------------------------------- */

/*
 * Prepares exactly one statement from sql[0..len). Returns SQLITE_OK with
 * *out set, a SQLite error code (errmsg set, *out NULL), PREP_EMPTY or
 * PREP_MULTI (*out NULL). The caller owns *out.
 */
static int prepare_one(sqlite3 *db, const char *sql, size_t len, unsigned flags,
                       sqlite3_stmt **out)
{
    const char *tail = NULL, *end = sql + len;
    *out = NULL;
    if (len > INT_MAX) return SQLITE_TOOBIG;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v3(db, sql, (int)len, flags, &st, &tail);
    if (rc != SQLITE_OK) return rc;
    if (!st) return PREP_EMPTY;
    /* anything left must be empty statements, whitespace or comments */
    while (tail && tail < end) {
        sqlite3_stmt *more = NULL;
        const char *next = NULL;
        rc = sqlite3_prepare_v2(db, tail, (int)(end - tail), &more, &next);
        if (rc != SQLITE_OK || more) {
            sqlite3_finalize(more);
            sqlite3_finalize(st);
            return PREP_MULTI;
        }
        if (!next || next <= tail) break;
        tail = next;
    }
    *out = st;
    return SQLITE_OK;
}

/* Raises for PREP_EMPTY / PREP_MULTI; call with nothing to free. */
static void raise_prep(lua_State *L, int rc)
{
    if (rc == PREP_EMPTY) luaL_error(L, "sql holds no statement");
    if (rc == PREP_MULTI) luaL_error(L, "sql holds more than one statement (use db:exec)");
}

/* Binds the Lua value at stack index idx to parameter i. Raises for a
 * value that cannot be bound (nothing has been stepped yet). */
static int bind_value(lua_State *L, sqlite3_stmt *st, int i, int idx)
{
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return sqlite3_bind_null(st, i);
    case LUA_TBOOLEAN: return sqlite3_bind_int(st, i, lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) return sqlite3_bind_int64(st, i, lua_tointeger(L, idx));
        return sqlite3_bind_double(st, i, lua_tonumber(L, idx));
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        return sqlite3_bind_text64(st, i, s, n, SQLITE_TRANSIENT, SQLITE_UTF8);
    }
    default:
        return luaL_error(L, "cannot bind a %s value to parameter %d", luaL_typename(L, idx), i);
    }
}

/*
 * Binds the n Lua values at stack [first, first+n) (see the header
 * comment: positional, or a single table by name). Returns SQLITE_OK or
 * the SQLite error of the failing bind; raises on misuse.
 */
static int bind_args(lua_State *L, sqlite3_stmt *st, int first, int n)
{
    int count = sqlite3_bind_parameter_count(st);
    if (n == 1 && lua_type(L, first) == LUA_TTABLE) {
        for (int i = 1; i <= count; i++) {
            const char *name = sqlite3_bind_parameter_name(st, i);
            if (!name) lua_rawgeti(L, first, i);
            else if (name[0] == '?') lua_rawgeti(L, first, strtol(name + 1, NULL, 10));
            else {
                lua_pushstring(L, name + 1);
                lua_rawget(L, first);
            }
            int rc = bind_value(L, st, i, -1);
            lua_pop(L, 1);
            if (rc != SQLITE_OK) return rc;
        }
        return SQLITE_OK;
    }
    if (n != count)
        return luaL_error(L, "statement takes %d parameter%s, got %d", count,
                          count == 1 ? "" : "s", n);
    for (int i = 1; i <= n; i++) {
        int rc = bind_value(L, st, i, first + i - 1);
        if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
}

/* Pushes the current row of st as a table keyed by column name (NULL
 * columns absent). Returns SQLITE_OK, or SQLITE_NOMEM (nothing pushed). */
static int push_row(lua_State *L, sqlite3_stmt *st)
{
    int ncol = sqlite3_column_count(st);
    lua_createtable(L, 0, ncol);
    for (int i = 0; i < ncol; i++) {
        const char *name = sqlite3_column_name(st, i);
        switch (sqlite3_column_type(st, i)) {
        case SQLITE_INTEGER: lua_pushinteger(L, sqlite3_column_int64(st, i)); break;
        case SQLITE_FLOAT: lua_pushnumber(L, sqlite3_column_double(st, i)); break;
        case SQLITE_TEXT: {
            const unsigned char *p = sqlite3_column_text(st, i);
            if (!p) goto nomem;
            lua_pushlstring(L, (const char *)p, (size_t)sqlite3_column_bytes(st, i));
            break;
        }
        case SQLITE_BLOB: {
            const void *p = sqlite3_column_blob(st, i);
            int nb = sqlite3_column_bytes(st, i);
            if (!p && nb > 0) goto nomem;
            lua_pushlstring(L, p ? (const char *)p : "", (size_t)nb);
            break;
        }
        default: continue; /* NULL */
        }
        if (!name) {
            lua_pop(L, 1);
            goto nomem;
        }
        lua_setfield(L, -2, name);
    }
    return SQLITE_OK;
nomem:
    lua_pop(L, 1);
    return SQLITE_NOMEM;
}

/* ---- db ------------------------------------------------------------------ */

static db_ud *check_db(lua_State *L, int i)
{
    db_ud *d = luaL_checkudata(L, i, DB_MT);
    if (!d->db) luaL_error(L, "database is closed");
    return d;
}

static void stmt_unlink(stmt_ud *s)
{
    if (s->owner) {
        if (s->prev) s->prev->next = s->next;
        else s->owner->stmts = s->next;
        if (s->next) s->next->prev = s->prev;
    }
    s->owner = NULL;
    s->prev = s->next = NULL;
}

/* Finalizes every statement of d and closes the connection. Idempotent. */
static void db_release(db_ud *d)
{
    if (!d->db) return;
    while (d->stmts) {
        stmt_ud *s = d->stmts;
        sqlite3_finalize(s->st);
        s->st = NULL;
        stmt_unlink(s);
    }
    for (int i = 0; i < CACHE_SIZE; i++) {
        cache_entry *e = &d->cache[i];
        if (e->st) sqlite3_finalize(e->st);
        sqlite3_free(e->sql);
        memset(e, 0, sizeof *e);
    }
    /* anything a raise (out of memory) left behind */
    sqlite3_stmt *st;
    while ((st = sqlite3_next_stmt(d->db, NULL)) != NULL) sqlite3_finalize(st);
    sqlite3_close_v2(d->db);
    d->db = NULL;
}

/* __gc, __close and :close(): (db [, err]) -> true */
static int db_close(lua_State *L)
{
    db_release(luaL_checkudata(L, 1, DB_MT));
    lua_pushboolean(L, 1);
    return 1;
}

/*
 * Looks sql up in d's statement cache, preparing and inserting it on a
 * miss (evicting the least recently used entry). On SQLITE_OK *out is a
 * reset statement with no bindings, still owned by the cache. Other
 * results as prepare_one.
 */
static int cache_get(db_ud *d, const char *sql, size_t len, sqlite3_stmt **out)
{
    cache_entry *victim = NULL;
    for (int i = 0; i < CACHE_SIZE; i++) {
        cache_entry *e = &d->cache[i];
        if (e->sql && e->len == len && memcmp(e->sql, sql, len) == 0) {
            e->used = ++d->tick;
            d->hits++;
            sqlite3_reset(e->st);
            sqlite3_clear_bindings(e->st);
            *out = e->st;
            return SQLITE_OK;
        }
        if (!victim || (victim->sql && (!e->sql || e->used < victim->used))) victim = e;
    }
    sqlite3_stmt *st;
    int rc = prepare_one(d->db, sql, len, SQLITE_PREPARE_PERSISTENT, &st);
    if (rc != SQLITE_OK) return rc;
    char *key = sqlite3_malloc64(len + 1);
    if (!key) {
        sqlite3_finalize(st);
        return SQLITE_NOMEM;
    }
    memcpy(key, sql, len);
    key[len] = '\0';
    if (victim->st) sqlite3_finalize(victim->st);
    sqlite3_free(victim->sql);
    victim->sql = key;
    victim->len = len;
    victim->st = st;
    victim->used = ++d->tick;
    d->misses++;
    *out = st;
    return SQLITE_OK;
}

static void stmt_done(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

enum run_mode { RUN_ROWS, RUN_FIRST, RUN_EXEC };

/* (db, sql, ...) -> see query / first / execute */
static int run(lua_State *L, enum run_mode mode)
{
    db_ud *d = check_db(L, 1);
    size_t len;
    const char *sql = luaL_checklstring(L, 2, &len);
    int nargs = lua_gettop(L) - 2;
    sqlite3_stmt *st;
    int rc = cache_get(d, sql, len, &st);
    if (rc != SQLITE_OK) {
        raise_prep(L, rc);
        return fail(L, d->db, rc, NULL);
    }
    /* may raise on misuse: st is not stepped, the next cache_get resets it */
    rc = bind_args(L, st, 3, nargs);
    if (rc != SQLITE_OK) {
        fail(L, d->db, rc, NULL);
        stmt_done(st);
        return 2;
    }
    if (mode == RUN_ROWS) lua_newtable(L);
    lua_Integer n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (mode == RUN_EXEC) continue;
        if ((rc = push_row(L, st)) != SQLITE_OK) break;
        if (mode == RUN_FIRST) {
            stmt_done(st);
            return 1;
        }
        lua_rawseti(L, -2, ++n);
    }
    if (rc != SQLITE_DONE) {
        fail(L, d->db, rc, rc == SQLITE_NOMEM ? sqlite3_errstr(rc) : NULL);
        stmt_done(st);
        return 2;
    }
    stmt_done(st);
    switch (mode) {
    case RUN_ROWS: return 1;
    case RUN_FIRST: lua_pushnil(L); return 1;
    case RUN_EXEC:
        lua_pushinteger(L, (lua_Integer)sqlite3_changes64(d->db));
        lua_pushinteger(L, (lua_Integer)sqlite3_last_insert_rowid(d->db));
        return 2;
    }
    return 0;
}

static int db_query(lua_State *L) { return run(L, RUN_ROWS); }
static int db_first(lua_State *L) { return run(L, RUN_FIRST); }
static int db_execute(lua_State *L) { return run(L, RUN_EXEC); }

/*
 * Runs every statement of sql[0..len) in order, discarding rows. Returns 0,
 * or pushes nil, err and returns 2. Each statement is finalized before
 * anything is pushed, so a raise cannot strand it.
 */
static int exec_script(lua_State *L, sqlite3 *db, const char *sql, size_t len)
{
    const char *p = sql, *end = sql + len;
    while (p < end) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        if (end - p > INT_MAX) return fail(L, db, SQLITE_TOOBIG, NULL);
        int rc = sqlite3_prepare_v2(db, p, (int)(end - p), &st, &tail);
        if (rc != SQLITE_OK) return fail(L, db, rc, NULL);
        if (st) {
            while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            }
            rc = sqlite3_finalize(st); /* keeps the step's error and message */
            if (rc != SQLITE_OK) return fail(L, db, sqlite3_extended_errcode(db), NULL);
        }
        if (!tail || tail <= p) break;
        p = tail;
    }
    return 0;
}

/* (db, script) -> true | nil, err */
static int db_exec(lua_State *L)
{
    db_ud *d = check_db(L, 1);
    size_t len;
    const char *sql = luaL_checklstring(L, 2, &len);
    if (exec_script(L, d->db, sql, len)) return 2;
    lua_pushboolean(L, 1);
    return 1;
}

static int db_changes(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)sqlite3_changes64(check_db(L, 1)->db));
    return 1;
}

static int db_last_insert_rowid(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)sqlite3_last_insert_rowid(check_db(L, 1)->db));
    return 1;
}

static int db_errmsg(lua_State *L)
{
    lua_pushstring(L, sqlite3_errmsg(check_db(L, 1)->db));
    return 1;
}

/* (db) -> {cached=, hits=, misses=, open_statements=} */
static int db_stats(lua_State *L)
{
    db_ud *d = check_db(L, 1);
    lua_Integer cached = 0, open = 0;
    for (int i = 0; i < CACHE_SIZE; i++) cached += d->cache[i].st != NULL;
    for (sqlite3_stmt *st = sqlite3_next_stmt(d->db, NULL); st; st = sqlite3_next_stmt(d->db, st))
        open++;
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, cached);
    lua_setfield(L, -2, "cached");
    lua_pushinteger(L, (lua_Integer)d->hits);
    lua_setfield(L, -2, "hits");
    lua_pushinteger(L, (lua_Integer)d->misses);
    lua_setfield(L, -2, "misses");
    lua_pushinteger(L, open);
    lua_setfield(L, -2, "open_statements");
    return 1;
}

/* ---- transactions -------------------------------------------------------- */

/* Undo the current transaction (top) or innermost savepoint. No Lua calls. */
static void tx_rollback(sqlite3 *db, int top)
{
    if (sqlite3_get_autocommit(db)) return; /* SQLite already rolled back */
    sqlite3_exec(db, top ? "ROLLBACK" : "ROLLBACK TO obleth_tx; RELEASE obleth_tx", NULL, NULL,
                 NULL);
}

/*
 * Continuation of db:transaction. Stack: db, then fn's results (success)
 * or the error value (failure). ctx = 1 for BEGIN/COMMIT, 0 for a savepoint.
 */
static int tx_finish(lua_State *L, int status, lua_KContext ctx)
{
    db_ud *d = luaL_checkudata(L, 1, DB_MT);
    int top = (int)ctx;
    if (!d->db) return luaL_error(L, "database was closed inside db:transaction");
    if (status == LUA_OK || status == LUA_YIELD) {
        int nres = lua_gettop(L) - 1;
        const char *end = top ? "COMMIT" : "RELEASE obleth_tx";
        if (exec_script(L, d->db, end, strlen(end))) {
            tx_rollback(d->db, top);
            return 2;
        }
        if (nres == 0) {
            lua_pushboolean(L, 1);
            return 1;
        }
        return nres;
    }
    tx_rollback(d->db, top);
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
}

/* (db, fn, ...) -> fn's results | true | nil, err */
static int db_transaction(lua_State *L)
{
    db_ud *d = check_db(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int top = sqlite3_get_autocommit(d->db) != 0;
    const char *begin = top ? "BEGIN IMMEDIATE" : "SAVEPOINT obleth_tx";
    if (exec_script(L, d->db, begin, strlen(begin))) return 2;
    int nargs = lua_gettop(L) - 2;
    return tx_finish(L, lua_pcallk(L, nargs, LUA_MULTRET, 0, top, tx_finish), top);
}

/* ---- prepared statement userdata ----------------------------------------- */

static stmt_ud *check_stmt_at(lua_State *L, int i)
{
    stmt_ud *s = luaL_checkudata(L, i, STMT_MT);
    if (!s->st) luaL_error(L, "statement is closed");
    return s;
}

/* (db, sql) -> stmt | nil, err */
static int db_prepare(lua_State *L)
{
    db_ud *d = check_db(L, 1);
    size_t len;
    const char *sql = luaL_checklstring(L, 2, &len);
    stmt_ud *s = lua_newuserdatauv(L, sizeof *s, 1);
    memset(s, 0, sizeof *s);
    luaL_setmetatable(L, STMT_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1); /* the stmt keeps its db alive */
    sqlite3_stmt *st;
    int rc = prepare_one(d->db, sql, len, SQLITE_PREPARE_PERSISTENT, &st);
    if (rc != SQLITE_OK) {
        raise_prep(L, rc);
        return fail(L, d->db, rc, NULL);
    }
    s->st = st;
    s->owner = d;
    s->next = d->stmts;
    if (d->stmts) d->stmts->prev = s;
    d->stmts = s;
    return 1;
}

/* __gc, __close and :close(): (stmt [, err]) -> () */
static int stmt_close(lua_State *L)
{
    stmt_ud *s = luaL_checkudata(L, 1, STMT_MT);
    if (s->st) sqlite3_finalize(s->st);
    s->st = NULL;
    stmt_unlink(s);
    return 0;
}

/* (stmt, ...) -> stmt | nil, err */
static int stmt_bind(lua_State *L)
{
    stmt_ud *s = check_stmt_at(L, 1);
    stmt_done(s->st);
    int rc = bind_args(L, s->st, 2, lua_gettop(L) - 1);
    if (rc != SQLITE_OK) return fail(L, sqlite3_db_handle(s->st), rc, NULL);
    lua_settop(L, 1);
    return 1;
}

/* (stmt) -> stmt; bindings are kept */
static int stmt_reset(lua_State *L)
{
    sqlite3_reset(check_stmt_at(L, 1)->st);
    lua_settop(L, 1);
    return 1;
}

/* One step of s: pushes the row and returns 1, returns 0 at the end, or
 * pushes the error table and returns -1. Resets at the end and on error. */
static int step_once(lua_State *L, stmt_ud *s)
{
    int rc = sqlite3_step(s->st);
    if (rc == SQLITE_ROW) {
        rc = push_row(L, s->st);
        if (rc == SQLITE_OK) return 1;
        push_err(L, sqlite3_db_handle(s->st), rc, sqlite3_errstr(rc));
        sqlite3_reset(s->st);
        return -1;
    }
    if (rc == SQLITE_DONE) {
        sqlite3_reset(s->st);
        return 0;
    }
    push_err(L, sqlite3_db_handle(s->st), rc, NULL);
    sqlite3_reset(s->st);
    return -1;
}

/* (stmt) -> row | nil | nil, err */
static int stmt_step(lua_State *L)
{
    switch (step_once(L, check_stmt_at(L, 1))) {
    case 1: return 1;
    case 0: lua_pushnil(L); return 1;
    default:
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
}

/* iterator: upvalue 1 = stmt; () -> row | nil; raises the err table */
static int rows_iter(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    stmt_ud *s = check_stmt_at(L, -1);
    int r = step_once(L, s);
    if (r < 0) return lua_error(L);
    return r;
}

/* __close of the loop's closing value {stmt}: reset the statement */
static int rows_close(lua_State *L)
{
    lua_rawgeti(L, 1, 1);
    stmt_ud *s = luaL_testudata(L, -1, STMT_MT);
    if (s && s->st) sqlite3_reset(s->st);
    return 0;
}

/* (stmt [, ...]) -> iter, nil, nil, closer */
static int stmt_rows(lua_State *L)
{
    stmt_ud *s = check_stmt_at(L, 1);
    int nargs = lua_gettop(L) - 1;
    sqlite3_reset(s->st);
    if (nargs > 0) {
        sqlite3_clear_bindings(s->st);
        int rc = bind_args(L, s->st, 2, nargs);
        if (rc != SQLITE_OK) {
            push_err(L, sqlite3_db_handle(s->st), rc, NULL);
            return lua_error(L);
        }
    }
    lua_settop(L, 1);
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, rows_iter, 1);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_createtable(L, 1, 0);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, 1);
    luaL_setmetatable(L, ROWS_MT);
    return 4;
}

/* ---- open ---------------------------------------------------------------- */

typedef struct open_opts {
    int readonly, wal, foreign_keys;
    lua_Integer busy_timeout;
    const char *synchronous;
} open_opts;

static int opt_bool(lua_State *L, const char *k, int def)
{
    int t = lua_getfield(L, 2, k);
    int v = def;
    if (t == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
    else if (t != LUA_TNIL) luaL_error(L, "open: option '%s' must be a boolean", k);
    lua_pop(L, 1);
    return v;
}

/* Reads opts at index 2 (nil or a table); raises on misuse. */
static void read_opts(lua_State *L, open_opts *o)
{
    static const char *const known[] = {"readonly", "busy_timeout", "wal", "foreign_keys",
                                        "synchronous", NULL};
    o->readonly = 0;
    o->wal = 1;
    o->foreign_keys = 1;
    o->busy_timeout = 5000;
    o->synchronous = "NORMAL";
    if (lua_isnoneornil(L, 2)) return;
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        int ok = 0;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (int i = 0; known[i]; i++) ok |= strcmp(lua_tostring(L, -2), known[i]) == 0;
        if (!ok) luaL_error(L, "open: unknown option '%s'", luaL_tolstring(L, -2, NULL));
        lua_pop(L, 1);
    }
    o->readonly = opt_bool(L, "readonly", 0);
    o->wal = opt_bool(L, "wal", 1);
    o->foreign_keys = opt_bool(L, "foreign_keys", 1);
    int t = lua_getfield(L, 2, "busy_timeout");
    if (t != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 || lua_tointeger(L, -1) > INT_MAX)
            luaL_error(L, "open: option 'busy_timeout' must be a non-negative integer (ms)");
        o->busy_timeout = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    t = lua_getfield(L, 2, "synchronous");
    if (t != LUA_TNIL) {
        const char *v = lua_tostring(L, -1);
        if (t != LUA_TSTRING || (strcmp(v, "NORMAL") != 0 && strcmp(v, "FULL") != 0))
            luaL_error(L, "open: option 'synchronous' must be \"NORMAL\" or \"FULL\"");
        o->synchronous = strcmp(v, "FULL") == 0 ? "FULL" : "NORMAL";
    }
    lua_pop(L, 1);
}

/* Sets journal_mode=WAL and checks it took effect. Returns 0, or pushes
 * nil, err and returns 2. */
static int set_wal(lua_State *L, sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
    if (rc != SQLITE_OK) return fail(L, db, rc, NULL);
    rc = sqlite3_step(st);
    char mode[16] = "";
    if (rc == SQLITE_ROW) {
        const unsigned char *m = sqlite3_column_text(st, 0);
        if (m) {
            strncpy(mode, (const char *)m, sizeof mode - 1);
            mode[sizeof mode - 1] = '\0';
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        sqlite3_finalize(st);
        return fail(L, db, sqlite3_extended_errcode(db), NULL);
    }
    sqlite3_finalize(st);
    const char *file = sqlite3_db_filename(db, "main");
    int in_memory = !file || !file[0];
    if (strcmp(mode, "wal") == 0 || (in_memory && strcmp(mode, "memory") == 0)) return 0;
    lua_pushnil(L);
    push_err(L, db, SQLITE_ERROR, NULL);
    lua_pushfstring(L, "journal_mode=WAL did not take effect (journal_mode is '%s')", mode);
    lua_setfield(L, -2, "message");
    return 2;
}

/* (path [, opts]) -> db | nil, err */
static int l_open(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    open_opts o;
    read_opts(L, &o);
    lua_settop(L, 2);
    db_ud *d = lua_newuserdatauv(L, sizeof *d, 0); /* index 3 */
    memset(d, 0, sizeof *d);
    luaL_setmetatable(L, DB_MT);
    int flags = SQLITE_OPEN_NOMUTEX |
                (o.readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    d->db = db; /* owned by the userdata from here on, even on failure */
    if (rc != SQLITE_OK) {
        int r = fail(L, db, db ? sqlite3_extended_errcode(db) : rc, NULL);
        db_release(d);
        return r;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, (int)o.busy_timeout);
    char sql[64];
    int r = 0;
    if (o.wal && !o.readonly) r = set_wal(L, db);
    if (!r && o.foreign_keys) r = exec_script(L, db, "PRAGMA foreign_keys=ON", 22);
    if (!r && !o.readonly) {
        size_t n = (size_t)snprintf(sql, sizeof sql, "PRAGMA synchronous=%s", o.synchronous);
        r = exec_script(L, db, sql, n);
    }
    if (r) {
        db_release(d);
        return r;
    }
    lua_settop(L, 3);
    return 1;
}

/* ---- module -------------------------------------------------------------- */

int luaopen_obleth_sqlite(lua_State *L)
{
    static const luaL_Reg funcs[] = {{"open", l_open}, {"version", NULL}, {NULL, NULL}};
    static const luaL_Reg db_methods[] = {
        {"exec", db_exec},
        {"query", db_query},
        {"first", db_first},
        {"execute", db_execute},
        {"prepare", db_prepare},
        {"transaction", db_transaction},
        {"close", db_close},
        {"changes", db_changes},
        {"last_insert_rowid", db_last_insert_rowid},
        {"errmsg", db_errmsg},
        {"stats", db_stats},
        {NULL, NULL},
    };
    static const luaL_Reg stmt_methods[] = {
        {"bind", stmt_bind},   {"step", stmt_step},   {"rows", stmt_rows},
        {"reset", stmt_reset}, {"close", stmt_close}, {NULL, NULL},
    };
    obleth_newclass(L, DB_MT, &(obleth_class){.methods = db_methods, .gc = db_close, .close = db_close});
    obleth_newclass(L, STMT_MT, &(obleth_class){.methods = stmt_methods, .gc = stmt_close, .close = stmt_close});
    obleth_newclass(L, ROWS_MT, &(obleth_class){.close = rows_close});
    obleth_error_class(L, ERROR_MT);
    luaL_newlib(L, funcs);
    lua_pushstring(L, sqlite3_libversion());
    lua_setfield(L, -2, "version");
    return 1;
}
