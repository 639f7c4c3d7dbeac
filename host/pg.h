/*
 * pg.h — obleth.pg: PostgreSQL for Lua over libpq's asynchronous API, on the
 * event loop (the calling task yields while libpq waits on its socket; the
 * loop never blocks on the database).
 *
 * Registered by the host in package.preload as "obleth.pg"; nothing is put in
 * globals. The Lua API (full contract in host/pg.c):
 *
 *   pg.connect(conninfo [, opts])  -> conn | nil, err         (waits)
 *   conn:query(sql, ...)           -> rows, changes | nil, err (waits; $1.. bound)
 *   conn:exec(script)              -> true | nil, err          (waits; no parameters)
 *   conn:notifications([seconds])  -> {{channel, payload, pid}, ...} | nil, err (waits)
 *   conn:escape_identifier(s), conn:status(), conn:busy(), conn:backend_pid(), conn:close()
 *   err = {code=, message= [, sqlstate=, constraint=]}
 */
#ifndef OBLETH_HOST_PG_H
#define OBLETH_HOST_PG_H

#include <lua.h>

/*
 * Opens the module: pushes a table with connect and version and returns 1.
 * Creates the metatables "obleth.pg.conn" and "obleth.pg.error" in the
 * registry if missing. Each PGconn is owned by a conn userdata and freed by
 * :close(), __close or __gc, whichever comes first.
 */
int luaopen_obleth_pg(lua_State *L);

#endif
