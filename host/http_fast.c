/*
 * http_fast.c — the router's fast path (part of obleth.http).
 *
 * The Lua router (lua/obleth/router.lua) decides every request it sees, and
 * teaches this table what it decided: which client API keys are valid, and
 * which endpoints each model name goes to. A server given the table
 * (http.server{fast = ft}) then answers the common request without running
 * Lua: a POST to a canonical /v1/ path, with a key the router accepted (or
 * keyless access on), a JSON body whose "model" the router resolved. It
 * picks an endpoint with the balancer below (the one the Lua router uses
 * too), passes the request on with obleth_proxy_start (http_proxy.c), counts
 * it for the router's metrics and writes the router's request line.
 *
 * Anything else goes to the Lua handler as before: other methods and paths,
 * an unknown key or model, odd bodies (multipart, escapes in "model", JSON
 * that does not parse), and everything once the table is older than `ttl`
 * seconds, so a write made behind the router's back is seen as soon as by
 * the Lua path. When the fast attempt fails before any byte of an answer
 * reached the client, the request goes to the Lua handler with
 * req.prior = {endpoint, code, message}: the router treats it as its first
 * attempt (retry on another replica, or the error answer).
 *
 * Lua API:
 *   ft = http.fast{connect_timeout = 5, timeout = 3600, buffer_limit = 1048576,
 *                  ttl = 2, cooldown = 5, buckets = {0.001, ...}}
 *     connect_timeout, timeout (seconds), buffer_limit (bytes): as res:proxy's
 *     ttl: seconds what the router taught stays good (from the last clear)
 *     cooldown: seconds an endpoint whose connection failed is avoided
 *     buckets: upper bounds (seconds, ascending) of the latency histogram
 *   ft:enable(on)               false while the server drains: every request goes to Lua
 *   ft:clear()                  forget keys, models and keyless (the router's invalidate)
 *   ft:keyless(on)              no key needed (the router's "keyless" setting)
 *   ft:add_key(token)           a client key the router accepted
 *   ft:set_model(name, canonical, endpoints)
 *                               requests naming `name` go to one of endpoints
 *                               {{url=, host=, port=, prefix=}, ...} (1..256 of them),
 *                               counted under the model's canonical name
 *   ft:pick(model, urls, exclude, now) -> url | nil   the balancer, shared by both paths:
 *                               fewest requests in flight, round robin on ties, an endpoint
 *                               cooling down only when all are; exclude: set of urls
 *   ft:acquire(url), ft:release(url), ft:failed(url, now), ft:load(url) -> n
 *   ft:drain() -> {[canonical] = {statuses = {[status] = n}, buckets = {n...}, sum=, count=}}
 *                               what the fast path counted since the last drain
 *   ft:in_flight() -> {[canonical] = n}, total   requests the fast path is answering
 *   ft:stats() -> {requests =, handed_back =}    fast requests since start, and those
 *                               that went on to the Lua router after a failed attempt
 *   `now` is seconds of obleth.loop.monotonic().
 */
#define _POSIX_C_SOURCE 200809L
#include "http_internal.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define FAST_MT "obleth.http.fast"
#define MAX_ENDPOINTS 256
#define MAX_BUCKETS 64
#define MAX_KEYS 65536 /* more valid keys than this: start over (the router teaches them again) */

/* ---- a string-keyed hash map (chained) ------------------------------------- */

typedef struct sentry {
    struct sentry *next;
    char *key;
    size_t klen;
    uint32_t hash;
} sentry;

typedef struct {
    sentry **b;
    size_t nb, n;
} smap;

static uint32_t hash_of(const char *k, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}

static sentry *smap_get(const smap *m, const char *k, size_t n) {
    if (!m->nb) return NULL;
    uint32_t h = hash_of(k, n);
    for (sentry *e = m->b[h & (m->nb - 1)]; e; e = e->next)
        if (e->hash == h && e->klen == n && memcmp(e->key, k, n) == 0) return e;
    return NULL;
}

