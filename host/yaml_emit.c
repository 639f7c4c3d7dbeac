/*
 * yaml_emit.c — obleth.yaml's encoder (yaml.encode; the contract is in host/yaml.c's header):
 * Lua values to block-style YAML on libyaml's emitter.
 */
#include <yaml.h>
#ifndef YAML_H /* libyaml's include guard */
#error "<yaml.h> did not resolve to libyaml's header: remove host/ from the include path"
#endif
#include "yaml_internal.h"
#include "host.h"

#include <lauxlib.h>
#include <lua.h>

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENCODER_MT "obleth.yaml.encoder"

/* ------------------------------------------------------------------ */
/* Encoder                                                             */
/* ------------------------------------------------------------------ */

/* Owns the libyaml emitter and the output buffer; a to-be-closed userdata. */
typedef struct encoder {
    yaml_emitter_t emitter;
    int emitter_live;
    char *buf;
    size_t len, cap;
    char err[256];
} encoder;

static void encoder_release(encoder *e)
{
    if (e->emitter_live) {
        yaml_emitter_delete(&e->emitter);
        e->emitter_live = 0;
    }
    free(e->buf);
    e->buf = NULL;
    e->len = e->cap = 0;
}

/* __gc and __close: (encoder [, err]) -> () */
static int encoder_gc(lua_State *L)
{
    encoder_release((encoder *)luaL_checkudata(L, 1, ENCODER_MT));
    return 0;
}

/* libyaml output handler: append to e->buf. 1 on success, 0 on failure. */
static int encoder_write(void *data, unsigned char *buffer, size_t size)
{
    encoder *e = (encoder *)data;
    if (size > e->cap - e->len) {
        size_t cap = e->cap ? e->cap : 256;
        char *nb;
        while (cap - e->len < size) {
            if (cap > ((size_t)-1) / 2) return 0;
            cap *= 2;
        }
        nb = (char *)realloc(e->buf, cap);
        if (!nb) return 0;
        e->buf = nb;
        e->cap = cap;
    }
    memcpy(e->buf + e->len, buffer, size);
    e->len += size;
    return 1;
}

static int enc_fail(encoder *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Emit (and consume) an initialized event. */
static int emit(encoder *e, yaml_event_t *ev)
{
    if (!yaml_emitter_emit(&e->emitter, ev))
        return enc_fail(e, "%s", e->emitter.problem ? e->emitter.problem : "YAML emitter error");
    return 0;
}

static int emit_plain(encoder *e, const char *s)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                      YAML_PLAIN_SCALAR_STYLE))
        return enc_fail(e, "out of memory");
    return emit(e, &ev);
}

static int emit_string(encoder *e, const char *s, size_t n)
{
    yaml_event_t ev;
    yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
    int plain_ok = obleth_yaml_classify_plain(s, n) == R_STR && !obleth_yaml_is_yaml11_bool(s, n);
    if (n > INT_MAX) return enc_fail(e, "string too long");
    if (plain_ok && memchr(s, '\n', n)) style = YAML_LITERAL_SCALAR_STYLE;
    /* plain_implicit = 0 makes libyaml quote the scalar. */
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)n, plain_ok, 1,
                                      style))
        return enc_fail(e, "cannot encode a string that is not valid UTF-8");
    return emit(e, &ev);
}

