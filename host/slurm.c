/*
 * slurm.c — the slurmrestd transport (obleth.slurm.rest): JWT auth, HTTP(S)
 * or unix socket, API version negotiation, error codes. The per-version
 * response shapes are mapped by lua/obleth/slurm/normalize.lua; the calls
 * users make (ping, jobs, submit, ...) are in lua/obleth/slurm/init.lua.
 *
 *   rest.connect{url = "http://host:6820" | socket = "/run/slurmrestd.sock",
 *                user = "name", token = "JWT", version = "auto" | "v0.0.38",
 *                token_expires_at = epoch seconds (the JWT's exp, decoded by obleth.slurm.jwt;
 *                a token past it fails at once with expired = true),
 *                timeout = 10 (seconds), ca_file = path, verify = true}
 *     -> conn | nil, err        (yields: discovers the server's versions)
 *   conn:call(method, path, body?)   path may hold "{v}" for the version
 *     -> status, doc|nil, raw_body | nil, err
 *        doc is the decoded JSON body (nil when the body is not JSON)
 *   conn:call_raw(method, path, body?)  as call, but a 2xx body is not decoded:
 *     -> status, nil, raw_body | status, doc|nil, raw_body (not 2xx) | nil, err
 *   conn:version()  -> "v0.0.38";  conn:versions() -> array the server serves
 *   conn:has_slurmdb() -> boolean (accounting paths are served)
 *   conn:set_token(jwt, expires_at?); conn:info() -> {url=, socket=, user=, version=}
 *   rest.known_versions -> {"v0.0.46", ..., "v0.0.38"} (newest first; a copy of
 *                          obleth.slurm.versions.known, read when this module loads)
 *
 * err = {code = "unreachable"|"timeout"|"auth"|"bad_response"|"unsupported",
 *        message = "...", http_status = n?, expired = true?}
 * A token is never part of a message. Discovery: GET /openapi/v3 and read
 * the /slurm/vX/ paths (Slurm's rest_api.shtml), then ping the newest listed: a
 * version that answers a text 404 is dropped and the next listed is tried; if
 * that document is not served, probe GET /slurm/vX/ping newest first. What
 * discovery found is kept per server while the release it reports (ping's
 * meta) stays the same: a later connect pings once instead of reading the
 * 2 MB document again. A call whose versioned path answers 404 triggers one
 * new discovery (the site upgraded) and one retry. 25.11's HTTP 500
 * "Authentication does not apply to request" (text) is an auth error.
 * Auth: X-SLURM-USER-NAME / X-SLURM-USER-TOKEN headers (rest_auth/jwt).
 */
#define _POSIX_C_SOURCE 200809L
#include "host.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONN_MT "obleth.slurm.conn"

/* The API versions obleth knows, newest first, as lua/obleth/slurm/versions.lua
   lists them (the one list): read when this module loads, NULL-terminated. */
#define MAX_KNOWN 32
static char known_store[MAX_KNOWN][16];
static const char *known[MAX_KNOWN + 1];

/* "v0.0.38 to v0.0.46": the oldest and newest of known[]. */
static void push_known_range(lua_State *L) {
    int n = 0;
    while (known[n]) n++;
    if (n == 0) { lua_pushliteral(L, "none"); return; }
    lua_pushfstring(L, "%s to %s", known[n - 1], known[0]);
}

/* Fill known[] from the array at idx; raises on a malformed entry. */
static void load_known(lua_State *L, int idx) {
    lua_Integer n = luaL_len(L, idx);
    if (n < 1 || n > MAX_KNOWN) luaL_error(L, "obleth.slurm.versions: known must list 1 to %d versions", MAX_KNOWN);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        size_t len;
        const char *v = lua_tolstring(L, -1, &len);
        if (!v || len >= sizeof known_store[0] || strncmp(v, "v0.0.", 5) != 0)
            luaL_error(L, "obleth.slurm.versions: entry %d is not an API version like \"v0.0.45\"", (int)i);
        memcpy(known_store[i - 1], v, len + 1);
        known[i - 1] = known_store[i - 1];
        lua_pop(L, 1);
    }
    known[n] = NULL;
}

typedef struct {
    int closed;
    double timeout;
    int verify;
    char version[16];
    int has_slurmdb; /* 1: /openapi/v3 lists /slurmdb/ paths, 0: it does not, -1: not read (probed) */
} conn;

/* uservalue 1: table {url=, socket=, user=, token=, ca_file=, versions={}} */

static conn *check_conn(lua_State *L, int i) {
    conn *c = luaL_checkudata(L, i, CONN_MT);
    if (c->closed) luaL_error(L, "slurm connection is closed");
    return c;
}