/* Add e (its key set, not in the map). 0 | -1 (out of memory). */
static int smap_put(smap *m, sentry *e) {
    if (m->n + 1 > m->nb) {
        size_t nb = m->nb ? m->nb * 2 : 16;
        sentry **b = calloc(nb, sizeof *b);
        if (!b) return -1;
        for (size_t i = 0; i < m->nb; i++)
            for (sentry *x = m->b[i], *nx; x; x = nx) {
                nx = x->next;
                x->next = b[x->hash & (nb - 1)];
                b[x->hash & (nb - 1)] = x;
            }
        free(m->b);
        m->b = b;
        m->nb = nb;
    }
    e->hash = hash_of(e->key, e->klen);
    e->next = m->b[e->hash & (m->nb - 1)];
    m->b[e->hash & (m->nb - 1)] = e;
    m->n++;
    return 0;
}

/* Remove every entry for which drop(e) says so (drop frees it). */
static void smap_filter(smap *m, int (*drop)(sentry *e, void *ctx), void *ctx) {
    for (size_t i = 0; i < m->nb; i++) {
        sentry **pp = &m->b[i];
        while (*pp) {
            sentry *e = *pp;
            sentry *nx = e->next;
            if (drop(e, ctx)) {
                *pp = nx;
                m->n--;
            } else {
                pp = &e->next;
            }
        }
    }
}

static int set_key(sentry *e, const char *k, size_t n) {
    e->key = malloc(n + 1);
    if (!e->key) return -1;
    memcpy(e->key, k, n);
    e->key[n] = '\0';
    e->klen = n;
    return 0;
}

/* The entry for k, made (size bytes, zeroed, the sentry first) when missing; NULL
   when memory ran out. */
static sentry *smap_intern(smap *m, const char *k, size_t n, size_t size) {
    sentry *e = smap_get(m, k, n);
    if (e) return e;
    e = calloc(1, size);
    if (!e || set_key(e, k, n) != 0 || smap_put(m, e) != 0) {
        if (e) free(e->key);
        free(e);
        return NULL;
    }
    return e;
}

/* Free an entry and its key (one with nothing else to free). */
static void entry_free(sentry *e) {
    free(e->key);
    free(e);
}

/* ---- the table --------------------------------------------------------------- */

/* An endpoint URL's balancer state. */
typedef struct {
    sentry e; /* key: the URL */
    int inflight;
    double down_until; /* monotonic seconds; 0: not cooling down */
} ustate;

/* A model's (by canonical name) cursor and what the fast path counted for it. */
typedef struct {
    sentry e;
    size_t cursor; /* 0-based position the next pick starts from */
    int inflight;
    int nstatus;
    struct { int status; lua_Integer n; } *statuses;
    lua_Integer buckets[MAX_BUCKETS + 1], count; /* the last bucket is +Inf */
    double sum;
} mstate;

typedef struct {
    char *url, *host, *prefix;
    int port;
} fendpoint;

/* A model name the router resolved. */
typedef struct {
    sentry e; /* key: the name as clients send it */
    mstate *ms;
    int n;
    fendpoint ep[];
} fmodel;

typedef struct fast_req fast_req;

typedef struct obleth_fast {
    int enabled, keyless;
    double filled_at, ttl, cooldown;
    obleth_proxy_opts popts;
    int nbuckets;
    double bounds[MAX_BUCKETS];
    smap keys, models, urls, mstates;
    lua_Integer taken, handed_back;
    fast_req *live; /* requests in flight, for the finalizer */
} fast;

struct fast_req {
    response r; /* first: the response object while the fast path holds the request */
    fast *ft;
    fast_req *prev, *next;
    mstate *ms;
    ustate *us;
    int handler_ref;
    double t0;
    char *url, *path; /* in the same block, after the struct */
};

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int drop_key(sentry *e, void *ctx) {
    (void)ctx;
    /* a client key: wipe it before the memory goes back */
    volatile char *p = e->key;
    for (size_t i = 0; i < e->klen; i++) p[i] = 0;
    entry_free(e);
    return 1;
}