/* Shortest "%.*g" that reads back exactly; always looks like a float. */
static void format_float(double v, char *out, size_t size)
{
    int prec;
    char point = localeconv()->decimal_point[0];
    char *p;
    if (v != v) {
        snprintf(out, size, ".nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, size, v > 0 ? ".inf" : "-.inf");
        return;
    }
    for (prec = 15; prec < 17; prec++) {
        snprintf(out, size, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
    if (prec == 17) snprintf(out, size, "%.17g", v);
    if (point != '.' && (p = strchr(out, point)) != NULL) *p = '.';
    if (!strpbrk(out, ".eE")) strncat(out, ".0", size - strlen(out) - 1);
}

static int emit_number(encoder *e, lua_State *L, int idx)
{
    char buf[64];
    if (lua_isinteger(L, idx))
        snprintf(buf, sizeof buf, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, idx));
    else
        format_float((double)lua_tonumber(L, idx), buf, sizeof buf);
    return emit_plain(e, buf);
}

/* A mapping key, for sorting; `ref` is its index in the keys array. */
typedef struct enc_key {
    int rank; /* 0 null, 1 boolean, 2 number, 3 string */
    int isint;
    lua_Integer i;
    double f;
    const char *s;
    size_t len;
    lua_Integer ref;
} enc_key;

static int key_cmp(const void *pa, const void *pb)
{
    const enc_key *a = (const enc_key *)pa, *b = (const enc_key *)pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    switch (a->rank) {
    case 1:
        return (int)a->i - (int)b->i;
    case 2:
        if (a->isint && b->isint) return a->i < b->i ? -1 : a->i > b->i;
        if (a->f != b->f) return a->f < b->f ? -1 : 1;
        return b->isint - a->isint; /* equal values: integer first */
    case 3: {
        size_t m = a->len < b->len ? a->len : b->len;
        int r = memcmp(a->s, b->s, m);
        if (r) return r;
        return a->len < b->len ? -1 : a->len > b->len;
    }
    default:
        return 0;
    }
}

static int encode_value(encoder *e, lua_State *L, int idx, int depth, int visiting);

static int emit_key(encoder *e, lua_State *L, int idx)
{
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        return emit_string(e, s, n);
    }
    case LUA_TNUMBER:
        return emit_number(e, L, idx);
    case LUA_TBOOLEAN:
        return emit_plain(e, lua_toboolean(L, idx) ? "true" : "false");
    default:
        return emit_plain(e, "null"); /* only yaml.null gets here */
    }
}

/* Table at idx (absolute). */
static int encode_table(encoder *e, lua_State *L, int idx, int depth, int visiting)
{
    yaml_event_t ev;
    lua_Integer n = 0, k;
    int isarray = 1, keys, top = lua_gettop(L);
    enc_key *ks;

    lua_pushvalue(L, idx);
    if (lua_rawget(L, visiting) != LUA_TNIL) return enc_fail(e, "cannot encode a cycle");
    lua_pop(L, 1);
    if (depth >= YAML_MAX_DEPTH)
        return enc_fail(e, "cannot encode: nesting too deep (limit %d)", YAML_MAX_DEPTH);
    lua_pushvalue(L, idx);
    lua_pushboolean(L, 1);
    lua_rawset(L, visiting);

    /* keys[1..n] = every key of the table */
    lua_newtable(L);
    keys = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, keys, ++n);
    }
    for (k = 1; k <= n && isarray; k++) {
        lua_rawgeti(L, keys, k);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > n)
            isarray = 0;
        lua_pop(L, 1);
    }

    if (n == 0) {
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_FLOW_MAPPING_STYLE))
            return enc_fail(e, "out of memory");
        if (emit(e, &ev)) return -1;
    } else if (isarray) {
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE))
            return enc_fail(e, "out of memory");
        if (emit(e, &ev)) return -1;
        for (k = 1; k <= n; k++) {
            lua_rawgeti(L, idx, k);
            if (encode_value(e, L, lua_gettop(L), depth + 1, visiting)) return -1;
            lua_pop(L, 1);
        }
        if (!yaml_sequence_end_event_initialize(&ev)) return enc_fail(e, "out of memory");
        if (emit(e, &ev)) return -1;
        goto done;
    } else {
        if ((size_t)n > ((size_t)-1) / sizeof *ks) return enc_fail(e, "table too large");
        /* A userdata, so the array is collected even if something raises. */
        ks = (enc_key *)lua_newuserdatauv(L, (size_t)n * sizeof *ks, 0);
        for (k = 1; k <= n; k++) {
            enc_key *q = &ks[k - 1];
            memset(q, 0, sizeof *q);
            q->ref = k;
            lua_rawgeti(L, keys, k);
            switch (lua_type(L, -1)) {
            case LUA_TSTRING:
                q->rank = 3;
                q->s = lua_tolstring(L, -1, &q->len); /* kept alive by the table */
                break;
            case LUA_TNUMBER:
                q->rank = 2;
                q->isint = lua_isinteger(L, -1);
                q->i = q->isint ? lua_tointeger(L, -1) : 0;
                q->f = (double)lua_tonumber(L, -1);
                break;
            case LUA_TBOOLEAN:
                q->rank = 1;
                q->i = lua_toboolean(L, -1);
                break;
            default:
                if (obleth_yaml_is_null(L, -1)) break;
                return enc_fail(e, "cannot encode a table key of type %s",
                                luaL_typename(L, -1));
            }
            lua_pop(L, 1);
        }
        qsort(ks, (size_t)n, sizeof *ks, key_cmp);
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE))
            return enc_fail(e, "out of memory");
        if (emit(e, &ev)) return -1;
        for (k = 0; k < n; k++) {
            int key;
            lua_rawgeti(L, keys, ks[k].ref);
            key = lua_gettop(L);
            if (emit_key(e, L, key)) return -1;
            lua_pushvalue(L, key);
            lua_rawget(L, idx);
            if (encode_value(e, L, lua_gettop(L), depth + 1, visiting)) return -1;
            lua_pop(L, 2);
        }
    }
    if (!yaml_mapping_end_event_initialize(&ev)) return enc_fail(e, "out of memory");
    if (emit(e, &ev)) return -1;