static void push_err(lua_State *L, const char *code, const char *msg, int http_status) {
    lua_pushnil(L);
    obleth_error_push(L, NULL, code, msg, msg ? strlen(msg) : 0, NULL);
    if (http_status) {
        lua_pushinteger(L, http_status);
        lua_setfield(L, -2, "http_status");
    }
}

/* When the token of the connection at conn_idx expired (its token_expires_at, which
   obleth.slurm reads from the JWT's exp claim and hands over with the token, is in the past), push
   nil, {code = "auth", expired = true, message} and return 1 (the caller
   returns 2); else leave the stack as it was and return 0. */
static int push_if_expired(lua_State *L, int conn_idx) {
    int top = lua_gettop(L);
    lua_getiuservalue(L, conn_idx, 1);
    lua_getfield(L, -1, "token_expires_at"); /* decoded in Lua, once: obleth.slurm.jwt */
    int isnum = 0;
    long long exp = (long long)lua_tointegerx(L, -1, &isnum);
    if (!isnum) exp = -1;
    lua_settop(L, top);
    long long now = (long long)time(NULL);
    if (exp <= 0 || exp > now) return 0;
    char msg[200];
    snprintf(msg, sizeof msg, "the JWT expired %lld s ago; mint a new one (scontrol token)", now - exp);
    push_err(L, "auth", msg, 0);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "expired");
    return 1;
}

/* ---- the request through obleth.http ------------------------------------------ */

/* Push http.request and its options table for method/path/body. */
static void push_request(lua_State *L, int conn_idx, const char *method, const char *path,
                         const char *body, size_t bodylen) {
    conn *c = lua_touserdata(L, conn_idx);
    lua_getfield(L, LUA_REGISTRYINDEX, "obleth.slurm.http_request");
    lua_getiuservalue(L, conn_idx, 1);
    int uv = lua_gettop(L);
    lua_createtable(L, 0, 8);
    /* url = base .. path with {v} replaced */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_getfield(L, uv, "url");
    luaL_addvalue(&b);
    const char *v = strstr(path, "{v}");
    if (v) {
        luaL_addlstring(&b, path, (size_t)(v - path));
        luaL_addstring(&b, c->version);
        luaL_addstring(&b, v + 3);
    } else {
        luaL_addstring(&b, path);
    }
    luaL_pushresult(&b);
    lua_setfield(L, -2, "url");
    lua_pushstring(L, method);
    lua_setfield(L, -2, "method");
    lua_pushnumber(L, c->timeout);
    lua_setfield(L, -2, "timeout");
    lua_pushnumber(L, c->timeout < 5 ? c->timeout : 5);
    lua_setfield(L, -2, "connect_timeout");
    lua_pushboolean(L, c->verify);
    lua_setfield(L, -2, "verify");
    lua_getfield(L, uv, "socket");
    lua_setfield(L, -2, "unix_socket");
    lua_getfield(L, uv, "ca_file");
    lua_setfield(L, -2, "ca_file");
    if (body) {
        lua_pushlstring(L, body, bodylen);
        lua_setfield(L, -2, "body");
    }
    lua_createtable(L, 0, 4);
    lua_getfield(L, uv, "user");
    if (!lua_isnil(L, -1)) lua_setfield(L, -2, "X-SLURM-USER-NAME"); else lua_pop(L, 1);
    lua_getfield(L, uv, "token");
    if (!lua_isnil(L, -1)) lua_setfield(L, -2, "X-SLURM-USER-TOKEN"); else lua_pop(L, 1);
    lua_pushliteral(L, "application/json");
    lua_setfield(L, -2, "Accept");
    if (body) {
        lua_pushliteral(L, "application/json");
        lua_setfield(L, -2, "Content-Type");
    }
    lua_setfield(L, -2, "headers");
    lua_remove(L, uv);
    /* stack: http.request, opts */
}

/* Decode JSON with cjson (registry "obleth.slurm.json_decode"); pushes the
   value or nil. */
static void push_json(lua_State *L, int raw_idx) {
    lua_getfield(L, LUA_REGISTRYINDEX, "obleth.slurm.json_decode");
    lua_pushvalue(L, raw_idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
}

/* After http.request returned (r, err) at the top: on success leaves
   status, raw and returns status; on failure pushes nil, err and returns -1. */
static int transport_result(lua_State *L) {
    if (lua_isnil(L, -2)) {
        /* err = {code, message} from obleth.http */
        lua_getfield(L, -1, "code");
        const char *code = lua_tostring(L, -1);
        lua_getfield(L, -2, "message");
        const char *m = lua_tostring(L, -1);
        const char *kind = (code && strcmp(code, "timeout") == 0) ? "timeout" : "unreachable";
        char msg[600];
        snprintf(msg, sizeof msg, "slurmrestd %s: %s", strcmp(kind, "timeout") == 0 ? "did not answer in time" : "is unreachable",
                 m ? m : "?");
        lua_pop(L, 4);
        push_err(L, kind, msg, 0);
        return -1;
    }
    lua_pop(L, 1); /* the nil err */
    lua_getfield(L, -1, "status");
    int status = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, -1, "body");
    lua_remove(L, -2);
    lua_pushinteger(L, status);
    lua_insert(L, -2);
    /* stack: status, raw */
    return status;
}

