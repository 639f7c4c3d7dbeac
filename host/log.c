/*
 * log.c — structured logging to stderr with secret redaction (obleth.log).
 *
 * One line per event in logfmt: `ts=... level=info event=name k=v ...`.
 * Under systemd (JOURNAL_STREAM set) the timestamp is left to journald and
 * each line starts with a syslog priority prefix (<3> error ... <7> debug),
 * which journald turns into the entry's priority.
 *
 * Redaction: every string registered with add_secret (8 bytes or longer:
 * a shorter one would match ordinary words such as "info") is replaced by
 * "[redacted]" wherever it appears in a value (matched before the value is
 * escaped, so a secret with a quote or a newline is still found), and values of
 * fields whose key names a credential (token, secret, password,
 * authorization, api_key, jwt) are always printed as "[redacted]".
 *
 * Lua API (require "obleth.log"):
 *   debug|info|warn|error(event, fields?)  fields: table of scalars
 *   set_level(name)   "debug" | "info" | "warn" | "error"; level()
 *   add_secret(s)     register a secret string (ignored if shorter than 8 bytes)
 *   redact(s)         s with every registered secret replaced
 */
#define _POSIX_C_SOURCE 200809L
#include "host.h"
#include "buf.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

enum { LV_DEBUG, LV_INFO, LV_WARN, LV_ERROR };
static const char *lvnames[] = {"debug", "info", "warn", "error"};
static const int lvprio[] = {7, 6, 4, 3};

static int g_level = LV_INFO;
static int g_level_init;
static int g_journal; /* JOURNAL_STREAM was set at start: journald gets priority prefixes */
static char **g_secrets;
static size_t g_nsecrets, g_capsecrets;

static int level_of(const char *name) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, lvnames[i]) == 0) return i;
    if (strcmp(name, "warning") == 0) return LV_WARN;
    return -1;
}

static void init_level(void) {
    if (g_level_init) return;
    g_level_init = 1;
    g_journal = getenv("JOURNAL_STREAM") != NULL;
    const char *e = getenv("OBLETH_LOG_LEVEL");
    if (e) {
        int l = level_of(e);
        if (l >= 0) g_level = l;
    }
}

#define MIN_SECRET 8

/* The first occurrence of needle in hay[0..hn), or NULL. */
static const char *find(const char *hay, size_t hn, const char *needle, size_t nn) {
    if (nn == 0 || hn < nn) return NULL;
    for (const char *p = hay, *end = hay + hn - nn; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, nn) == 0) return p;
    }
    return NULL;
}

/* Replace every registered secret in b (in place, into a new buffer). */
static void redact(obuf *b) {
    for (size_t i = 0; i < g_nsecrets; i++) {
        const char *sec = g_secrets[i];
        size_t sl = strlen(sec);
        if (!b->p || !find(b->p, b->n, sec, sl)) continue;
        obuf out = {0};
        const char *p = b->p, *end = b->p + b->n, *hit;
        while ((hit = find(p, (size_t)(end - p), sec, sl)) != NULL) {
            obuf_add(&out, p, (size_t)(hit - p));
            obuf_adds(&out, "[redacted]");
            p = hit + sl;
        }
        obuf_add(&out, p, (size_t)(end - p));
        obuf_free(b);
        *b = out;
    }
}

static int needs_quote(const char *s, size_t n) {
    if (n == 0) return 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f) return 1;
    }
    return 0;
}

static void add_value_raw(obuf *b, const char *s, size_t n);

/* A value, with every registered secret replaced before it is escaped. */
static void add_value(obuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < g_nsecrets; i++) {
        if (find(s, n, g_secrets[i], strlen(g_secrets[i]))) {
            obuf v = {0};
            obuf_add(&v, s, n);
            redact(&v);
            add_value_raw(b, v.p, v.n);
            obuf_free(&v);
            return;
        }
    }
    add_value_raw(b, s, n);
}

static void add_value_raw(obuf *b, const char *s, size_t n) {
    if (!needs_quote(s, n)) { obuf_add(b, s, n); return; }
    obuf_adds(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        switch (c) {
        case '"': obuf_adds(b, "\\\""); break;
        case '\\': obuf_adds(b, "\\\\"); break;
        case '\n': obuf_adds(b, "\\n"); break;
        case '\r': obuf_adds(b, "\\r"); break;
        case '\t': obuf_adds(b, "\\t"); break;
        default:
            if (c < 0x20 || c == 0x7f) { snprintf(tmp, sizeof tmp, "\\x%02x", c); obuf_adds(b, tmp); }
            else obuf_add(b, (const char *)&s[i], 1);
        }
    }
    obuf_adds(b, "\"");
}

