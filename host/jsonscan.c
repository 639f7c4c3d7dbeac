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
 *        null, an object or an array.
 *     -> nil, message, kind, key  when text is not one JSON value (RFC 8259), or the top
 *        level is not an object: the message names the byte offset (1-based).
 *   ok, texts = jsonscan.elements(text, name)
 *     -> true, then the elements of the top-level object's member `name` (an array), each as
 *        its own JSON text (the bytes of the element in text, without the spaces around it);
 *        texts is nil when the member is missing or not an array. The provisioner reads the
 *        job listing this way: one element per job, decoded only when it is new or changed.
 *     -> nil, message, kind, key as fields does (the whole text is checked the same way).
 *   ok, hashes, firsts, lasts = jsonscan.element_hashes(text, name)
 *     -> as elements, without a string per element: hashes[i] is the element's SipHash-2-4-128
 *        (16 bytes, siphash.h) under this process's random key, text:sub(firsts[i], lasts[i]) its
 *        text. The provisioner keys its cache of normalized jobs by the hash, so it keeps no job's
 *        text between passes and makes a string only of a job it has not seen (the key is secret,
 *        so no job name a cluster user picks can be made to collide with another job's text).
 *        All three are nil when the member is missing or not an array.
 *   ok, message, kind, key = jsonscan.check(text)
 *     -> true when text is one JSON value (any top level), else nil, message, kind, key.
 *   prompt, completion = jsonscan.usage(text)
 *     -> the "prompt_tokens" and "completion_tokens" of the last "usage" object in text
 *        (integers; nil for one that is missing), or nothing when text holds no usage
 *        object. text may be any part of an answer: the end of a chat completion or of
 *        an event stream (the router keeps the last bytes it passed on). Not a check of
 *        the JSON: see obleth_usage_scan.
 *   kind: "syntax", "utf8" (a string that is not valid UTF-8) or "duplicate_key" (an
 *   object, at any depth, names a member twice; key is that name, printable: control
 *   characters, quotes and backslashes escaped, at most 64 bytes). Messages never
 *   hold bytes of the text, only offsets and (for a duplicate) the escaped key.
 *   At most 32 names; nesting deeper than MAX_DEPTH (1000) is an error.
 *
 * The whole text is checked (strings, escapes, numbers, literals, nesting, UTF-8
 * inside strings, unique member names, nothing after the value), so what it accepts
 * cjson accepts too.
 */
#include "host.h"
#include "siphash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 1000
#define MAX_NAMES 32

/* A member name seen in an object still open: its bytes in the text when it had no
   escape (at), else decoded into the arena (off). */
typedef struct {
    const unsigned char *at;
    size_t off, len;
    unsigned hash;
} name_ref;

typedef struct {
    const unsigned char *p, *end, *start;
    const char *err;
    const char *kind;           /* "syntax" | "utf8" | "duplicate_key" */
    const unsigned char *dup;   /* the duplicate's name (in the text or the arena) */
    size_t dup_len;
    int dup_in_arena;
    size_t dup_off;
    /* the names of the objects still open, innermost last; owned, freed by scan_free */
    name_ref *names;
    size_t nnames, cap;
    unsigned char *arena;
    size_t alen, acap;
    name_ref inline_names[64];
} scan;

static void scan_init(scan *s, const char *text, size_t len) {
    s->p = s->start = (const unsigned char *)text;
    s->end = s->p + len;
    s->err = NULL;
    s->kind = NULL;
    s->dup = NULL;
    s->dup_len = 0;
    s->dup_in_arena = 0;
    s->dup_off = 0;
    s->names = s->inline_names;
    s->nnames = 0;
    s->cap = sizeof s->inline_names / sizeof s->inline_names[0];
    s->arena = NULL;
    s->alen = s->acap = 0;
}

static void scan_free(scan *s) {
    if (s->names != s->inline_names) free(s->names);
    free(s->arena);
    s->names = s->inline_names;
    s->arena = NULL;
}

static int fail(scan *s, const char *msg) {
    if (!s->err) {
        s->err = msg;
        if (!s->kind) s->kind = "syntax";
    }
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

/* One UTF-8 character at s->p (its first byte >= 0x80), RFC 3629: no overlong form,
   no surrogate, nothing above U+10FFFF. Skips it, or fails with kind "utf8". */
static int utf8_char(scan *s) {
    const unsigned char *q = s->p;
    size_t left = (size_t)(s->end - q);
    unsigned c = q[0];
    int n;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else n = 0;
    int ok = n > 0 && left >= (size_t)n && q[1] >= lo && q[1] <= hi;
    for (int i = 2; ok && i < n; i++) ok = q[i] >= 0x80 && q[i] <= 0xBF;
    if (!ok) {
        s->kind = "utf8";
        return fail(s, "a string that is not valid UTF-8");
    }
    s->p += n;
    return 0;
}

/* A string at s->p (on its opening quote). With b, its decoded value is added
   to b (the caller has luaL_buffinit'ed it); without, it is only checked.
   *raw and *rawlen get the bytes between the quotes when the string has no escape
   (so a member name can be compared without decoding); *raw is NULL when it has. */
static int string(scan *s, luaL_Buffer *b, const unsigned char **raw, size_t *rawlen) {
    s->p++; /* the quote */
    const unsigned char *from = s->p;
    int esc = 0;
    static unsigned char plain[256]; /* ASCII bytes that stand for themselves in a string */
    if (!plain['a'])
        for (int c = 0x20; c < 0x80; c++) plain[c] = c != '"' && c != '\\';
    while (s->p < s->end) {
        const unsigned char *q = s->p, *end = s->end; /* locals: plain[] is char, it may alias s */
        while (q < end && plain[*q]) q++;
        s->p = q;
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
        if (c >= 0x80) {
            if (utf8_char(s) < 0) return -1;
            continue;
        }
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
            /* a surrogate only in a high-low pair: a lone one is no character (cjson refuses it too) */
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(s, "a lone low surrogate escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u')
                    return fail(s, "a high surrogate escape without its low half");
                s->p += 2;
                if (hex4(s, &lo) < 0) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(s, "a high surrogate escape without its low half");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (b) put_utf8(b, cp);
            break;
        default: return fail(s, "an unknown escape in a string");
        }
        from = s->p;
    }
    return fail(s, "a string that never ends");
}

/* ---- member names: each object's names are kept while it is open, to refuse a duplicate ---- */

static const unsigned char *name_bytes(const scan *s, const name_ref *r) {
    return r->at ? r->at : s->arena + r->off;
}

static unsigned name_hash(const unsigned char *p, size_t n) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

static int arena_put(scan *s, const void *p, size_t n) {
    if (s->alen + n > s->acap) {
        size_t cap = s->acap ? s->acap * 2 : 256;
        while (cap < s->alen + n) cap *= 2;
        unsigned char *a = realloc(s->arena, cap);
        if (!a) return fail(s, "out of memory");
        s->arena = a;
        s->acap = cap;
    }
    memcpy(s->arena + s->alen, p, n);
    s->alen += n;
    return 0;
}

static int arena_utf8(scan *s, unsigned cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12)); u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | (cp >> 18)); u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (unsigned char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return arena_put(s, u, n);
}