static int drop_model(sentry *e, void *ctx) {
    (void)ctx;
    fmodel *m = (fmodel *)e;
    for (int i = 0; i < m->n; i++) {
        free(m->ep[i].url);
        free(m->ep[i].host);
        free(m->ep[i].prefix);
    }
    entry_free(e);
    return 1;
}

static int drop_model_if(sentry *e, void *ctx) { return e == ctx ? drop_model(e, NULL) : 0; }

static int drop_url(sentry *e, void *ctx) {
    (void)ctx;
    entry_free(e);
    return 1;
}

/* An endpoint's state is kept while requests are in flight or it cools down. */
static int drop_idle_url(sentry *e, void *ctx) {
    ustate *u = (ustate *)e;
    if (u->inflight > 0 || u->down_until > *(double *)ctx) return 0;
    return drop_url(e, NULL);
}

static int drop_mstate(sentry *e, void *ctx) {
    (void)ctx;
    free(((mstate *)e)->statuses);
    entry_free(e);
    return 1;
}

static ustate *url_state(fast *ft, const char *url, size_t n, int create) {
    if (!create) return (ustate *)smap_get(&ft->urls, url, n);
    return (ustate *)smap_intern(&ft->urls, url, n, sizeof(ustate));
}

static mstate *model_state(fast *ft, const char *name, size_t n) {
    return (mstate *)smap_intern(&ft->mstates, name, n, sizeof(mstate));
}

/* ---- the balancer -------------------------------------------------------------- */

/* Pick among n endpoints (url(i, ctx) gives the i-th): the fewest in flight wins,
   one cooling down loses to any that is not, ties go to the first from the
   model's cursor on, which then moves past the one picked. -1 when all are
   excluded. The rule of obleth.router.balancer (docs/router.md, "Balancing"). */
static int pick(fast *ft, mstate *ms, int n, const char *(*url)(int i, void *ctx), int (*excluded)(int i, void *ctx),
                void *ctx, double now, ustate **picked) {
    if (n <= 0) return -1;
    size_t start = ms ? ms->cursor : 0;
    if (start >= (size_t)n) start = 0;
    int best = -1, best_load = 0, best_cool = 0;
    ustate *best_u = NULL;
    for (int k = 0; k < n; k++) {
        int i = (int)((start + (size_t)k) % (size_t)n);
        if (excluded && excluded(i, ctx)) continue;
        const char *u = url(i, ctx);
        ustate *us = url_state(ft, u, strlen(u), 0);
        int cool = us && us->down_until > now;
        if (us && us->down_until != 0 && !cool) us->down_until = 0;
        int load = us ? us->inflight : 0;
        if (best < 0 || (best_cool && !cool) || (cool == best_cool && load < best_load)) {
            best = i;
            best_load = load;
            best_cool = cool;
            best_u = us;
        }
    }
    if (best >= 0 && ms) ms->cursor = (size_t)(best + 1) % (size_t)n;
    if (picked) *picked = best_u;
    return best;
}

/* ---- answering a request ------------------------------------------------------- */

static void req_unlink(fast_req *fr) {
    fast *ft = fr->ft;
    if (fr->prev) fr->prev->next = fr->next;
    else ft->live = fr->next;
    if (fr->next) fr->next->prev = fr->prev;
}

static void count_status(mstate *ms, int status) {
    for (int i = 0; i < ms->nstatus; i++)
        if (ms->statuses[i].status == status) {
            ms->statuses[i].n++;
            return;
        }
    void *p = realloc(ms->statuses, (size_t)(ms->nstatus + 1) * sizeof *ms->statuses);
    if (!p) return;
    ms->statuses = p;
    ms->statuses[ms->nstatus].status = status;
    ms->statuses[ms->nstatus].n = 1;
    ms->nstatus++;
}