static int is_auth_status(int status) { return status == 401 || status == 403 || status == 511; }

/* Slurm 22.05 answers a token slurmctld rejects (malformed, signed with
   another key, expired) with HTTP 500 and an error whose number is -1
   ("Unspecified error": SLURM_ERROR from the auth/jwt plugin, seen as
   "slurmctld config is unable to load", "Failed while looking for jobs", or
   a bare {"error": "Unspecified error", "errno": -1}); slurmdbd paths say
   error 1007 "Protocol authentication error". Returns 1 when every error of
   the decoded body at idx has that signature. */
static int is_auth_failure_doc(lua_State *L, int idx) {
    if (!lua_istable(L, idx)) return 0;
    int n_err = 0, n_auth = 0;
    lua_getfield(L, idx, "errors");
    if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            if (lua_istable(L, -1)) {
                n_err++;
                lua_getfield(L, -1, "error_number");
                if (lua_isnil(L, -1)) { lua_pop(L, 1); lua_getfield(L, -1, "errno"); }
                lua_Number num = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
                lua_getfield(L, -2, "error");
                const char *m = lua_tostring(L, -1);
                /* slurmdbd refusing the token (24.11: HTTP 502, error 7000 "Unable to connect to
                   database", description "Failed to open slurmdbd connection, authentication error") */
                lua_getfield(L, -3, "description");
                const char *d = lua_tostring(L, -1);
                if ((num == -1 && m && strcmp(m, "Unspecified error") == 0) || num == 1007 ||
                    (m && (strstr(m, "Authentication failure") || strstr(m, "Protocol authentication error"))) ||
                    (num == 7000 && d && strstr(d, "authentication error")))
                    n_auth++;
                lua_pop(L, 3);
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n_err > 0 && n_auth == n_err;
}

/* ---- discovery ------------------------------------------------------------------ */

/* Record the versions named by an OpenAPI document's /slurm/vX/ paths.
   Returns the number of known versions found. */
static int versions_from_openapi(lua_State *L, int conn_idx, int doc_idx) {
    conn *c = lua_touserdata(L, conn_idx);
    int found[MAX_KNOWN] = {0};
    int has_db = 0;
    lua_getfield(L, doc_idx, "paths");
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pop(L, 1);
            if (lua_type(L, -1) != LUA_TSTRING) continue;
            const char *k = lua_tostring(L, -1);
            for (int i = 0; known[i]; i++) {
                char pre[32], predb[32];
                snprintf(pre, sizeof pre, "/slurm/%s/", known[i]);
                snprintf(predb, sizeof predb, "/slurmdb/%s/", known[i]);
                if (strncmp(k, pre, strlen(pre)) == 0) found[i] = 1;
                if (strncmp(k, predb, strlen(predb)) == 0) has_db = 1;
            }
        }
    }
    lua_pop(L, 1);
    lua_getiuservalue(L, conn_idx, 1);
    lua_newtable(L);
    int n = 0;
    for (int i = 0; known[i]; i++) {
        if (!found[i]) continue;
        lua_pushstring(L, known[i]);
        lua_rawseti(L, -2, ++n);
    }
    lua_setfield(L, -2, "versions");
    lua_pop(L, 1);
    c->has_slurmdb = has_db;
    return n;
}

/* Choose the newest version both sides know (versions[1]); with a pinned
   version, check it is served. Returns 1 on success. */
static int choose_version(lua_State *L, int conn_idx) {
    conn *c = lua_touserdata(L, conn_idx);
    lua_getiuservalue(L, conn_idx, 1);
    lua_getfield(L, -1, "pinned");
    const char *pinned = lua_tostring(L, -1);
    lua_getfield(L, -2, "versions");
    int ok = 0;
    lua_Integer n = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        const char *v = lua_tostring(L, -1);
        if (v && (!pinned || strcmp(pinned, v) == 0)) {
            snprintf(c->version, sizeof c->version, "%s", v);
            ok = 1;
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 3);
    return ok;
}

/* 25.11 answers a request without usable credentials with HTTP 500, text/plain
   "Authentication does not apply to request" (no JSON errors to read). */
static int is_auth_text(lua_State *L, int status, int raw_idx) {
    if (status < 500) return 0;
    const char *raw = lua_tostring(L, raw_idx);
    return raw && strstr(raw, "Authentication does not apply to request") != NULL;
}