/* Decode a name with escapes (already checked by string(), at its opening quote) into the arena. */
static int name_decode(scan *s, const unsigned char *q, size_t *off, size_t *len) {
    *off = s->alen;
    q++;
    for (;;) {
        const unsigned char *from = q;
        while (*q != '"' && *q != '\\') q++;
        if (q > from && arena_put(s, from, (size_t)(q - from)) < 0) return -1;
        if (*q == '"') break;
        q++;
        unsigned char c = *q++, e;
        unsigned cp = 0;
        switch (c) {
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case 'n': e = '\n'; break;
        case 'r': e = '\r'; break;
        case 't': e = '\t'; break;
        case 'u':
            for (int i = 0; i < 4; i++) cp = cp * 16 + (unsigned)hexval(*q++);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo = 0;
                q += 2;
                for (int i = 0; i < 4; i++) lo = lo * 16 + (unsigned)hexval(*q++);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (arena_utf8(s, cp) < 0) return -1;
            continue;
        default: e = c; break; /* " \ / */
        }
        if (arena_put(s, &e, 1) < 0) return -1;
    }
    *len = s->alen - *off;
    return 0;
}

/* The names of one open object: from names[base]; a hash index once it has many. */
typedef struct {
    size_t base, amark;
    size_t *slots; /* index + 1 into names, 0 = empty; NULL while the object is small */
    size_t mask;
    int hashed; /* the names' hashes are computed (only once the object is indexed) */
} obj_names;