/* Milliseconds as the Lua router logs them: floor(s * 1e5 + 0.5) / 100, a float
   written as Lua's tostring writes one ("%.14g", and ".0" when it looks whole):
   "0.08", "12.5", "3.0". Done with integers, for s from 0 to years. */
static void log_ms(char *out, size_t n, double s) {
    long long c = (long long)floor(s * 100000 + 0.5); /* hundredths of a millisecond */
    if (c < 0) c = 0;
    long long whole = c / 100, frac = c % 100;
    if (frac == 0) snprintf(out, n, "%lld.0", whole);
    else if (frac % 10 == 0) snprintf(out, n, "%lld.%lld", whole, frac / 10);
    else snprintf(out, n, "%lld.%02lld", whole, frac);
}

static void fast_done(response *r, const obleth_proxy_result *res, void *arg) {
    fast_req *fr = arg;
    fast *ft = fr->ft;
    (void)r;
    fr->us->inflight--;
    fr->ms->inflight--;
    req_unlink(fr);
    if (res->status == 0) {
        /* nothing reached the client: the Lua router takes it from here */
        ft->handed_back++;
        obleth_http_prior prior = {fr->url, res->code, res->message, fr->t0};
        obleth_http_run_handler(fr->handler_ref, &fr->r, &prior);
        free(fr); /* url, path and target live in its block */
        return;
    }
    mstate *ms = fr->ms;
    count_status(ms, res->status);
    int b = 0;
    while (b < ft->nbuckets && !(res->ttfb <= ft->bounds[b])) b++;
    ms->buckets[b]++;
    ms->sum += res->ttfb;
    ms->count++;
    const char *model = ms->e.key;
    if (res->code && strcmp(res->code, "upstream_broke") == 0) {
        static const char *const k[] = {"endpoint", "error", "model"};
        const char *v[] = {fr->url, res->message, model};
        obleth_log_fields("warn", "router_upstream_broke", 3, k, v);
    }
    char ms_s[32], status_s[16];
    log_ms(ms_s, sizeof ms_s, now_mono() - fr->t0);
    snprintf(status_s, sizeof status_s, "%d", res->status);
    static const char *const k[] = {"method", "model", "ms", "path", "status", "upstream"};
    const char *v[] = {"POST", model, ms_s, fr->path, status_s, fr->url};
    obleth_log_fields("info", "http_request", 6, k, v);
    free(fr);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

/* The token of "Bearer <token>" (Lua's ^[Bb]earer%s+(%S+)%s*$), or NULL. */
static const char *bearer(const char *h, size_t *n) {
    if (!h || (h[0] != 'B' && h[0] != 'b') || strncmp(h + 1, "earer", 5) != 0 || !is_space(h[6])) return NULL;
    const char *p = h + 6;
    while (is_space(*p)) p++;
    const char *tok = p;
    while (*p && !is_space(*p)) p++;
    *n = (size_t)(p - tok);
    while (is_space(*p)) p++;
    return *n && !*p ? tok : NULL;
}

static const char *ep_url(int i, void *ctx) { return ((fmodel *)ctx)->ep[i].url; }

int obleth_fast_try(struct obleth_fast *ft, struct evhttp_request *req, int handler_ref) {
    if (!ft->enabled || ft->models.n == 0 || evhttp_request_get_command(req) != EVHTTP_REQ_POST) return 0;
    double now = now_mono();
    if (now - ft->filled_at > ft->ttl) return 0;
    /* a canonical /v1/ path, decided as server.canonical_path's quick test does */
    const char *uri = evhttp_request_get_uri(req);
    if (!uri || strncmp(uri, "/v1/", 4) != 0) return 0;
    const char *p = uri;
    for (; *p && *p != '?'; p++)
        if (*p == '%' || *p == '.' || *p == '\\' || (*p == '/' && p[1] == '/')) return 0;
    size_t path_len = (size_t)(p - uri);
    /* the headers the router reads; one given twice is joined by the Lua path: leave it that */
    const char *auth = NULL, *ctype = NULL;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    for (struct evkeyval *h = in->tqh_first; h; h = h->next.tqe_next) {
        if (strcasecmp(h->key, "authorization") == 0) {
            if (auth) return 0;
            auth = h->value;
        } else if (strcasecmp(h->key, "content-type") == 0) {
            if (ctype) return 0;
            ctype = h->value;
        }
    }
    if (!ft->keyless) {
        size_t tl = 0;
        const char *tok = bearer(auth, &tl);
        if (!tok || !smap_get(&ft->keys, tok, tl)) return 0;
    }
    if (ctype && strstr(ctype, "multipart/form-data")) return 0;
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(body);
    if (n == 0) return 0;
    const char *text = (const char *)evbuffer_pullup(body, -1);
    size_t i = 0;
    while (i < n && is_space(text[i])) i++;
    if (i == n || text[i] != '{') return 0;
    const char *name;
    size_t nl;
    int stream;
    if (!obleth_jsonscan_model(text, n, &name, &nl, &stream)) return 0;
    fmodel *m = (fmodel *)smap_get(&ft->models, name, nl);
    if (!m) return 0;
    ustate *us = NULL;
    int at = pick(ft, m->ms, m->n, ep_url, NULL, m, now, &us);
    if (at < 0) return 0;
    fendpoint *ep = &m->ep[at];
    if (!us && !(us = url_state(ft, ep->url, strlen(ep->url), 1))) return 0;
    /* one block: the request's state, then copies of the endpoint's URL (the table may
       be cleared meanwhile), the path, and the target when the endpoint has a prefix */
    size_t ul = strlen(ep->url) + 1, pl = strlen(ep->prefix), tl = pl ? pl + strlen(uri) + 1 : 0;
    fast_req *fr = calloc(1, sizeof *fr + ul + path_len + 1 + tl);
    if (!fr) return 0;
    fr->url = (char *)(fr + 1);
    memcpy(fr->url, ep->url, ul);
    fr->path = fr->url + ul;
    memcpy(fr->path, uri, path_len);
    fr->path[path_len] = '\0';
    char *target = NULL;
    if (pl) {
        target = fr->path + path_len + 1;
        snprintf(target, tl, "%s%s", ep->prefix, uri);
    }
    fr->ft = ft;
    fr->ms = m->ms;
    fr->us = us;
    fr->handler_ref = handler_ref;
    fr->t0 = now;
    fr->r.req = req;
    fr->r.w.ref = LUA_NOREF;
    obleth_proxy_opts o = ft->popts;
    o.host = ep->host;
    o.port = ep->port;
    o.target = target;
    o.stream = stream;
    us->inflight++;
    fr->ms->inflight++;
    ft->taken++;
    fr->next = ft->live;
    if (ft->live) ft->live->prev = fr;
    ft->live = fr;
    obleth_http_watch_close(&fr->r);
    const char *why = NULL;
    struct proxy_op *op = obleth_proxy_start(&fr->r, &o, fast_done, fr, &why);
    if (!op) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot resolve %s: %s", ep->host, why ? why : "unknown error");
        obleth_proxy_result res = {0, "unreachable", msg, 0};
        fast_done(&fr->r, &res, fr);
    }
    return 1;
}

