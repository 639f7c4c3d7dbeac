/*
 * yaml.c — obleth.yaml: YAML 1.2 (core schema) decode/encode on libyaml. The decoder and
 * the module live here, the encoder in yaml_emit.c.
 *
 * Lua API
 * -------
 * yaml.null
 *     The null sentinel: a lightuserdata holding NULL. Because lua-cjson's
 *     cjson.null is also lightuserdata NULL, yaml.null == cjson.null.
 *
 * yaml.decode(text [, opts]) -> value [, pos]  |  nil, err
 *     Decodes the first document of `text` (the rest of the stream is still
 *     checked for syntax errors). An empty stream decodes to yaml.null.
 *     Mappings become tables, sequences arrays (1-based). Plain scalars are
 *     resolved with the YAML 1.2 core schema:
 *       null Null NULL ~ (empty)          -> yaml.null
 *       true True TRUE false False FALSE  -> boolean
 *       [-+]?[0-9]+  0o[0-7]+  0x[0-9a-fA-F]+
 *                                         -> integer (float if it overflows)
 *       [-+]?(.[0-9]+|[0-9]+(.[0-9]*)?)([eE][-+]?[0-9]+)?,
 *       [-+]?.inf (.Inf .INF), .nan (.NaN .NAN)
 *                                         -> float
 *       anything else                     -> string
 *     Quoted and block (| >) scalars are always strings. The standard tags
 *     !!str !!null !!bool !!int !!float force a type (a value that does not
 *     fit is an error); other tags are ignored. Keys are resolved the same
 *     way (`1: a` has the integer key 1); a mapping or sequence used as a key
 *     is an error, and so is a .nan key. Aliases give the same Lua value as
 *     their anchor (tables are shared, not copied).
 *     opts.positions = true adds a second result `pos`, a weak-keyed table:
 *     pos[tbl][key] = {line=, column=} is where that key of that decoded
 *     mapping starts; for a sequence, pos[arr][i] is where item i starts.
 *     Lines and columns are 1-based.
 *     err = {code=, message=, line=, column=} with 1-based line/column of
 *     the problem, plus context=, context_line=, context_column= when
 *     libyaml names one. tostring(err) gives "line L, column C: message".
 *     Codes: "syntax" (scanner/parser), "encoding" (bad UTF-8/16),
 *     "duplicate_key", "alias" (unknown alias), "key" (unsupported key),
 *     "tag" (value does not fit its !!tag), "limit" (nesting deeper than
 *     200, or more than 1e6 nodes counting alias expansions: alias bombs).
 *     A non-string `text` or non-table `opts` raises (misuse).
 *
 * yaml.decode_all(text [, opts]) -> {doc, ...} [, pos]  |  nil, err
 *     Every document of the stream, in order (an empty stream gives {}).
 *
 * yaml.encode(value) -> text  |  nil, message
 *     Block style, 2-space indent, mapping keys sorted (yaml.null, then
 *     false/true, then numbers, then strings bytewise). A table whose keys
 *     are exactly 1..n (n >= 1) is a sequence; an empty table is `{}`.
 *     nil and yaml.null give null. Strings are quoted whenever plain style
 *     would decode to something else (e.g. "true", "123", "", "a: b"), and
 *     also YAML 1.1 booleans (yes/no/on/off/y/n) for other readers;
 *     multi-line strings use literal block style when libyaml allows it.
 *     Output round-trips through decode. Refused (nil, message): functions,
 *     threads, userdata, lightuserdata other than yaml.null, cycles,
 *     nesting deeper than 200, keys that are not strings/numbers/booleans/
 *     yaml.null, and strings that are not valid UTF-8. Metatables are
 *     ignored (raw access).
 *
 * Memory: the libyaml parser/emitter (and the current event, and the
 * encoder's output buffer) live in a userdata marked to-be-closed, so they
 * are freed on return and on any Lua error (including OOM) raised meanwhile.
 */
#include <yaml.h>
#ifndef YAML_H /* libyaml's include guard */
#error "<yaml.h> did not resolve to libyaml's header: remove host/ from the include path"
#endif
#include "yaml.h"
#include "yaml_internal.h"
#include "host.h"

#include <lauxlib.h>
#include <lua.h>

#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define YAML_MAX_NODES 1000000LL

#define DECODER_MT "obleth.yaml.decoder"
#define ERROR_MT "obleth.yaml.error"