#define INDEX_FROM 16

static void obj_open(scan *s, obj_names *o) {
    o->base = s->nnames;
    o->amark = s->alen;
    o->slots = NULL;
    o->mask = 0;
    o->hashed = 0;
}

static void obj_close(scan *s, obj_names *o) {
    free(o->slots);
    o->slots = NULL;
    s->nnames = o->base;
    s->alen = o->amark;
}

static int same_name(const scan *s, const name_ref *a, const name_ref *b) {
    return a->len == b->len && memcmp(name_bytes(s, a), name_bytes(s, b), a->len) == 0;
}

static int index_build(scan *s, obj_names *o, size_t size) {
    size_t *slots = calloc(size, sizeof *slots);
    if (!slots) return fail(s, "out of memory");
    free(o->slots);
    o->slots = slots;
    o->mask = size - 1;
    for (size_t j = o->base; j < s->nnames; j++) {
        name_ref *r = &s->names[j];
        if (!o->hashed) r->hash = name_hash(name_bytes(s, r), r->len);
        size_t i = r->hash & o->mask;
        while (slots[i]) i = (i + 1) & o->mask;
        slots[i] = j + 1;
    }
    o->hashed = 1;
    return 0;
}

/* Add the member name at name_at (its opening quote; raw/rawlen: its bytes when it has no
   escape) to the open object o; fails with kind "duplicate_key" when o has it already. */