/* ---- Lua API ------------------------------------------------------------------- */

static fast *check_fast(lua_State *L) { return luaL_checkudata(L, 1, FAST_MT); }

static int l_fast(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    fast *ft = lua_newuserdatauv(L, sizeof *ft, 0);
    memset(ft, 0, sizeof *ft);
    luaL_setmetatable(L, FAST_MT);
    ft->popts.connect_timeout = obleth_http_opt_number(L, 1, "connect_timeout", 5, 0.001, 1e6, "fast");
    ft->popts.timeout = obleth_http_opt_number(L, 1, "timeout", 3600, 0.001, 1e7, "fast");
    ft->popts.buffer_limit = (size_t)obleth_http_opt_number(L, 1, "buffer_limit", 1048576, 0, 1 << 30, "fast");
    ft->ttl = obleth_http_opt_number(L, 1, "ttl", 2, 0, 1e6, "fast");
    ft->cooldown = obleth_http_opt_number(L, 1, "cooldown", 5, 0, 1e6, "fast");
    if (lua_getfield(L, 1, "buckets") == LUA_TTABLE) {
        int nb = (int)luaL_len(L, -1);
        luaL_argcheck(L, nb <= MAX_BUCKETS, 1, "fast: at most 64 buckets");
        for (int i = 0; i < nb; i++) {
            lua_geti(L, -1, i + 1);
            ft->bounds[i] = lua_tonumber(L, -1);
            lua_pop(L, 1);
            luaL_argcheck(L, i == 0 || ft->bounds[i] > ft->bounds[i - 1], 1, "fast: buckets must ascend");
        }
        ft->nbuckets = nb;
    }
    lua_pop(L, 1);
    ft->enabled = 1;
    ft->filled_at = now_mono();
    return 1;
}