static int is_secret_key_uncached(const char *k) {
    static const char *words[] = {"token", "secret", "password", "passwd", "authorization",
                                  "api_key", "apikey", "jwt", "cookie", NULL};
    char low[128];
    size_t i;
    for (i = 0; k[i] && i < sizeof low - 1; i++) low[i] = (char)tolower((unsigned char)k[i]);
    low[i] = 0;
    for (int j = 0; words[j]; j++)
        if (strstr(low, words[j])) return 1;
    return 0;
}

/* Does the field name k name a credential? Field names are few and repeat on
   every line: the answer for names up to 31 bytes is remembered. */
static int is_secret_key(const char *k, size_t kl) {
    enum { SLOTS = 128, KEYMAX = 32 };
    static struct { char k[KEYMAX]; signed char v; } memo[SLOTS];
    if (kl >= KEYMAX) return is_secret_key_uncached(k);
    unsigned h = 2166136261u;
    for (size_t i = 0; i < kl; i++) h = (h ^ (unsigned char)k[i]) * 16777619u;
    unsigned slot = h % SLOTS;
    if (memo[slot].v && memcmp(memo[slot].k, k, kl) == 0 && memo[slot].k[kl] == 0) return memo[slot].v > 0;
    int v = is_secret_key_uncached(k);
    memcpy(memo[slot].k, k, kl);
    memo[slot].k[kl] = 0;
    memo[slot].v = v ? 1 : -1;
    return v;
}

/* " key=value" (the value quoted when it needs it). */
static void add_field(obuf *b, const char *k, size_t kl, const char *v, size_t vl) {
    obuf_adds(b, " ");
    obuf_add(b, k, kl);
    obuf_adds(b, "=");
    add_value(b, v, vl);
}

static void line_start(obuf *b, int lv, const char *event) {
    if (g_journal) {
        char pre[8];
        snprintf(pre, sizeof pre, "<%d>", lvprio[lv]);
        obuf_adds(b, pre);
    } else {
        /* "ts=2026-11-30T12:00:00." is made once a second, the milliseconds each line */
        static time_t last_sec = (time_t)-1;
        static char prefix[48];
        struct timeval tv;
        gettimeofday(&tv, NULL);
        if (tv.tv_sec != last_sec) {
            struct tm tm;
            gmtime_r(&tv.tv_sec, &tm);
            snprintf(prefix, sizeof prefix, "ts=%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
            last_sec = tv.tv_sec;
        }
        obuf_adds(b, prefix);
        int ms = (int)(tv.tv_usec / 1000);
        char tail[6] = {(char)('0' + ms / 100), (char)('0' + ms / 10 % 10), (char)('0' + ms % 10), 'Z', ' ', 0};
        obuf_adds(b, tail);
    }
    obuf_adds(b, "level=");
    obuf_adds(b, lvnames[lv]);
    obuf_adds(b, " event=");
    add_value(b, event, strlen(event));
}

static void line_emit(obuf *b) {
    obuf_adds(b, "\n");
    fwrite(b->p, 1, b->n, stderr);
    fflush(stderr);
}

/* Start a line from C at the level named (unknown names are info): 0 when the
   level is below the one set, and nothing was started. */
static int c_line_start(obuf *b, const char *level, const char *event) {
    init_level();
    int lv = level_of(level);
    if (lv < 0) lv = LV_INFO;
    if (lv < g_level) return 0;
    line_start(b, lv, event);
    return 1;
}

void obleth_log(const char *level, const char *event, const char *fmt, ...) {
    obuf b = {0};
    if (!c_line_start(&b, level, event)) return;
    if (fmt && *fmt) {
        char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n > 0) {
            msg = malloc((size_t)n + 1);
            if (msg) {
                va_start(ap, fmt);
                vsnprintf(msg, (size_t)n + 1, fmt, ap);
                va_end(ap);
                obuf_adds(&b, " ");
                /* fmt is "k=v" pairs written by C code; keep it on one line */
                for (char *p = msg; *p; p++) if (*p == '\n') *p = ' ';
                obuf m = {0};
                obuf_adds(&m, msg);
                redact(&m);
                obuf_add(&b, m.p, m.n);
                obuf_free(&m);
                free(msg);
            }
        }
    }
    line_emit(&b);
    obuf_free(&b);
}