static int obj_add(scan *s, obj_names *o, const unsigned char *name_at, const unsigned char *raw, size_t rawlen) {
    name_ref r;
    if (raw) {
        r.at = raw; r.off = 0; r.len = rawlen;
    } else {
        r.at = NULL;
        if (name_decode(s, name_at, &r.off, &r.len) < 0) return -1;
    }
    r.hash = 0;
    const name_ref *dup = NULL;
    if (o->slots) {
        r.hash = name_hash(name_bytes(s, &r), r.len);
        for (size_t i = r.hash & o->mask; o->slots[i]; i = (i + 1) & o->mask) {
            const name_ref *q = &s->names[o->slots[i] - 1];
            if (q->hash == r.hash && same_name(s, q, &r)) { dup = q; break; }
        }
    } else {
        for (size_t j = o->base; j < s->nnames; j++)
            if (same_name(s, &s->names[j], &r)) { dup = &s->names[j]; break; }
    }
    if (dup) {
        s->kind = "duplicate_key";
        s->dup_in_arena = r.at == NULL;
        s->dup = r.at;
        s->dup_off = r.off;
        s->dup_len = r.len;
        return fail(s, "a duplicate key");
    }
    if (s->nnames == s->cap) {
        size_t cap = s->cap * 2;
        name_ref *n = s->names == s->inline_names ? malloc(cap * sizeof *n) : realloc(s->names, cap * sizeof *n);
        if (!n) return fail(s, "out of memory");
        if (s->names == s->inline_names) memcpy(n, s->inline_names, sizeof s->inline_names);
        s->names = n;
        s->cap = cap;
    }
    s->names[s->nnames++] = r;
    size_t count = s->nnames - o->base;
    if (o->slots) {
        if (count * 2 > o->mask + 1) return index_build(s, o, (o->mask + 1) * 2);
        size_t i = r.hash & o->mask;
        while (o->slots[i]) i = (i + 1) & o->mask;
        o->slots[i] = s->nnames;
    } else if (count >= INDEX_FROM) {
        return index_build(s, o, 4 * INDEX_FROM);
    }
    return 0;
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

/* An object member's name and its ':' at s->p (after white space): checked, added to o (a name given
   twice fails), and skipped; *name_at is where it starts, *raw / *rawlen its text between the quotes.
   Returns 0, or -1 (s's error set). */
static int member_name(scan *s, obj_names *o, const unsigned char **name_at, const unsigned char **raw,
                       size_t *rawlen) {
    ws(s);
    if (s->p >= s->end || *s->p != '"') return fail(s, "an object member without a string name");
    *name_at = s->p;
    *raw = NULL;
    *rawlen = 0;
    if (string(s, NULL, raw, rawlen) < 0 || obj_add(s, o, *name_at, *raw, *rawlen) < 0) return -1;
    ws(s);
    if (s->p >= s->end || *s->p != ':') return fail(s, "a ':' is missing after a member name");
    s->p++;
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
        obj_names o;
        obj_open(s, &o);
        int rc;
        for (;;) {
            if (close == '}') {
                const unsigned char *name_at, *raw;
                size_t nl;
                if (member_name(s, &o, &name_at, &raw, &nl) < 0) { rc = -1; break; }
            }
            if (skip(s, depth + 1) < 0) { rc = -1; break; }
            ws(s);
            if (s->p < s->end && *s->p == ',') { s->p++; continue; }
            if (s->p < s->end && *s->p == close) { s->p++; rc = 0; break; }
            rc = fail(s, close == '}' ? "a ',' or '}' is missing" : "a ',' or ']' is missing");
            break;
        }
        obj_close(s, &o);
        return rc;
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
        obj_names o;
        obj_open(s, &o);
        int rc;
        for (;;) {
            const unsigned char *name_at, *raw;
            size_t nl;
            if (member_name(s, &o, &name_at, &raw, &nl) < 0) { rc = -1; break; }
            ws(s);
            if (s->p >= s->end) { rc = fail(s, "the text ends where a value should be"); break; }
            int took = on_member(s, name_at, (const char *)raw, nl, ctx);
            if (took < 0 || (!took && skip(s, 1) < 0)) { rc = -1; break; }
            ws(s);
            if (s->p < s->end && *s->p == ',') { s->p++; continue; }
            if (s->p < s->end && *s->p == '}') { s->p++; rc = 0; break; }
            rc = fail(s, "a ',' or '}' is missing");
            break;
        }
        obj_close(s, &o);
        if (rc < 0) return -1;
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
        scan t;
        scan_init(&t, (const char *)s->start, (size_t)(s->end - s->start));
        t.p = name_at;
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

/* Whether the member name at name_at (name: its bytes when it has no escape, else NULL)
   is want[0..wl). */
static int name_is(lua_State *L, scan *s, const unsigned char *name_at, const char *name, size_t nl,
                   const char *want, size_t wl) {
    if (name) return nl == wl && memcmp(name, want, wl) == 0;
    scan t; /* escapes: decode the name to compare it */
    scan_init(&t, (const char *)s->start, (size_t)(s->end - s->start));
    t.p = name_at;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    string(&t, &b, NULL, NULL);
    luaL_pushresult(&b);
    size_t dl;
    const char *d = lua_tolstring(L, -1, &dl);
    int same = dl == wl && memcmp(d, want, wl) == 0;
    lua_pop(L, 1);
    scan_free(&t);
    return same;
}

typedef struct {
    lua_State *L;
    int out;            /* the stack slot of the result (hashes: then firsts, lasts) */
    const char *name;
    size_t nl;
    const unsigned char *key; /* element_hashes: the process's SipHash key; NULL: texts */
} elements_ctx;

static int elements_member(scan *s, const unsigned char *name_at, const char *name, size_t nl, void *ctx) {
    elements_ctx *e = ctx;
    lua_State *L = e->L;
    if (*s->p != '[' || !name_is(L, s, name_at, name, nl, e->name, e->nl)) return 0;
    s->p++;
    int lists = e->key ? 3 : 1; /* texts; or hashes, firsts, lasts */
    for (int i = 0; i < lists; i++) lua_newtable(L);
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
    } else {
        lua_Integer n = 0;
        for (;;) {
            ws(s);
            const unsigned char *from = s->p;
            if (skip(s, 2) < 0) { lua_pop(L, lists); return -1; }
            size_t len = (size_t)(s->p - from);
            ++n;
            if (e->key) {
                unsigned char h[16];
                obleth_siphash128(e->key, from, len, h);
                lua_pushlstring(L, (const char *)h, sizeof h);
                lua_rawseti(L, -4, n);
                lua_pushinteger(L, (lua_Integer)(from - s->start) + 1);
                lua_rawseti(L, -3, n);
                lua_pushinteger(L, (lua_Integer)(from - s->start) + (lua_Integer)len);
                lua_rawseti(L, -2, n);
            } else {
                lua_pushlstring(L, (const char *)from, len);
                lua_rawseti(L, -2, n);
            }
            ws(s);
            if (s->p < s->end && *s->p == ',') { s->p++; continue; }
            if (s->p < s->end && *s->p == ']') { s->p++; break; }
            lua_pop(L, lists);
            return fail(s, "a ',' or ']' is missing");
        }
    }
    for (int i = lists - 1; i >= 0; i--) lua_replace(L, e->out + i);
    return 1;
}

/* Push nil, message, kind, key (key: nil unless kind is "duplicate_key") for a failed scan;
   frees the scan. Returns 4. The key is shown escaped: no byte of the text reaches the
   message unless it is printable ASCII or part of valid UTF-8. */
static int push_error(lua_State *L, scan *s) {
    const char *kind = s->kind ? s->kind : "syntax";
    int at = (int)(s->p - s->start) + 1;
    char key[64 * 6 + 8];
    size_t k = 0;
    if (s->dup_in_arena) s->dup = s->arena + s->dup_off; /* else it points into the text */
    if (s->dup) {
        size_t n = s->dup_len;
        int cut = 0;
        if (n > 64) {
            n = 64;
            while (n > 0 && (s->dup[n] & 0xC0) == 0x80) n--; /* not inside a UTF-8 character */
            cut = 1;
        }
        for (size_t i = 0; i < n; i++) {
            unsigned char c = s->dup[i];
            if (c == '"' || c == '\\') { key[k++] = '\\'; key[k++] = (char)c; }
            else if (c < 0x20 || c == 0x7F) k += (size_t)snprintf(key + k, sizeof key - k, "\\u%04x", c);
            else key[k++] = (char)c;
        }
        if (cut) { memcpy(key + k, "...", 3); k += 3; }
    }
    int dup = s->dup != NULL;
    const char *err = s->err ? s->err : "invalid JSON";
    scan_free(s); /* before anything that can raise */
    lua_pushnil(L);
    if (dup) {
        key[k] = '\0';
        lua_pushfstring(L, "the key \"%s\" appears twice in one object (at byte %d)", key, at);
    } else {
        lua_pushfstring(L, "%s (at byte %d)", err, at);
    }
    lua_pushstring(L, kind);
    if (dup) lua_pushlstring(L, key, k); else lua_pushnil(L);
    return 4;
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
    scan s;
    scan_init(&s, text, len);
    if (walk_object(&s, fields_member, &f) == 0) {
        scan_free(&s);
        return f.n + 1;
    }
    lua_settop(L, f.base);
    return push_error(L, &s);
}

/* elements (key NULL) and element_hashes (the process's key): true, then 1 or 3 results. */
static int elements(lua_State *L, const unsigned char *key) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    elements_ctx e;
    e.L = L;
    e.name = luaL_checklstring(L, 2, &e.nl);
    e.key = key;
    int lists = key ? 3 : 1;
    lua_settop(L, 2);
    lua_pushboolean(L, 1);
    for (int i = 0; i < lists; i++) lua_pushnil(L); /* the results, at 4 .. */
    e.out = 4;
    scan s;
    scan_init(&s, text, len);
    if (walk_object(&s, elements_member, &e) == 0) {
        scan_free(&s);
        return 1 + lists;
    }
    lua_settop(L, 2);
    return push_error(L, &s);
}