/* A refusal of the credentials (by status, or by the text slurmrestd answers a request without them
   with): the stack is cut to its first `keep` slots and the error {code = "auth"} pushed above them
   (the caller returns nil, err); returns 1. Else 0, the stack as it was. */
static int refused_auth(lua_State *L, int status, int raw, int keep) {
    if (!is_auth_status(status) && !is_auth_text(L, status, raw)) return 0;
    lua_settop(L, keep);
    push_err(L, "auth", "slurmrestd refused the credentials (check the user name and JWT)", status);
    return 1;
}

/* Keep the release slurmrestd reports in a ping answer (meta.slurm.release;
   meta.Slurm.release on v0.0.38) in the connection's uservalue as "release". */
static void record_release(lua_State *L, int conn_idx, int doc_idx) {
    int top = lua_gettop(L);
    lua_getiuservalue(L, conn_idx, 1);
    int uv = lua_gettop(L);
    lua_pushnil(L);
    lua_setfield(L, uv, "release");
    if (lua_istable(L, doc_idx) && lua_getfield(L, doc_idx, "meta") == LUA_TTABLE) {
        if (lua_getfield(L, -1, "slurm") != LUA_TTABLE) {
            lua_pop(L, 1);
            lua_getfield(L, -1, "Slurm");
        }
        if (lua_istable(L, -1) && lua_getfield(L, -1, "release") == LUA_TSTRING) lua_setfield(L, uv, "release");
    }
    lua_settop(L, top);
}

/* The discovery cache (registry "obleth.slurm.discovered"): per server ("url|socket"),
   {versions, has_db, release}. /openapi/v3 is 2 MB on 25.11: a connect to a known
   server pings the version it chose and reuses the list while the release is the same. */
static void push_cache_key(lua_State *L, int conn_idx) {
    lua_getiuservalue(L, conn_idx, 1);
    lua_getfield(L, -1, "url");
    lua_pushliteral(L, "|");
    lua_getfield(L, -3, "socket");
    if (lua_isnil(L, -1)) { lua_pop(L, 1); lua_pushliteral(L, ""); }
    lua_concat(L, 3);
    lua_remove(L, -2);
}

static void push_cache(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "obleth.slurm.discovered") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "obleth.slurm.discovered");
    }
}

/* Store what discovery found (only with a known release: it is what says "unchanged"). */
static void cache_store(lua_State *L, int conn_idx) {
    conn *c = lua_touserdata(L, conn_idx);
    int top = lua_gettop(L);
    lua_getiuservalue(L, conn_idx, 1);
    int uv = lua_gettop(L);
    lua_getfield(L, uv, "release");
    if (lua_isstring(L, -1)) {
        push_cache(L);
        push_cache_key(L, conn_idx);
        lua_createtable(L, 0, 3);
        lua_getfield(L, uv, "versions");
        lua_setfield(L, -2, "versions");
        lua_pushinteger(L, c->has_slurmdb);
        lua_setfield(L, -2, "has_db");
        lua_pushvalue(L, uv + 1);
        lua_setfield(L, -2, "release");
        lua_settable(L, -3);
    }
    lua_settop(L, top);
}

static void cache_drop(lua_State *L, int conn_idx) {
    int top = lua_gettop(L);
    push_cache(L);
    push_cache_key(L, conn_idx);
    lua_pushnil(L);
    lua_settable(L, -3);
    lua_settop(L, top);
}

/* Load a cached entry into the connection: versions (a copy), has_slurmdb and
   uv.cached_release; writes the version to ping into out. Returns 1 when found. */
static int cache_load(lua_State *L, int conn_idx, char *out, size_t outsz) {
    conn *c = lua_touserdata(L, conn_idx);
    int top = lua_gettop(L), found = 0;
    push_cache(L);
    push_cache_key(L, conn_idx);
    if (lua_gettable(L, -2) == LUA_TTABLE) {
        int e = lua_gettop(L);
        lua_getiuservalue(L, conn_idx, 1);
        int uv = lua_gettop(L);
        lua_getfield(L, e, "versions");
        lua_Integer n = luaL_len(L, -1);
        lua_newtable(L);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -2, i);
            lua_rawseti(L, -2, i);
        }
        lua_setfield(L, uv, "versions");
        lua_getfield(L, e, "has_db");
        c->has_slurmdb = (int)lua_tointeger(L, -1);
        lua_getfield(L, e, "release");
        lua_setfield(L, uv, "cached_release");
        if (choose_version(L, conn_idx)) {
            snprintf(out, outsz, "%s", c->version);
            found = 1;
        }
    }
    lua_settop(L, top);
    return found;
}

