/*
 * yaml.h — obleth.yaml: YAML decode/encode for Lua, built on libyaml.
 *
 * Registered by the host in package.preload as "obleth.yaml"; nothing is
 * put in globals. The Lua API (full contract in host/yaml.c):
 *
 *   yaml.decode(text [, {positions=true}])
 *       -> value [, pos]          first document (yaml.null for an empty stream)
 *       -> nil, err               err = {code=, message=, line=, column=, ...}
 *   yaml.decode_all(text [, {positions=true}])
 *       -> {doc1, doc2, ...} [, pos] | nil, err
 *   yaml.encode(value) -> text | nil, message
 *   yaml.null                     lightuserdata NULL, equal to cjson.null
 *
 * Build note: libyaml's own header is also called <yaml.h>. Do not put
 * host/ on the include path (-Ihost); yaml.c includes this file as "yaml.h"
 * and libyaml's as <yaml.h>, and stops with #error if they are confused.
 */
#ifndef OBLETH_HOST_YAML_H
#define OBLETH_HOST_YAML_H

#include <lua.h>

/*
 * Opens the module: pushes a new table (luaL_newlib) with decode,
 * decode_all, encode and null, and returns 1. Creates the decoder/encoder
 * metatables ("obleth.yaml.decoder", "obleth.yaml.encoder",
 * "obleth.yaml.error") in the registry if missing. The module keeps no
 * state between calls; every libyaml object lives only inside one call,
 * owned by a to-be-closed userdata, so a Lua error never leaks it.
 */
int luaopen_obleth_yaml(lua_State *L);

#endif