static int l_elements(lua_State *L) { return elements(L, NULL); }

static int l_element_hashes(lua_State *L) {
    const unsigned char *key = obleth_siphash_process_key();
    if (!key) return luaL_error(L, "jsonscan.element_hashes: no random key (getrandom failed)");
    return elements(L, key);
}

static int l_check(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    scan s;
    scan_init(&s, text, len);
    int rc = skip(&s, 0);
    if (rc == 0) {
        ws(&s);
        if (s.p < s.end) rc = fail(&s, "more text after the JSON value");
    }
    if (rc == 0) {
        scan_free(&s);
        lua_pushboolean(L, 1);
        return 1;
    }
    return push_error(L, &s);
}

/* Skip spaces, tabs and line ends from p; returns where the next byte is. */
static const char *usage_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* The integer after `: ` at p (a JSON number without fraction), or -1. */
static long long usage_int(const char *p, const char *end) {
    p = usage_ws(p, end);
    if (p >= end || *p != ':') return -1;
    p = usage_ws(p + 1, end);
    if (p >= end || *p < '0' || *p > '9') return -1;
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (1LL << 53)) return -1;
        v = v * 10 + (*p++ - '0');
    }
    return v;
}

int obleth_usage_scan(const char *s, size_t n, long long *prompt, long long *completion) {
    static const char key[] = "\"usage\"";
    const size_t klen = sizeof key - 1;
    const char *end = s + n;
    for (size_t i = n >= klen ? n - klen + 1 : 0; i-- > 0;) {
        if (memcmp(s + i, key, klen) != 0 || (i > 0 && s[i - 1] == '\\')) continue;
        const char *p = usage_ws(s + i + klen, end);
        if (p >= end || *p != ':') continue;
        p = usage_ws(p + 1, end);
        if (p >= end || *p != '{') continue; /* "usage": null, in the chunks before the last */
        *prompt = *completion = -1;
        int depth = 0;
        for (; p < end; p++) {
            if (*p == '"') {
                const char *q = p + 1;
                while (q < end && *q != '"') q += *q == '\\' ? 2 : 1;
                if (q >= end) break;
                if (depth == 1) {
                    size_t len = (size_t)(q - p - 1);
                    if (len == 13 && memcmp(p + 1, "prompt_tokens", 13) == 0) *prompt = usage_int(q + 1, end);
                    else if (len == 17 && memcmp(p + 1, "completion_tokens", 17) == 0)
                        *completion = usage_int(q + 1, end);
                }
                p = q;
            } else if (*p == '{' || *p == '[') {
                depth++;
            } else if (*p == '}' || *p == ']') {
                if (--depth == 0) break;
            }
        }
        return *prompt >= 0 || *completion >= 0;
    }
    return 0;
}

static int l_usage(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    long long p, c;
    if (!obleth_usage_scan(s, n, &p, &c)) return 0;
    if (p >= 0) lua_pushinteger(L, (lua_Integer)p);
    else lua_pushnil(L);
    if (c >= 0) lua_pushinteger(L, (lua_Integer)c);
    else lua_pushnil(L);
    return 2;
}

int luaopen_obleth_jsonscan(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, l_fields);
    lua_setfield(L, -2, "fields");
    lua_pushcfunction(L, l_check);
    lua_setfield(L, -2, "check");
    lua_pushcfunction(L, l_elements);
    lua_setfield(L, -2, "elements");
    lua_pushcfunction(L, l_element_hashes);
    lua_setfield(L, -2, "element_hashes");
    lua_pushcfunction(L, l_usage);
    lua_setfield(L, -2, "usage");
    return 1;
}