/*
 * discover(conn, force) runs inside a C function with continuations; the state
 * lives in the ctx: phase in the low byte, an index above it.
 *   D_CACHED:  GET /slurm/<the cached choice>/ping; same release: done
 *   D_OPENAPI: GET /openapi/v3
 *   D_CHECK:   GET /slurm/<versions[i]>/ping; a text 404 drops that version
 *   D_PROBE:   GET /slurm/<known[i]>/ping (no /openapi/v3)
 */
enum { D_OPENAPI = 1, D_PROBE = 2, D_CHECK = 3, D_CACHED = 4 };

static int discover_k(lua_State *L, int status, lua_KContext ctx);

static int discover_send(lua_State *L, const char *path, int phase, int idx) {
    lua_settop(L, 1);
    push_request(L, 1, "GET", path, NULL, 0);
    lua_KContext k = (lua_KContext)(phase | (idx << 8));
    lua_callk(L, 1, 2, k, discover_k);
    return discover_k(L, LUA_OK, k);
}

static int discover_probe(lua_State *L, int idx) {
    char path[64];
    if (known[idx]) {
        /* probe only versions this side knows */
        snprintf(path, sizeof path, "/slurm/%s/ping", known[idx]);
        return discover_send(L, path, D_PROBE, idx);
    }
    lua_settop(L, 1);
    push_known_range(L);
    lua_pushfstring(L, "slurmrestd serves none of the API versions obleth knows (%s)", lua_tostring(L, -1));
    push_err(L, "unsupported", lua_tostring(L, -1), 0);
    lua_remove(L, -3);
    lua_remove(L, -3);
    return 2;
}

/* Check versions[idx] (1-based) of the list /openapi/v3 gave; a pinned version skips the others. */
static int discover_check(lua_State *L, int idx) {
    lua_settop(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, "pinned");
    const char *pinned = lua_tostring(L, -1);
    lua_getfield(L, -2, "versions");
    char path[64];
    path[0] = 0;
    for (lua_Integer n = luaL_len(L, -1); idx <= n; idx++) {
        lua_rawgeti(L, -1, idx);
        const char *v = lua_tostring(L, -1);
        if (v && (!pinned || strcmp(pinned, v) == 0)) {
            snprintf(path, sizeof path, "/slurm/%s/ping", v);
            break;
        }
        lua_pop(L, 1);
    }
    if (!path[0]) {
        lua_settop(L, 1);
        if (pinned) { /* connect_finish says the pinned version is not served */
            lua_pushboolean(L, 1);
            return 1;
        }
        push_err(L, "unsupported", "slurmrestd lists API versions in /openapi/v3 but answers none of them", 404);
        return 2;
    }
    return discover_send(L, path, D_CHECK, idx);
}

/* discovery result convention: returns 1 with true pushed on success, or 2
   with nil, err pushed. */
static int discover_k(lua_State *L, int st, lua_KContext ctx) {
    (void)st;
    int phase = (int)(ctx & 0xff);
    int idx = (int)(ctx >> 8);
    int status = transport_result(L);
    if (status < 0) return 2;
    int raw = lua_gettop(L);
    if (refused_auth(L, status, raw, 1)) return 2;
    if (phase == D_CACHED) {
        if (status == 200) {
            push_json(L, raw);
            record_release(L, 1, lua_gettop(L));
            lua_getiuservalue(L, 1, 1);
            lua_getfield(L, -1, "release");
            lua_getfield(L, -2, "cached_release");
            int same = lua_isstring(L, -2) && lua_compare(L, -1, -2, LUA_OPEQ);
            if (same) {
                lua_settop(L, 1);
                lua_pushboolean(L, 1);
                return 1;
            }
        }
        cache_drop(L, 1); /* another release (or no answer): discover afresh */
        return discover_send(L, "/openapi/v3", D_OPENAPI, 0);
    }
    if (phase == D_OPENAPI) {
        if (status == 200) {
            push_json(L, raw);
            if (lua_istable(L, -1) && versions_from_openapi(L, 1, lua_gettop(L)) > 0) return discover_check(L, 1);
        }
        return discover_probe(L, 0);
    }
    if (phase == D_CHECK) {
        push_json(L, raw);
        int json = lua_istable(L, -1);
        if (status == 404 && !json) {
            /* the version is listed but not served: drop it, check the next */
            lua_settop(L, 1);
            lua_getiuservalue(L, 1, 1);
            lua_getfield(L, -1, "versions");
            lua_Integer n = luaL_len(L, -1);
            for (lua_Integer i = idx; i < n; i++) {
                lua_rawgeti(L, -1, i + 1);
                lua_rawseti(L, -2, i);
            }
            lua_pushnil(L);
            lua_rawseti(L, -2, n);
            return discover_check(L, idx);
        }
        record_release(L, 1, lua_gettop(L));
        cache_store(L, 1);
        lua_settop(L, 1);
        lua_pushboolean(L, 1);
        return 1;
    }
    /* D_PROBE */
    if (status == 200) {
        push_json(L, raw);
        record_release(L, 1, lua_gettop(L));
        lua_settop(L, 1);
        lua_getiuservalue(L, 1, 1);
        lua_newtable(L);
        int n = 0;
        for (int i = idx; known[i]; i++) { /* assume older versions are served too */
            lua_pushstring(L, known[i]);
            lua_rawseti(L, -2, ++n);
        }
        lua_setfield(L, -2, "versions");
        lua_settop(L, 1);
        cache_store(L, 1);
        lua_pushboolean(L, 1);
        return 1;
    }
    return discover_probe(L, idx + 1);
}

