/*
 * yaml_internal.h — what host/yaml.c (decoder, module) and host/yaml_emit.c (encoder) share.
 * Not a Lua-facing API: see host/yaml.h.
 */
#ifndef OBLETH_HOST_YAML_INTERNAL_H
#define OBLETH_HOST_YAML_INTERNAL_H

#include <stddef.h>
#include <lua.h>

#define YAML_MAX_DEPTH 200

/* The core-schema type a plain scalar resolves to (obleth_yaml_classify_plain). */
enum { R_STR, R_NULL, R_BOOL, R_INT, R_FLOAT };

/* 1 when the value at idx is yaml.null (a lightuserdata holding NULL). */
int obleth_yaml_is_null(lua_State *L, int idx);
/* Which R_* type the plain scalar s[0..n) resolves to under the YAML 1.2 core schema. */
int obleth_yaml_classify_plain(const char *s, size_t n);
/* 1 when s[0..n) is a YAML 1.1 boolean word (yes/no/on/off/y/n...): quoted on output. */
int obleth_yaml_is_yaml11_bool(const char *s, size_t n);

/* yaml.encode(value) -> text | nil, message (yaml_emit.c). */
int obleth_yaml_encode(lua_State *L);
/* Registers the encoder's metatable (yaml_emit.c); called by luaopen_obleth_yaml. */
void obleth_yaml_emit_open(lua_State *L);

#endif