/* ---- Lua API ---------------------------------------------------------------- */

typedef struct { const char *k; size_t kl; } keyref;

static int cmp_keys(const void *a, const void *b) {
    const keyref *x = a, *y = b;
    return strcmp(x->k, y->k);
}

static int log_at(lua_State *L, int lv) {
    init_level();
    const char *event = luaL_checkstring(L, 1);
    if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
    if (lv < g_level) return 0;
    /* collect string keys, sorted for stable output; the strings stay
       referenced by the table on the stack, so pointers remain valid */
    keyref keys[64];
    int nk = 0;
    if (lua_istable(L, 2)) {
        lua_pushnil(L);
        while (lua_next(L, 2) != 0 && nk < 64) {
            lua_pop(L, 1);
            if (lua_type(L, -1) == LUA_TSTRING) {
                keys[nk].k = lua_tolstring(L, -1, &keys[nk].kl);
                nk++;
            }
        }
        lua_settop(L, 2);
        qsort(keys, (size_t)nk, sizeof keys[0], cmp_keys);
    }
    obuf b = {0};
    line_start(&b, lv, event);
    for (int i = 0; i < nk; i++) {
        lua_getfield(L, 2, keys[i].k);
        size_t vl = 0;
        const char *v;
        if (is_secret_key(keys[i].k, keys[i].kl) && !lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN) {
            v = "[redacted]"; vl = strlen(v);
        } else {
            v = luaL_tolstring(L, -1, &vl); /* pushes */
        }
        add_field(&b, keys[i].k, keys[i].kl, v, vl);
        lua_settop(L, 2);
    }
    line_emit(&b);
    obuf_free(&b);
    return 0;
}

static int l_debug(lua_State *L) { return log_at(L, LV_DEBUG); }
static int l_info(lua_State *L) { return log_at(L, LV_INFO); }
static int l_warn(lua_State *L) { return log_at(L, LV_WARN); }
static int l_error(lua_State *L) { return log_at(L, LV_ERROR); }

static int l_set_level(lua_State *L) {
    init_level();
    int lv = level_of(luaL_checkstring(L, 1));
    luaL_argcheck(L, lv >= 0, 1, "level must be debug, info, warn or error");
    g_level = lv;
    return 0;
}

static int l_level(lua_State *L) {
    init_level();
    lua_pushstring(L, lvnames[g_level]);
    return 1;
}

static int l_add_secret(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    if (n < MIN_SECRET || strlen(s) != n) return 0;
    for (size_t i = 0; i < g_nsecrets; i++)
        if (strcmp(g_secrets[i], s) == 0) return 0;
    if (g_nsecrets == g_capsecrets) {
        size_t cap = g_capsecrets ? g_capsecrets * 2 : 8;
        char **p = realloc(g_secrets, cap * sizeof *p);
        if (!p) return luaL_error(L, "out of memory");
        g_secrets = p; g_capsecrets = cap;
    }
    char *copy = strdup(s);
    if (!copy) return luaL_error(L, "out of memory");
    g_secrets[g_nsecrets++] = copy;
    return 0;
}

static int l_redact(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    obuf b = {0};
    obuf_add(&b, s, n);
    redact(&b);
    lua_pushlstring(L, b.p, b.n);
    obuf_free(&b);
    return 1;
}

/* Frees the secret list when the Lua state closes. */
static int secrets_gc(lua_State *L) {
    (void)L;
    for (size_t i = 0; i < g_nsecrets; i++) free(g_secrets[i]);
    free(g_secrets);
    g_secrets = NULL;
    g_nsecrets = g_capsecrets = 0;
    return 0;
}

int luaopen_obleth_log(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"debug", l_debug}, {"info", l_info},           {"warn", l_warn},
        {"error", l_error}, {"set_level", l_set_level}, {"level", l_level},
        {"add_secret", l_add_secret}, {"redact", l_redact}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    /* a sentinel whose __gc releases the secrets at lua_close */
    obleth_sentinel(L, "obleth.log.sentinel", secrets_gc);
    return 1;
}