static void clear_learned(fast *ft) {
    smap_filter(&ft->keys, drop_key, NULL);
    smap_filter(&ft->models, drop_model, NULL);
    double now = now_mono();
    smap_filter(&ft->urls, drop_idle_url, &now);
    ft->keyless = 0;
    ft->filled_at = now;
}

static int f_clear(lua_State *L) {
    clear_learned(check_fast(L));
    return 0;
}

static int f_enable(lua_State *L) {
    check_fast(L)->enabled = lua_toboolean(L, 2);
    return 0;
}

static int f_keyless(lua_State *L) {
    check_fast(L)->keyless = lua_toboolean(L, 2);
    return 0;
}

static int f_add_key(lua_State *L) {
    fast *ft = check_fast(L);
    size_t n;
    const char *k = luaL_checklstring(L, 2, &n);
    if (smap_get(&ft->keys, k, n)) return 0;
    if (ft->keys.n >= MAX_KEYS) smap_filter(&ft->keys, drop_key, NULL);
    if (!smap_intern(&ft->keys, k, n, sizeof(sentry))) return luaL_error(L, "out of memory");
    return 0;
}

static char *field_str(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    const char *s = lua_tostring(L, -1);
    char *c = s ? strdup(s) : NULL;
    lua_pop(L, 1);
    return c;
}

static int f_set_model(lua_State *L) {
    fast *ft = check_fast(L);
    size_t nl, cl;
    const char *name = luaL_checklstring(L, 2, &nl);
    const char *canon = luaL_checklstring(L, 3, &cl);
    luaL_checktype(L, 4, LUA_TTABLE);
    int n = (int)luaL_len(L, 4);
    luaL_argcheck(L, n >= 1 && n <= MAX_ENDPOINTS, 4, "1 to 256 endpoints");
    fmodel *m = calloc(1, sizeof *m + (size_t)n * sizeof(fendpoint));
    if (!m) return luaL_error(L, "out of memory");
    for (int i = 0; i < n; i++) {
        lua_geti(L, 4, i + 1);
        if (!lua_istable(L, -1)) {
            drop_model(&m->e, NULL);
            return luaL_argerror(L, 4, "each endpoint is {url=, host=, port=, prefix=}");
        }
        fendpoint *e = &m->ep[i];
        m->n = i + 1;
        e->url = field_str(L, -1, "url");
        e->host = field_str(L, -1, "host");
        e->prefix = field_str(L, -1, "prefix");
        if (!e->prefix) e->prefix = strdup("");
        lua_getfield(L, -1, "port");
        lua_Integer port = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        lua_pop(L, 2);
        e->port = (int)port;
        if (!e->url || !e->host || !e->prefix || port < 1 || port > 65535 || !*e->host || strlen(e->host) > 253 ||
            strpbrk(e->host, " \t\r\n/?#@") || (*e->prefix && (e->prefix[0] != '/' ||
                                                               !obleth_http_target_ok(e->prefix)))) {
            drop_model(&m->e, NULL);
            return luaL_argerror(L, 4, "each endpoint is {url=, host=, port=1..65535, prefix=\"/...\"|\"\"}");
        }
    }
    if (set_key(&m->e, name, nl) != 0 || !(m->ms = model_state(ft, canon, cl))) {
        drop_model(&m->e, NULL);
        return luaL_error(L, "out of memory");
    }
    sentry *old = smap_get(&ft->models, name, nl);
    if (old) smap_filter(&ft->models, drop_model_if, old); /* replaced */
    if (smap_put(&ft->models, &m->e) != 0) {
        drop_model(&m->e, NULL);
        return luaL_error(L, "out of memory");
    }
    return 0;
}