#define TAG_PREFIX "tag:yaml.org,2002:"

int obleth_yaml_is_null(lua_State *L, int idx)
{
    return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL;
}

/* ------------------------------------------------------------------ */
/* Scalar resolution (YAML 1.2 core schema)                            */
/* ------------------------------------------------------------------ */


static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static int eq3(const char *s, size_t n, const char *a, const char *b, const char *c)
{
    return eq(s, n, a) || eq(s, n, b) || eq(s, n, c);
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int match_float(const char *s, size_t n)
{
    size_t i = 0, d = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && is_digit(s[i])) i++, d++;
        if (d == 0) return 0;
    } else {
        while (i < n && is_digit(s[i])) i++, d++;
        if (d == 0) return 0;
        if (i < n && s[i] == '.') {
            i++;
            while (i < n && is_digit(s[i])) i++;
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        d = 0;
        if (i < n && (s[i] == '-' || s[i] == '+')) i++;
        while (i < n && is_digit(s[i])) i++, d++;
        if (d == 0) return 0;
    }
    return i == n;
}

/* Which core-schema type a plain scalar resolves to. */
int obleth_yaml_classify_plain(const char *s, size_t n)
{
    size_t i;
    if (n == 0 || eq(s, n, "~") || eq3(s, n, "null", "Null", "NULL")) return R_NULL;
    if (eq3(s, n, "true", "True", "TRUE") || eq3(s, n, "false", "False", "FALSE"))
        return R_BOOL;
    if (n > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'x')) {
        for (i = 2; i < n; i++)
            if (s[1] == 'o' ? !(s[i] >= '0' && s[i] <= '7') : !is_hex(s[i])) break;
        if (i == n) return R_INT;
    }
    i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (i < n) {
        size_t j = i;
        while (j < n && is_digit(s[j])) j++;
        if (j == n) return R_INT;
    }
    if (match_float(s, n)) return R_FLOAT;
    {
        const char *t = s + i;
        size_t m = n - i;
        if (eq3(t, m, ".inf", ".Inf", ".INF")) return R_FLOAT;
    }
    if (eq3(s, n, ".nan", ".NaN", ".NAN")) return R_FLOAT;
    return R_STR;
}

/* YAML 1.1 booleans: strings in 1.2, but quoted on output for 1.1 readers. */
int obleth_yaml_is_yaml11_bool(const char *s, size_t n)
{
    static const char *const words[] = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no",
                                        "No", "NO", "on", "On", "ON", "off", "Off", "OFF"};
    size_t k;
    for (k = 0; k < sizeof words / sizeof words[0]; k++)
        if (eq(s, n, words[k])) return 1;
    return 0;
}

/* 0x / 0o literal (already validated) -> integer, or float on overflow. */
static void push_radix(lua_State *L, const char *s, size_t n)
{
    unsigned base = s[1] == 'x' ? 16 : 8;
    unsigned long long v = 0;
    double f = 0;
    int overflow = 0;
    size_t i;
    for (i = 2; i < n; i++) {
        int c = s[i];
        unsigned d = is_digit(c) ? (unsigned)(c - '0')
                                 : (unsigned)((c | 0x20) - 'a' + 10);
        if (v > ((unsigned long long)LUA_MAXINTEGER - d) / base) overflow = 1;
        v = v * base + d;
        f = f * base + d;
    }
    if (overflow)
        lua_pushnumber(L, (lua_Number)f);
    else
        lua_pushinteger(L, (lua_Integer)v);
}

/*
 * Push the value of a scalar of resolved type `r` (s is NUL-terminated,
 * as libyaml's scalar values are). Returns 0, or -1 if it cannot be
 * converted (only possible for a forced tag).
 */
