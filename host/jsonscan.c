/*
 * jsonscan.c — read a few top-level fields of a JSON text without decoding
 * the rest (obleth.jsonscan). The router needs only "model" and "stream" of a
 * request body; a chat body of 120 KB costs cjson.decode about 200 µs and a
 * table per message, this one pass and no allocation but the values asked for.
 *
 * Lua API:
 *   local jsonscan = require "obleth.jsonscan"
 *   ok, a, b, ... = jsonscan.fields(text, "model", "stream", ...)
 *     -> true, then the value of each named member of the top-level object, in order:
 *        a string, a number, a boolean, or nil when the member is missing,
 *        null, an object or an array. A name given twice in the text: the last
 *        one counts (as with cjson and Python's json).
 *     -> nil, message  when text is not one JSON value (RFC 8259), or the top
 *        level is not an object: the message names the byte offset (1-based).
 *   At most 32 names; nesting deeper than MAX_DEPTH (1000) is an error.
 *
 * The whole text is checked (strings, escapes, numbers, literals, nesting,
 * nothing after the value), so what it accepts cjson accepts too; like cjson
 * it does not check that strings are valid UTF-8.
 */
#include "host.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 1000
#define MAX_NAMES 32

typedef struct {
    const unsigned char *p, *end, *start;
    const char *err;
} scan;

static int fail(scan *s, const char *msg) {
    if (!s->err) s->err = msg;
    return -1;
}

static void ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(scan *s, unsigned *out) {
    if (s->end - s->p < 4) return fail(s, "a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s->p[i]);
        if (h < 0) return fail(s, "a \\u escape needs four hex digits");
        v = v * 16 + (unsigned)h;
    }
    s->p += 4;
    *out = v;
    return 0;
}

static void put_utf8(luaL_Buffer *b, unsigned cp) {
    char u[4];
    int n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    luaL_addlstring(b, u, (size_t)n);
}

/* A string at s->p (on its opening quote). With b, its decoded value is added
   to b (the caller has luaL_buffinit'ed it); without, it is only checked.
   *raw and *rawlen get the bytes between the quotes when the string has no escape
   (so a member name can be compared without decoding); *raw is NULL when it has. */
static int string(scan *s, luaL_Buffer *b, const unsigned char **raw, size_t *rawlen) {
    s->p++; /* the quote */
    const unsigned char *from = s->p;
    int esc = 0;
    static unsigned char plain[256]; /* bytes that stand for themselves in a string */
    if (!plain['a'])
        for (int c = 0x20; c < 256; c++) plain[c] = c != '"' && c != '\\';
    while (s->p < s->end) {
        while (s->p < s->end && plain[*s->p]) s->p++;
        if (s->p >= s->end) break;
        unsigned char c = *s->p;
        if (c == '"') {
            if (b && from < s->p) luaL_addlstring(b, (const char *)from, (size_t)(s->p - from));
            if (raw) {
                *raw = esc ? NULL : from;
                *rawlen = (size_t)(s->p - from);
            }
            s->p++;
            return 0;
        }
        if (c < 0x20) return fail(s, "a control character inside a string");
        if (c != '\\') { s->p++; continue; }
        esc = 1;
        if (b && from < s->p) luaL_addlstring(b, (const char *)from, (size_t)(s->p - from));
        s->p++;
        if (s->p >= s->end) return fail(s, "a string that never ends");
        c = *s->p++;
        unsigned cp;
        switch (c) {
        case '"': case '\\': case '/': if (b) luaL_addchar(b, (char)c); break;
        case 'b': if (b) luaL_addchar(b, '\b'); break;
        case 'f': if (b) luaL_addchar(b, '\f'); break;
        case 'n': if (b) luaL_addchar(b, '\n'); break;
        case 'r': if (b) luaL_addchar(b, '\r'); break;
        case 't': if (b) luaL_addchar(b, '\t'); break;
        case 'u':
            if (hex4(s, &cp) < 0) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF && s->end - s->p >= 6 && s->p[0] == '\\' && s->p[1] == 'u') {
                const unsigned char *save = s->p;
                unsigned lo;
                s->p += 2;
                if (hex4(s, &lo) < 0) return -1;
                if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else s->p = save; /* a lone high surrogate; the next escape stands alone */
            }
            if (b) put_utf8(b, cp);
            break;
        default: return fail(s, "an unknown escape in a string");
        }
        from = s->p;
    }
    return fail(s, "a string that never ends");
}

static int digits(scan *s) {
    const unsigned char *from = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
    return s->p > from ? 0 : -1;
}

/* A number at s->p: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int number(scan *s) {
    if (s->p < s->end && *s->p == '-') s->p++;
    if (s->p < s->end && *s->p == '0') s->p++;
    else if (digits(s) < 0) return fail(s, "a malformed number");
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (digits(s) < 0) return fail(s, "a malformed number");
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (digits(s) < 0) return fail(s, "a malformed number");
    }
    return 0;
}

static int literal(scan *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return fail(s, "an unexpected character");
    s->p += n;
    return 0;
}

/* Check the value at s->p and skip it. */
static int skip(scan *s, int depth) {
    if (depth > MAX_DEPTH) return fail(s, "nesting deeper than 1000 levels");
    ws(s);
    if (s->p >= s->end) return fail(s, "the text ends where a value should be");
    switch (*s->p) {
    case '"': return string(s, NULL, NULL, NULL);
    case 't': return literal(s, "true");
    case 'f': return literal(s, "false");
    case 'n': return literal(s, "null");
    case '{': case '[': {
        unsigned char close = *s->p == '{' ? '}' : ']';
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == close) { s->p++; return 0; }
        for (;;) {
            if (close == '}') {
                ws(s);
                if (s->p >= s->end || *s->p != '"') return fail(s, "an object member without a string name");
                if (string(s, NULL, NULL, NULL) < 0) return -1;
                ws(s);
                if (s->p >= s->end || *s->p != ':') return fail(s, "a ':' is missing after a member name");
                s->p++;
            }
            if (skip(s, depth + 1) < 0) return -1;
            ws(s);
            if (s->p < s->end && *s->p == ',') { s->p++; continue; }
            if (s->p < s->end && *s->p == close) { s->p++; return 0; }
            return fail(s, close == '}' ? "a ',' or '}' is missing" : "a ',' or ']' is missing");
        }
    }
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) return number(s);
        return fail(s, "an unexpected character");
    }
}

