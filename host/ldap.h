/*
 * ldap.h — obleth.ldap: a directory (LDAP v3) for Lua over libldap's
 * asynchronous API, on the event loop (the calling task yields while libldap
 * waits on its socket; the loop never blocks on the directory).
 *
 * Registered by the host in package.preload as "obleth.ldap"; nothing is put
 * in globals. The Lua API (full contract in host/ldap.c):
 *
 *   ldap.open(url [, opts])               -> conn | nil, err   (waits)
 *   conn:bind(dn, password)               -> true | nil, err   (waits)
 *   conn:search(base, scope, filter [, attrs [, opts]]) -> entries | nil, err (waits)
 *   conn:close()
 *   ldap.escape_filter(s), ldap.escape_dn(s)  (RFC 4515 / RFC 4514 values)
 *   err = {code=, message= [, ldap_code=]}
 */
#ifndef OBLETH_HOST_LDAP_H
#define OBLETH_HOST_LDAP_H

#include <lua.h>

/*
 * Opens the module: pushes a table with open, escape_filter, escape_dn and
 * returns 1. Creates the metatables "obleth.ldap.conn" and "obleth.ldap.error"
 * in the registry if missing. Each LDAP handle is owned by a conn userdata and
 * freed by :close(), __close or __gc, whichever comes first.
 */
int luaopen_obleth_ldap(lua_State *L);

#endif