static int discover(lua_State *L) {
    int force = lua_toboolean(L, 2);
    lua_settop(L, 1);
    char v[16];
    if (force) cache_drop(L, 1);
    else if (cache_load(L, 1, v, sizeof v)) {
        char path[64];
        snprintf(path, sizeof path, "/slurm/%s/ping", v);
        return discover_send(L, path, D_CACHED, 0);
    }
    return discover_send(L, "/openapi/v3", D_OPENAPI, 0);
}

/* ---- connect ------------------------------------------------------------------- */

static int connect_k(lua_State *L, int st, lua_KContext ctx);

static int connect_finish(lua_State *L, int nres) {
    /* results of discover at the top: true | nil, err */
    if (nres == 2) return 2;
    lua_pop(L, 1);
    if (!choose_version(L, 1)) {
        lua_getiuservalue(L, 1, 1);
        lua_getfield(L, -1, "pinned");
        char msg[200];
        snprintf(msg, sizeof msg, "slurmrestd does not serve the requested API version %s",
                 lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
        lua_pop(L, 2);
        push_err(L, "unsupported", msg, 0);
        return 2;
    }
    lua_pushvalue(L, 1);
    return 1;
}

static int connect_k(lua_State *L, int st, lua_KContext ctx) {
    (void)st;
    int base = (int)ctx;
    return connect_finish(L, lua_gettop(L) - base);
}

static int opt_str(lua_State *L, int t, const char *k, int uv, const char *as) {
    lua_getfield(L, t, k);
    if (lua_isnil(L, -1)) { lua_pop(L, 1); return 0; }
    if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "slurm.connect: '%s' must be a string", k);
    lua_setfield(L, uv, as ? as : k);
    return 1;
}

static int l_connect(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int opts = 1;
    conn *c = lua_newuserdatauv(L, sizeof *c, 1);
    memset(c, 0, sizeof *c);
    c->has_slurmdb = -1;
    c->timeout = 10;
    c->verify = 1;
    luaL_setmetatable(L, CONN_MT);
    lua_newtable(L);
    int uv = lua_gettop(L);
    int has_url = opt_str(L, opts, "url", uv, NULL);
    int has_sock = opt_str(L, opts, "socket", uv, NULL);
    opt_str(L, opts, "user", uv, NULL);
    opt_str(L, opts, "token", uv, NULL);
    lua_getfield(L, opts, "token_expires_at");
    if (lua_isinteger(L, -1)) lua_setfield(L, uv, "token_expires_at");
    else lua_pop(L, 1);
    opt_str(L, opts, "ca_file", uv, NULL);
    lua_getfield(L, opts, "timeout");
    if (!lua_isnil(L, -1)) {
        c->timeout = lua_tonumber(L, -1);
        if (!(c->timeout > 0)) return luaL_error(L, "slurm.connect: 'timeout' must be a number of seconds > 0");
    }
    lua_pop(L, 1);
    lua_getfield(L, opts, "verify");
    if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) c->verify = 0;
    lua_pop(L, 1);
    lua_getfield(L, opts, "version");
    const char *ver = lua_tostring(L, -1);
    if (ver && strcmp(ver, "auto") != 0) {
        int ok = 0;
        for (int i = 0; known[i]; i++) if (strcmp(known[i], ver) == 0) ok = 1;
        if (!ok) {
            lua_pop(L, 3);
            push_known_range(L);
            lua_pushfstring(L, "unknown API version %s (obleth knows %s, or \"auto\")", ver, lua_tostring(L, -1));
            push_err(L, "unsupported", lua_tostring(L, -1), 0);
            lua_remove(L, -3);
            lua_remove(L, -3);
            return 2;
        }
        lua_setfield(L, uv, "pinned");
    } else {
        lua_pop(L, 1);
    }
    if (has_url == has_sock) {
        lua_pop(L, 2);
        push_err(L, "unreachable", "slurm.connect needs exactly one of 'url' or 'socket'", 0);
        return 2;
    }
    if (has_sock) {
        lua_pushliteral(L, "http://localhost");
        lua_setfield(L, uv, "url");
    } else {
        lua_getfield(L, uv, "url");
        size_t n;
        const char *u = lua_tolstring(L, -1, &n);
        if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) {
            lua_pop(L, 3);
            push_err(L, "unreachable", "the slurmrestd URL must start with http:// or https://", 0);
            return 2;
        }
        while (n > 0 && u[n - 1] == '/') n--; /* no trailing slash */
        lua_pushlstring(L, u, n);
        lua_setfield(L, uv, "url");
        lua_pop(L, 1);
    }
    lua_setiuservalue(L, -2, 1);
    /* stack: opts, conn */
    lua_replace(L, 1);
    lua_settop(L, 1);
    if (push_if_expired(L, 1)) return 2;
    if (!lua_isyieldable(L))
        return luaL_error(L, "slurm.connect must be called inside a task (loop.spawn)");
    int base = lua_gettop(L);
    lua_pushcfunction(L, discover);
    lua_pushvalue(L, 1);
    /* run discovery as a nested call so its stack frame starts with the conn */
    lua_callk(L, 1, LUA_MULTRET, (lua_KContext)base, connect_k);
    return connect_k(L, LUA_OK, (lua_KContext)base);
}