/* Walk the top-level object of a JSON text, checking all of it. For each member,
   on_member(s, name, nl, ctx) is called with s->p on the value (at least one byte
   is left): name is NULL when
   the name has escapes (the caller decodes it from name_at if it cares). It
   either consumes the value (returns 1), leaves it to be skipped (0), or fails
   (-1). 0 | -1 with s->err set. */
typedef int (*member_fn)(scan *s, const unsigned char *name_at, const char *name, size_t nl, void *ctx);

static int walk_object(scan *s, member_fn on_member, void *ctx) {
    ws(s);
    if (s->p >= s->end || *s->p != '{') {
        s->err = s->p >= s->end ? "the text is empty" : "the top level is not an object";
        return -1;
    }
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
    } else {
        for (;;) {
            ws(s);
            if (s->p >= s->end || *s->p != '"') return fail(s, "an object member without a string name");
            const unsigned char *name_at = s->p, *raw = NULL;
            size_t nl = 0;
            if (string(s, NULL, &raw, &nl) < 0) return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ':') return fail(s, "a ':' is missing after a member name");
            s->p++;
            ws(s);
            if (s->p >= s->end) return fail(s, "the text ends where a value should be");
            int took = on_member(s, name_at, (const char *)raw, nl, ctx);
            if (took < 0) return -1;
            if (!took && skip(s, 1) < 0) return -1;
            ws(s);
            if (s->p < s->end && *s->p == ',') { s->p++; continue; }
            if (s->p < s->end && *s->p == '}') { s->p++; break; }
            return fail(s, "a ',' or '}' is missing");
        }
    }
    ws(s);
    if (s->p < s->end) {
        s->err = "more text after the JSON value";
        return -1;
    }
    return 0;
}

typedef struct {
    lua_State *L;
    int base, n;
    const char *names[MAX_NAMES];
    size_t lens[MAX_NAMES];
} fields_ctx;

static int fields_member(scan *s, const unsigned char *name_at, const char *name, size_t nl, void *ctx) {
    fields_ctx *f = ctx;
    lua_State *L = f->L;
    int decoded = 0;
    if (!name) { /* escapes: decode the name to compare it */
        scan t = {name_at, s->end, s->start, NULL};
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        string(&t, &b, NULL, NULL);
        luaL_pushresult(&b);
        name = lua_tolstring(L, -1, &nl);
        decoded = 1;
    }
    int idx = -1;
    for (int i = 0; i < f->n; i++)
        if (f->lens[i] == nl && memcmp(f->names[i], name, nl) == 0) idx = i;
    if (decoded) lua_pop(L, 1);
    if (idx < 0) return 0;
    /* a member asked for: its value, when a scalar */
    unsigned char c = *s->p;
    if (c == '"') {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        if (string(s, &b, NULL, NULL) < 0) return -1;
        luaL_pushresult(&b);
    } else if (c == 't' || c == 'f') {
        if (skip(s, 1) < 0) return -1;
        lua_pushboolean(L, c == 't');
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const unsigned char *from = s->p;
        if (number(s) < 0) return -1;
        lua_pushlstring(L, (const char *)from, (size_t)(s->p - from));
        if (!lua_stringtonumber(L, lua_tostring(L, -1))) lua_pushnumber(L, 0);
        lua_remove(L, -2);
    } else {
        if (skip(s, 1) < 0) return -1;
        lua_pushnil(L); /* null, an object or an array */
    }
    lua_replace(L, f->base + 2 + idx);
    return 1;
}

static int l_fields(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    fields_ctx f;
    f.L = L;
    f.n = lua_gettop(L) - 1;
    luaL_argcheck(L, f.n >= 1 && f.n <= MAX_NAMES, 2, "give 1 to 32 member names");
    for (int i = 0; i < f.n; i++) f.names[i] = luaL_checklstring(L, i + 2, &f.lens[i]);
    f.base = lua_gettop(L);
    lua_pushboolean(L, 1);
    for (int i = 0; i < f.n; i++) lua_pushnil(L); /* the results, at base+2 .. base+n+1 */
    scan s = {(const unsigned char *)text, (const unsigned char *)text + len, (const unsigned char *)text, NULL};
    if (walk_object(&s, fields_member, &f) == 0) return f.n + 1;
    lua_settop(L, f.base);
    lua_pushnil(L);
    lua_pushfstring(L, "%s (at byte %d)", s.err ? s.err : "invalid JSON", (int)(s.p - s.start) + 1);
    return 2;
}

int luaopen_obleth_jsonscan(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, l_fields);
    lua_setfield(L, -2, "fields");
    return 1;
}