static int push_resolved(lua_State *L, int r, const char *s, size_t n)
{
    switch (r) {
    case R_NULL:
        lua_pushlightuserdata(L, NULL);
        return 0;
    case R_BOOL:
        lua_pushboolean(L, s[0] == 't' || s[0] == 'T');
        return 0;
    case R_INT:
    case R_FLOAT: {
        const char *t = s;
        size_t m = n;
        int neg = 0;
        if (r == R_INT && n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
            push_radix(L, s, n);
            return 0;
        }
        if (m > 0 && (t[0] == '-' || t[0] == '+')) neg = t[0] == '-', t++, m--;
        if (m == 4 && t[0] == '.' && (t[1] | 0x20) == 'i') {
            lua_pushnumber(L, neg ? -HUGE_VAL : HUGE_VAL);
            return 0;
        }
        if (m == 4 && t[0] == '.' && (t[1] | 0x20) == 'n') {
            lua_pushnumber(L, (lua_Number)NAN);
            return 0;
        }
        if (strlen(s) != n || lua_stringtonumber(L, s) != n + 1) return -1;
        if (r == R_FLOAT && lua_isinteger(L, -1)) {
            lua_Number f = (lua_Number)lua_tointeger(L, -1);
            lua_pop(L, 1);
            lua_pushnumber(L, f);
        }
        return 0;
    }
    default:
        lua_pushlstring(L, s, n);
        return 0;
    }
}

/* ------------------------------------------------------------------ */
/* Decoder                                                             */
/* ------------------------------------------------------------------ */

/* Owns the libyaml parser and the current event; a to-be-closed userdata. */
typedef struct decoder {
    yaml_parser_t parser;
    yaml_event_t event;
    int parser_live;
    int event_live;
} decoder;

static void decoder_release(decoder *d)
{
    if (d->event_live) {
        yaml_event_delete(&d->event);
        d->event_live = 0;
    }
    if (d->parser_live) {
        yaml_parser_delete(&d->parser);
        d->parser_live = 0;
    }
}

/* __gc and __close: (decoder [, err]) -> () */
static int decoder_gc(lua_State *L)
{
    decoder_release((decoder *)luaL_checkudata(L, 1, DECODER_MT));
    return 0;
}

typedef struct dctx {
    lua_State *L;
    decoder *d;
    const char *text;
    size_t len;
    int anchors; /* stack index: anchor name -> value */
    int counts;  /* stack index: anchor name -> node count of its subtree */
    int pos;     /* stack index of the positions table, 0 if not wanted */
    long long nodes;
    /* the error, when a step returns -1 */
    const char *code;
    char msg[256];
    size_t line, column;
    const char *context;
    size_t context_line, context_column;
} dctx;

static int fail(dctx *c, const char *code, yaml_mark_t mark, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->code = code;
    c->line = mark.line + 1;
    c->column = mark.column + 1;
    c->context = NULL;
    return -1;
}

/* Reader errors carry a byte offset, not a mark: count lines/characters. */
static void offset_to_mark(dctx *c, size_t offset, size_t *line, size_t *column)
{
    size_t i, l = 1, col = 1;
    if (offset > c->len) offset = c->len;
    for (i = 0; i < offset; i++) {
        unsigned char ch = (unsigned char)c->text[i];
        if (ch == '\n' || (ch == '\r' && !(i + 1 < c->len && c->text[i + 1] == '\n'))) {
            l++;
            col = 1;
        } else if ((ch & 0xC0) != 0x80 && ch != '\r') {
            col++;
        }
    }
    *line = l;
    *column = col;
}

static int parser_fail(dctx *c)
{
    yaml_parser_t *p = &c->d->parser;
    const char *problem = p->problem ? p->problem : "unknown YAML error";
    c->context = NULL;
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return luaL_error(c->L, "obleth.yaml: out of memory"); /* fatal; decoder is tbc */
    case YAML_READER_ERROR:
        c->code = "encoding";
        if (p->problem_value != -1)
            snprintf(c->msg, sizeof c->msg, "%s (#%X)", problem, (unsigned)p->problem_value);
        else
            snprintf(c->msg, sizeof c->msg, "%s", problem);
        offset_to_mark(c, p->problem_offset, &c->line, &c->column);
        return -1;
    default:
        c->code = "syntax";
        snprintf(c->msg, sizeof c->msg, "%s", problem);
        c->line = p->problem_mark.line + 1;
        c->column = p->problem_mark.column + 1;
        if (p->context) {
            c->context = p->context;
            c->context_line = p->context_mark.line + 1;
            c->context_column = p->context_mark.column + 1;
        }
        return -1;
    }
}

/* Replace the current event with the next one. 0 or -1. */
static int next_event(dctx *c)
{
    decoder *d = c->d;
    if (d->event_live) {
        yaml_event_delete(&d->event);
        d->event_live = 0;
    }
    if (!yaml_parser_parse(&d->parser, &d->event)) return parser_fail(c);
    d->event_live = 1;
    return 0;
}