/* ---- call ------------------------------------------------------------------------ */

enum { C_FIRST = 1, C_REDISCOVER = 2, C_RETRY = 3, C_PHASE = 0xF, C_RAW = 0x10 /* call_raw */ };

static int call_k(lua_State *L, int st, lua_KContext ctx);

static int call_send(lua_State *L, int phase) {
    size_t bl = 0;
    const char *body = lua_isnoneornil(L, 4) ? NULL : lua_tolstring(L, 4, &bl);
    push_request(L, 1, lua_tostring(L, 2), lua_tostring(L, 3), body, bl);
    lua_callk(L, 1, 2, phase, call_k);
    return call_k(L, LUA_OK, phase);
}

static int call_k(lua_State *L, int st, lua_KContext ctx) {
    (void)st;
    conn *c = lua_touserdata(L, 1);
    int phase = (int)ctx & C_PHASE, rawf = (int)ctx & C_RAW;
    if (phase == C_REDISCOVER) {
        /* discover returned true | nil, err; then retry with the new version */
        int ok = lua_toboolean(L, 5);
        lua_settop(L, 4);
        char before[16];
        snprintf(before, sizeof before, "%s", c->version);
        if (ok && choose_version(L, 1) && strcmp(before, c->version) != 0) {
            obleth_log("info", "slurm_version_renegotiated", "from=%s to=%s", before, c->version);
            return call_send(L, C_RETRY | rawf);
        }
        snprintf(c->version, sizeof c->version, "%s", before);
        push_err(L, "unsupported", "slurmrestd answered 404 for a versioned path and no other API version is served", 404);
        return 2;
    }
    int status = transport_result(L);
    if (status < 0) return 2;
    int raw = lua_gettop(L);
    if (refused_auth(L, status, raw, 4)) return 2;
    if (status == 404 && phase == C_FIRST && strstr(lua_tostring(L, 3), "{v}")) {
        /* a 404 with Slurm's JSON errors is an answer (job not found); a bare
           404 means the versioned path itself is gone */
        push_json(L, raw);
        int json = lua_istable(L, -1);
        lua_pop(L, 1);
        if (!json && strncmp(lua_tostring(L, 3), "/slurmdb/", 9) == 0 && c->has_slurmdb != 1) {
            /* accounting paths are not served while the /slurm/ ones are: slurmdbd
               accounting is not configured. No new discovery: it would read the
               2 MB /openapi/v3 again on every accounting call and blame the version. */
            lua_settop(L, 4);
            push_err(L, "no_accounting",
                     "slurmrestd serves no accounting (/slurmdb/) paths: Slurm accounting (slurmdbd, "
                     "AccountingStorageType=accounting_storage/slurmdbd) is not configured on this cluster",
                     404);
            return 2;
        }
        if (!json) {
            lua_settop(L, 4);
            lua_pushcfunction(L, discover);
            lua_pushvalue(L, 1);
            lua_pushboolean(L, 1); /* force: the cached list is what just failed */
            lua_callk(L, 2, 1, C_REDISCOVER | rawf, call_k);
            return call_k(L, LUA_OK, C_REDISCOVER | rawf);
        }
    }
    if (rawf && status >= 200 && status < 300) {
        /* call_raw: the caller reads the body itself (status, nil, raw) */
        lua_pushnil(L);
        lua_insert(L, raw);
        return 3;
    }
    push_json(L, raw);
    if (status >= 500 && is_auth_failure_doc(L, lua_gettop(L))) {
        int db = strncmp(lua_tostring(L, 3), "/slurmdb/", 9) == 0;
        lua_settop(L, 4);
        push_err(L, "auth", db ? "slurmdbd rejected the credentials (a bad, foreign or expired JWT)"
                               : "slurmctld rejected the credentials (a bad, foreign or expired JWT)", status);
        return 2;
    }
    if (lua_isnil(L, -1) && status >= 200 && status < 300) {
        lua_settop(L, 4);
        char msg[120];
        snprintf(msg, sizeof msg, "slurmrestd answered HTTP %d with a body that is not JSON", status);
        push_err(L, "bad_response", msg, status);
        return 2;
    }
    /* status, raw, doc -> status, doc, raw */
    lua_insert(L, raw);
    return 3;
}

