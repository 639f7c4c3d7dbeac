/*
 * sqlite.h — obleth.sqlite: SQLite for Lua, prepared statements only.
 *
 * Registered by the host in package.preload as "obleth.sqlite"; nothing is
 * put in globals. The Lua API (full contract in host/sqlite.c):
 *
 *   sqlite.open(path [, opts]) -> db | nil, err
 *   db:exec(script)            -> true | nil, err      (no parameters)
 *   db:query(sql, ...)         -> {row, ...} | nil, err
 *   db:first(sql, ...)         -> row | nil | nil, err
 *   db:execute(sql, ...)       -> changes, last_insert_rowid | nil, err
 *   db:prepare(sql)            -> stmt | nil, err
 *   db:transaction(fn, ...)    -> fn's results (true if none) | nil, err
 *   db:close(), db:changes(), db:last_insert_rowid(), db:errmsg(), db:stats()
 *   stmt:bind(...), stmt:step(), stmt:rows(...), stmt:reset(), stmt:close()
 *   err = {code=, message=, sqlite_code= [, constraint=]}
 */
#ifndef OBLETH_HOST_SQLITE_H
#define OBLETH_HOST_SQLITE_H

#include <lua.h>

/*
 * Opens the module: pushes a new table (luaL_newlib) with open and version,
 * and returns 1. Creates the metatables "obleth.sqlite.db",
 * "obleth.sqlite.stmt", "obleth.sqlite.rows" and "obleth.sqlite.error" in
 * the registry if missing. Every sqlite3 / sqlite3_stmt handle is owned by
 * a userdata (db, or stmt for db:prepare) and freed by :close(), __close
 * or __gc, whichever comes first.
 */
int luaopen_obleth_sqlite(lua_State *L);

#endif