done:
    lua_settop(L, top);
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    lua_rawset(L, visiting);
    return 0;
}

static int encode_value(encoder *e, lua_State *L, int idx, int depth, int visiting)
{
    if (!lua_checkstack(L, 10)) return enc_fail(e, "out of Lua stack space");
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return emit_plain(e, "null");
    case LUA_TBOOLEAN:
        return emit_plain(e, lua_toboolean(L, idx) ? "true" : "false");
    case LUA_TNUMBER:
        return emit_number(e, L, idx);
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        return emit_string(e, s, n);
    }
    case LUA_TTABLE:
        return encode_table(e, L, idx, depth, visiting);
    case LUA_TLIGHTUSERDATA:
        if (obleth_yaml_is_null(L, idx)) return emit_plain(e, "null");
        /* fall through */
    default:
        return enc_fail(e, "cannot encode a %s", luaL_typename(L, idx));
    }
}

/* yaml.encode(value) -> text | nil, message */
int obleth_yaml_encode(lua_State *L)
{
    encoder *e;
    yaml_event_t ev;
    int visiting;

    lua_settop(L, 1);
    e = (encoder *)lua_newuserdatauv(L, sizeof *e, 0); /* 2 */
    memset(e, 0, sizeof *e);
    luaL_setmetatable(L, ENCODER_MT);
    lua_toclose(L, 2);
    lua_newtable(L); /* 3: tables being encoded, for cycle detection */
    visiting = 3;

    if (!yaml_emitter_initialize(&e->emitter)) return luaL_error(L, "obleth.yaml: out of memory");
    e->emitter_live = 1;
    yaml_emitter_set_output(&e->emitter, encoder_write, e);
    yaml_emitter_set_indent(&e->emitter, 2);
    yaml_emitter_set_width(&e->emitter, -1);
    yaml_emitter_set_unicode(&e->emitter, 1);

    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) || emit(e, &ev))
        goto failed;
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) || emit(e, &ev))
        goto failed;
    if (encode_value(e, L, 1, 0, visiting)) goto failed;
    if (!yaml_document_end_event_initialize(&ev, 1) || emit(e, &ev)) goto failed;
    if (!yaml_stream_end_event_initialize(&ev) || emit(e, &ev)) goto failed;
    if (!yaml_emitter_flush(&e->emitter)) {
        enc_fail(e, "YAML emitter error");
        goto failed;
    }
    yaml_emitter_delete(&e->emitter);
    e->emitter_live = 0;
    lua_pushlstring(L, e->buf ? e->buf : "", e->len);
    encoder_release(e);
    return 1;

failed:
    if (!e->err[0]) snprintf(e->err, sizeof e->err, "YAML emitter error");
    lua_pushnil(L);
    lua_pushstring(L, e->err);
    encoder_release(e);
    return 2;
}

void obleth_yaml_emit_open(lua_State *L)
{
    obleth_newclass(L, ENCODER_MT, &(obleth_class){.gc = encoder_gc, .close = encoder_gc});
}