/* ---- the balancer, for the Lua path ---- */

typedef struct {
    lua_State *L;
    int urls, exclude; /* stack indexes; exclude 0 when none */
} lua_list;

static const char *list_url(int i, void *ctx) {
    lua_list *l = ctx;
    lua_geti(l->L, l->urls, i + 1);
    const char *u = lua_tostring(l->L, -1); /* stays anchored in the list */
    lua_pop(l->L, 1);
    return u ? u : "";
}

static int list_excluded(int i, void *ctx) {
    lua_list *l = ctx;
    if (!l->exclude) return 0;
    lua_geti(l->L, l->urls, i + 1);
    int ex = lua_gettable(l->L, l->exclude) != LUA_TNIL;
    ex = ex && lua_toboolean(l->L, -1);
    lua_pop(l->L, 1);
    return ex;
}

static int f_pick(lua_State *L) {
    fast *ft = check_fast(L);
    size_t ml;
    const char *model = luaL_checklstring(L, 2, &ml);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_list l = {L, 3, lua_istable(L, 4) ? 4 : 0};
    double now = luaL_optnumber(L, 5, 0);
    int n = (int)luaL_len(L, 3);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, 3, i);
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_argerror(L, 3, "a list of endpoint URLs");
        lua_pop(L, 1);
    }
    mstate *ms = model_state(ft, model, ml);
    if (!ms) return luaL_error(L, "out of memory");
    int at = pick(ft, ms, n, list_url, list_excluded, &l, now, NULL);
    if (at < 0) lua_pushnil(L);
    else lua_geti(L, 3, at + 1);
    return 1;
}

/* The endpoint URL at argument 2 and its state (made when create is set); raises
   when memory ran out. */
static ustate *url_arg(lua_State *L, fast **ftp, int create) {
    fast *ft = *ftp = check_fast(L);
    size_t n;
    const char *url = luaL_checklstring(L, 2, &n);
    ustate *u = url_state(ft, url, n, create);
    if (create && !u) luaL_error(L, "out of memory");
    return u;
}

static int f_acquire(lua_State *L) {
    fast *ft;
    url_arg(L, &ft, 1)->inflight++;
    return 0;
}

static int f_release(lua_State *L) {
    fast *ft;
    ustate *u = url_arg(L, &ft, 0);
    if (u && u->inflight > 0) u->inflight--;
    return 0;
}

static int f_failed(lua_State *L) {
    fast *ft;
    ustate *u = url_arg(L, &ft, 1);
    u->down_until = luaL_optnumber(L, 3, 0) + ft->cooldown;
    return 0;
}

static int f_load(lua_State *L) {
    fast *ft;
    ustate *u = url_arg(L, &ft, 0);
    lua_pushinteger(L, u ? u->inflight : 0);
    return 1;
}

/* ---- what the fast path counted ---- */