/* conn, method, path [, body]: checked, then sent (flags: C_FIRST and the variant's). */
static int call_start(lua_State *L, int flags) {
    check_conn(L, 1);
    luaL_checkstring(L, 2);
    luaL_checkstring(L, 3);
    if (!lua_isnoneornil(L, 4)) luaL_checkstring(L, 4);
    lua_settop(L, 4);
    if (push_if_expired(L, 1)) return 2;
    return call_send(L, flags);
}

static int conn_call(lua_State *L) { return call_start(L, C_FIRST); }

/* conn:call_raw(method, path, body?): as call, but a 2xx answer's body is not decoded:
   status, nil, raw_body (the caller reads it, e.g. obleth.jsonscan.elements). */
static int conn_call_raw(lua_State *L) { return call_start(L, C_FIRST | C_RAW); }

static int conn_version(lua_State *L) {
    conn *c = check_conn(L, 1);
    lua_pushstring(L, c->version);
    return 1;
}

static int conn_versions(lua_State *L) {
    check_conn(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, "versions");
    return 1;
}

static int conn_has_slurmdb(lua_State *L) {
    conn *c = check_conn(L, 1);
    lua_pushboolean(L, c->has_slurmdb == 1);
    return 1;
}

static int conn_set_token(lua_State *L) {
    check_conn(L, 1);
    luaL_checkstring(L, 2);
    lua_Integer exp = luaL_optinteger(L, 3, -1);
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, "token");
    if (exp > 0) lua_pushinteger(L, exp); else lua_pushnil(L);
    lua_setfield(L, -2, "token_expires_at");
    return 0;
}

static int conn_info(lua_State *L) {
    conn *c = check_conn(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_createtable(L, 0, 5);
    lua_getfield(L, -2, "url");
    lua_setfield(L, -2, "url");
    lua_getfield(L, -2, "socket");
    lua_setfield(L, -2, "socket");
    lua_getfield(L, -2, "user");
    lua_setfield(L, -2, "user");
    lua_pushstring(L, c->version);
    lua_setfield(L, -2, "version");
    lua_pushnumber(L, c->timeout);
    lua_setfield(L, -2, "timeout");
    return 1;
}

static int conn_close(lua_State *L) {
    conn *c = luaL_checkudata(L, 1, CONN_MT);
    c->closed = 1;
    return 0;
}

static int conn_tostring(lua_State *L) {
    conn *c = luaL_checkudata(L, 1, CONN_MT);
    lua_pushfstring(L, "slurm connection (%s%s)", c->version[0] ? c->version : "no version",
                    c->closed ? ", closed" : "");
    return 1;
}

int luaopen_obleth_slurm_rest(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"call", conn_call}, {"call_raw", conn_call_raw}, {"version", conn_version}, {"versions", conn_versions},
        {"has_slurmdb", conn_has_slurmdb}, {"set_token", conn_set_token}, {"info", conn_info},
        {"close", conn_close}, {NULL, NULL}};
    static const luaL_Reg funcs[] = {{"connect", l_connect}, {NULL, NULL}};
    luaL_requiref(L, "obleth.http", luaopen_obleth_http, 0);
    lua_getfield(L, -1, "request");
    lua_setfield(L, LUA_REGISTRYINDEX, "obleth.slurm.http_request");
    lua_pop(L, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "cjson");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "decode");
    lua_setfield(L, LUA_REGISTRYINDEX, "obleth.slurm.json_decode");
    lua_pop(L, 1);
    obleth_newclass(L, CONN_MT, &(obleth_class){.methods = methods, .close = conn_close, .tostring = conn_tostring});
    lua_getglobal(L, "require");
    lua_pushliteral(L, "obleth.slurm.versions");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "known");
    luaL_checktype(L, -1, LUA_TTABLE);
    load_known(L, lua_gettop(L));
    lua_pop(L, 2);
    luaL_newlib(L, funcs);
    lua_newtable(L);
    for (int i = 0; known[i]; i++) {
        lua_pushstring(L, known[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "known_versions");
    return 1;
}