static int count_nodes(dctx *c, long long n, yaml_mark_t mark)
{
    c->nodes += n;
    if (c->nodes > YAML_MAX_NODES)
        return fail(c, "limit", mark,
                    "document too large: more than %lld nodes (counting alias expansions)",
                    YAML_MAX_NODES);
    return 0;
}

/* Value at the top; name at stack index `name` or the C string `cname`. */
static void register_anchor(dctx *c, int name, const char *cname, long long count)
{
    lua_State *L = c->L;
    if (name) lua_pushvalue(L, name); else lua_pushstring(L, cname);
    lua_pushvalue(L, -2);
    lua_rawset(L, c->anchors);
    if (name) lua_pushvalue(L, name); else lua_pushstring(L, cname);
    lua_pushinteger(L, (lua_Integer)count);
    lua_rawset(L, c->counts);
}

/* ptab[key] = {line=, column=}; key at index `key`, ptab at index `ptab`. */
static void record_pos(lua_State *L, int ptab, int key, yaml_mark_t mark)
{
    lua_pushvalue(L, key);
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, (lua_Integer)mark.line + 1);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, (lua_Integer)mark.column + 1);
    lua_setfield(L, -2, "column");
    lua_rawset(L, ptab);
}

static int scalar_value(dctx *c)
{
    lua_State *L = c->L;
    yaml_event_t *ev = &c->d->event;
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    int r = plain ? obleth_yaml_classify_plain(s, n) : R_STR;

    if (tag) {
        size_t pl = sizeof TAG_PREFIX - 1;
        int want = -1;
        if (strcmp(tag, "!") == 0) {
            r = R_STR;
        } else if (strncmp(tag, TAG_PREFIX, pl) == 0) {
            const char *t = tag + pl;
            if (strcmp(t, "str") == 0) r = R_STR;
            else if (strcmp(t, "null") == 0) want = R_NULL;
            else if (strcmp(t, "bool") == 0) want = R_BOOL;
            else if (strcmp(t, "int") == 0) want = R_INT;
            else if (strcmp(t, "float") == 0) want = R_FLOAT;
        }
        if (want >= 0) {
            int got = obleth_yaml_classify_plain(s, n);
            if (want == R_FLOAT && got == R_INT && !(n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')))
                got = R_FLOAT;
            if (got != want)
                return fail(c, "tag", ev->start_mark, "invalid value for tag !!%s: '%.60s'",
                            tag + pl, s);
            r = want;
        }
    }
    if (push_resolved(L, r, s, n) != 0)
        return fail(c, "tag", ev->start_mark, "invalid number '%.60s'", s);
    return 0;
}

static int build(dctx *c, int depth);

/* Pushes a new table for a sequence or a mapping and returns its index; with positions asked for
   (c->pos), also pushes its position table (its index in *ptab, 0 without), kept under the node in
   c->pos. */
static int open_node(dctx *c, int *ptab)
{
    lua_State *L = c->L;
    int t;
    lua_newtable(L);
    t = lua_gettop(L);
    *ptab = 0;
    if (c->pos) {
        lua_newtable(L);
        *ptab = lua_gettop(L);
        lua_pushvalue(L, t);
        lua_pushvalue(L, *ptab);
        lua_rawset(L, c->pos);
    }
    return t;
}

/* Current event: SEQUENCE_START. Pushes the array. */
static int build_sequence(dctx *c, int depth)
{
    lua_State *L = c->L;
    int ptab, t = open_node(c, &ptab);
    lua_Integer i;
    for (i = 1;; i++) {
        yaml_mark_t mark;
        if (next_event(c)) return -1;
        if (c->d->event.type == YAML_SEQUENCE_END_EVENT) break;
        mark = c->d->event.start_mark;
        if (build(c, depth + 1)) return -1;
        lua_rawseti(L, t, i);
        if (ptab) {
            lua_pushinteger(L, i);
            record_pos(L, ptab, lua_gettop(L), mark);
            lua_pop(L, 1);
        }
    }
    lua_settop(L, t);
    return 0;
}

/* Current event: MAPPING_START. Pushes the table. */
static int build_mapping(dctx *c, int depth)
{
    lua_State *L = c->L;
    int ptab, t = open_node(c, &ptab);
    for (;;) {
        yaml_event_t *ev = &c->d->event;
        yaml_mark_t mark;
        int key;
        if (next_event(c)) return -1;
        if (ev->type == YAML_MAPPING_END_EVENT) break;
        mark = ev->start_mark;
        if (build(c, depth + 1)) return -1;
        key = lua_gettop(L);
        if (lua_type(L, key) == LUA_TTABLE)
            return fail(c, "key", mark, "a mapping or sequence cannot be used as a key");
        if (lua_type(L, key) == LUA_TNUMBER && lua_tonumber(L, key) != lua_tonumber(L, key))
            return fail(c, "key", mark, "NaN cannot be used as a key");
        lua_pushvalue(L, key);
        if (lua_rawget(L, t) != LUA_TNIL) {
            if (ev->type == YAML_ALIAS_EVENT)
                return fail(c, "duplicate_key", mark, "duplicate key '*%.100s'",
                            (const char *)ev->data.alias.anchor);
            return fail(c, "duplicate_key", mark, "duplicate key '%.100s'",
                        (const char *)ev->data.scalar.value);
        }
        lua_pop(L, 1);
        if (ptab) record_pos(L, ptab, key, mark);
        if (next_event(c)) return -1;
        if (build(c, depth + 1)) return -1;
        lua_rawset(L, t);
    }
    lua_settop(L, t);
    return 0;
}

/*
 * Current event starts a node (scalar, alias, sequence or mapping start).
 * Pushes its value; on return the current event is the node's last one.
 */
static int build(dctx *c, int depth)
{
    lua_State *L = c->L;
    yaml_event_t *ev = &c->d->event;
    yaml_mark_t mark = ev->start_mark;
    long long before = c->nodes;
    int name = 0, rc;

    if (!lua_checkstack(L, 10)) return fail(c, "limit", mark, "out of Lua stack space");
    switch (ev->type) {
    case YAML_ALIAS_EVENT: {
        const char *a = (const char *)ev->data.alias.anchor;
        lua_pushstring(L, a);
        if (lua_rawget(L, c->anchors) == LUA_TNIL)
            return fail(c, "alias", mark, "unknown alias '*%.100s'", a);
        lua_pushstring(L, a);
        lua_rawget(L, c->counts);
        rc = count_nodes(c, (long long)lua_tointeger(L, -1), mark);
        lua_pop(L, 1);
        return rc;
    }
    case YAML_SCALAR_EVENT:
        if (count_nodes(c, 1, mark) || scalar_value(c)) return -1;
        if (ev->data.scalar.anchor)
            register_anchor(c, 0, (const char *)ev->data.scalar.anchor, 1);
        return 0;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int seq = ev->type == YAML_SEQUENCE_START_EVENT;
        const yaml_char_t *a = seq ? ev->data.sequence_start.anchor
                                   : ev->data.mapping_start.anchor;
        if (depth >= YAML_MAX_DEPTH)
            return fail(c, "limit", mark, "nesting too deep (limit %d)", YAML_MAX_DEPTH);
        if (count_nodes(c, 1, mark)) return -1;
        if (a) {
            lua_pushstring(L, (const char *)a); /* copy: the event goes away */
            name = lua_gettop(L);
        }
        if (seq ? build_sequence(c, depth) : build_mapping(c, depth)) return -1;
        if (name) {
            register_anchor(c, name, NULL, c->nodes - before);
            lua_remove(L, name);
        }
        return 0;
    }
    default:
        return fail(c, "syntax", mark, "unexpected YAML event");
    }
}

/* Pushes nil, err from the context. */
static int push_error(dctx *c)
{
    lua_State *L = c->L;
    lua_pushnil(L);
    lua_createtable(L, 0, 7);
    lua_pushstring(L, c->code);
    lua_setfield(L, -2, "code");
    lua_pushstring(L, c->msg);
    lua_setfield(L, -2, "message");
    lua_pushinteger(L, (lua_Integer)c->line);
    lua_setfield(L, -2, "line");
    lua_pushinteger(L, (lua_Integer)c->column);
    lua_setfield(L, -2, "column");
    if (c->context) {
        lua_pushstring(L, c->context);
        lua_setfield(L, -2, "context");
        lua_pushinteger(L, (lua_Integer)c->context_line);
        lua_setfield(L, -2, "context_line");
        lua_pushinteger(L, (lua_Integer)c->context_column);
        lua_setfield(L, -2, "context_column");
    }
    luaL_setmetatable(L, ERROR_MT);
    return 2;
}

/* err -> "line L, column C: message" */
static int error_tostring(lua_State *L)
{
    lua_getfield(L, 1, "line");
    lua_getfield(L, 1, "column");
    lua_getfield(L, 1, "message");
    lua_pushfstring(L, "line %s, column %s: %s", luaL_tolstring(L, 2, NULL),
                    luaL_tolstring(L, 3, NULL), luaL_tolstring(L, 4, NULL));
    return 1;
}

/* Stack: text [, opts]. Shared by decode and decode_all. */
static int decode_impl(lua_State *L, int all)
{
    dctx c;
    decoder *d;
    int base, results = 0, ndocs = 0, want_pos = 0;

    memset(&c, 0, sizeof c);
    c.L = L;
    c.text = luaL_checklstring(L, 1, &c.len);
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_getfield(L, 2, "positions");
        want_pos = lua_toboolean(L, -1);
    }
    lua_settop(L, 1); /* 1: text, kept alive: the parser reads it in place */

    d = (decoder *)lua_newuserdatauv(L, sizeof *d, 0); /* 2 */
    memset(d, 0, sizeof *d);
    luaL_setmetatable(L, DECODER_MT);
    lua_toclose(L, 2);
    c.d = d;
    if (!yaml_parser_initialize(&d->parser)) return luaL_error(L, "obleth.yaml: out of memory");
    d->parser_live = 1;
    yaml_parser_set_input_string(&d->parser, (const unsigned char *)c.text, c.len);

    lua_newtable(L); /* 3: anchors */
    c.anchors = 3;
    lua_newtable(L); /* 4: anchor node counts */
    c.counts = 4;
    if (want_pos) {
        lua_newtable(L); /* 5: pos, weak keys */
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        c.pos = 5;
    }
    if (all) {
        lua_newtable(L);
        results = lua_gettop(L);
    }
    base = lua_gettop(L);

    for (;;) {
        if (next_event(&c)) goto failed;
        if (d->event.type == YAML_STREAM_END_EVENT) break;
        if (d->event.type != YAML_DOCUMENT_START_EVENT) continue;
        /* A document: fresh anchors (aliases do not cross documents). */
        lua_newtable(L);
        lua_replace(L, c.anchors);
        lua_newtable(L);
        lua_replace(L, c.counts);
        if (next_event(&c)) goto failed;
        if (!all && ndocs > 0) {
            /* decode: later documents are only checked for syntax */
            int level = 0;
            for (;;) {
                yaml_event_type_t t = d->event.type;
                if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) level++;
                if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) level--;
                if (level == 0) break;
                if (next_event(&c)) goto failed;
            }
        } else {
            if (build(&c, 0)) goto failed;
            if (all) lua_rawseti(L, results, ndocs + 1);
        }
        ndocs++;
        if (next_event(&c)) goto failed; /* DOCUMENT_END */
    }
    decoder_release(d);

    if (all)
        lua_pushvalue(L, results);
    else if (ndocs == 0)
        lua_pushlightuserdata(L, NULL);
    else
        lua_pushvalue(L, base + 1);
    if (want_pos) {
        lua_pushvalue(L, c.pos);
        return 2;
    }
    return 1;

failed:
    decoder_release(d);
    lua_settop(L, base);
    return push_error(&c);
}

/* yaml.decode(text [, opts]) -> value [, pos] | nil, err */
static int l_decode(lua_State *L) { return decode_impl(L, 0); }

/* yaml.decode_all(text [, opts]) -> {docs} [, pos] | nil, err */
static int l_decode_all(lua_State *L) { return decode_impl(L, 1); }


/* ------------------------------------------------------------------ */

int luaopen_obleth_yaml(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"decode", l_decode},
        {"decode_all", l_decode_all},
        {"encode", obleth_yaml_encode},
        {"null", NULL},
        {NULL, NULL},
    };
    obleth_newclass(L, DECODER_MT, &(obleth_class){.gc = decoder_gc, .close = decoder_gc});
    obleth_yaml_emit_open(L);
    obleth_newclass(L, ERROR_MT, &(obleth_class){.tostring = error_tostring});
    luaL_newlib(L, funcs);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    return 1;
}