static int f_drain(lua_State *L) {
    fast *ft = check_fast(L);
    lua_newtable(L);
    for (size_t i = 0; i < ft->mstates.nb; i++)
        for (sentry *e = ft->mstates.b[i]; e; e = e->next) {
            mstate *ms = (mstate *)e;
            if (ms->count == 0 && ms->nstatus == 0) continue;
            lua_createtable(L, 0, 4);
            lua_createtable(L, 0, ms->nstatus);
            for (int k = 0; k < ms->nstatus; k++) {
                lua_pushinteger(L, ms->statuses[k].n);
                lua_rawseti(L, -2, ms->statuses[k].status);
            }
            lua_setfield(L, -2, "statuses");
            lua_createtable(L, ft->nbuckets + 1, 0);
            for (int k = 0; k <= ft->nbuckets; k++) {
                lua_pushinteger(L, ms->buckets[k]);
                lua_rawseti(L, -2, k + 1);
            }
            lua_setfield(L, -2, "buckets");
            lua_pushnumber(L, ms->sum);
            lua_setfield(L, -2, "sum");
            lua_pushinteger(L, ms->count);
            lua_setfield(L, -2, "count");
            lua_setfield(L, -2, e->key);
            free(ms->statuses);
            ms->statuses = NULL;
            ms->nstatus = 0;
            memset(ms->buckets, 0, sizeof ms->buckets);
            ms->count = 0;
            ms->sum = 0;
        }
    return 1;
}

static int f_in_flight(lua_State *L) {
    fast *ft = check_fast(L);
    lua_Integer total = 0;
    lua_newtable(L);
    for (size_t i = 0; i < ft->mstates.nb; i++)
        for (sentry *e = ft->mstates.b[i]; e; e = e->next) {
            mstate *ms = (mstate *)e;
            if (ms->inflight <= 0) continue;
            total += ms->inflight;
            lua_pushinteger(L, ms->inflight);
            lua_setfield(L, -2, e->key);
        }
    lua_pushinteger(L, total);
    return 2;
}

static int f_stats(lua_State *L) {
    fast *ft = check_fast(L);
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, ft->taken);
    lua_setfield(L, -2, "requests");
    lua_pushinteger(L, ft->handed_back);
    lua_setfield(L, -2, "handed_back");
    return 1;
}

/* At collection (the server that used it is closed, or the state is): requests
   still in flight are dropped without an answer, as res objects are. */
static int f_gc(lua_State *L) {
    fast *ft = check_fast(L);
    while (ft->live) {
        fast_req *fr = ft->live;
        req_unlink(fr);
        if (fr->r.proxy) obleth_proxy_abandon(fr->r.proxy);
        obleth_http_detach_close_cb(&fr->r);
        free(fr);
    }
    smap_filter(&ft->keys, drop_key, NULL);
    smap_filter(&ft->models, drop_model, NULL);
    smap_filter(&ft->urls, drop_url, NULL);
    smap_filter(&ft->mstates, drop_mstate, NULL);
    free(ft->keys.b);
    free(ft->models.b);
    free(ft->urls.b);
    free(ft->mstates.b);
    memset(ft, 0, sizeof *ft);
    return 0;
}

void obleth_http_fast_open(lua_State *L) {
    /* stack: the obleth.http module table */
    static const luaL_Reg m[] = {{"enable", f_enable},   {"clear", f_clear},       {"keyless", f_keyless},
                                 {"add_key", f_add_key}, {"set_model", f_set_model}, {"pick", f_pick},
                                 {"acquire", f_acquire}, {"release", f_release},   {"failed", f_failed},
                                 {"load", f_load},       {"drain", f_drain},       {"in_flight", f_in_flight},
                                 {"stats", f_stats},     {NULL, NULL}};
    obleth_newclass(L, FAST_MT, m, f_gc, NULL);
    lua_pushcfunction(L, l_fast);
    lua_setfield(L, -2, "fast");
}

struct obleth_fast *obleth_fast_check(lua_State *L, int idx) { return luaL_testudata(L, idx, FAST_MT); }
