/*
 * fuzz.c — the libFuzzer harness of `make fuzz` (clang -fsanitize=fuzzer,address,undefined).
 *
 * One binary, build/fuzz/obleth-fuzz, linked with every host object but main.o; the
 * target is named by OBLETH_FUZZ_TARGET:
 *   http_frame   the request-framing guard (host/http_frame.c), bytes in pieces
 *   http_target  obleth_http_target_ok (host/http_server.c)
 *   <name>       spec/fuzz/<name>.lua, which returns function(data): it drives obleth's
 *                Lua and C modules (yaml, jsonscan, hostlist, gres, time limits, the
 *                slurmrestd normalizer, strict JSON) in a real obleth Lua state.
 * A finding is a sanitizer report, or a Lua error raised by a target: every one of
 * these reads untrusted text and must answer nil, err, never raise.
 */
#include "../../host/host.h"
#include "../../host/http_internal.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OBLETH_ROOT
#define OBLETH_ROOT "."
#endif

void obleth_set_main_state(lua_State *L); /* host/loop.c (main.c declares it the same way) */

/* Lua line coverage for libFuzzer: the Lua interpreter is not instrumented, so a line hook
   counts each (previous line, line) edge into libFuzzer's extra counters; without it a Lua
   target gives libFuzzer no signal and the corpus shrinks to a byte. Only the line number is
   read (lua_getinfo for the chunk on every line made the targets 20 times slower): lines of
   different files may share a counter, which costs some signal, not correctness. */
#define EXTRA_COUNTERS 65536
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t g_extra[EXTRA_COUNTERS];
static uintptr_t g_prev;

static void line_hook(lua_State *L, lua_Debug *ar) {
    (void)L;
    uintptr_t cur = (uintptr_t)ar->currentline * 2654435761u;
    g_extra[(cur ^ g_prev) % EXTRA_COUNTERS]++;
    g_prev = cur >> 1;
}

static const char *g_target;
static lua_State *g_L;
static int g_fn = LUA_NOREF;
static unsigned long g_runs;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_target = getenv("OBLETH_FUZZ_TARGET");
    if (!g_target || !*g_target) {
        fputs("obleth-fuzz: set OBLETH_FUZZ_TARGET (http_frame, http_target, or a spec/fuzz/<name>.lua)\n", stderr);
        exit(2);
    }
    if (obleth_loop_init() != 0) {
        fputs("obleth-fuzz: cannot initialise libevent\n", stderr);
        exit(2);
    }
    if (strcmp(g_target, "http_frame") == 0 || strcmp(g_target, "http_target") == 0) return 0;
    const char *root = getenv("OBLETH_ROOT");
    if (!root) root = OBLETH_ROOT;
    g_L = luaL_newstate();
    if (!g_L) exit(2);
    luaL_openlibs(g_L);
    obleth_set_main_state(g_L);
    obleth_open_modules(g_L);
    lua_getglobal(g_L, "package");
    lua_pushfstring(g_L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua", root, root, root);
    lua_setfield(g_L, -2, "path");
    lua_pop(g_L, 1);
    char path[4096];
    snprintf(path, sizeof path, "%s/spec/fuzz/%s.lua", root, g_target);
    if (luaL_loadfile(g_L, path) != LUA_OK || lua_pcall(g_L, 0, 1, 0) != LUA_OK || !lua_isfunction(g_L, -1)) {
        fprintf(stderr, "obleth-fuzz: %s: %s\n", path, lua_tostring(g_L, -1));
        exit(2);
    }
    g_fn = luaL_ref(g_L, LUA_REGISTRYINDEX);
    lua_sethook(g_L, line_hook, LUA_MASKLINE, 0);
    return 0;
}

static int traceback(lua_State *L) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (strcmp(g_target, "http_frame") == 0) {
        obleth_http_frame_feed(data, size);
        return 0;
    }
    if (strcmp(g_target, "http_target") == 0) {
        char *t = malloc(size + 1);
        if (!t) abort();
        memcpy(t, data, size);
        t[size] = 0;
        obleth_http_target_ok(t);
        free(t);
        return 0;
    }
    lua_State *L = g_L;
    g_prev = 0;
    lua_pushcfunction(L, traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, g_fn);
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, -3) != LUA_OK) {
        fprintf(stderr, "obleth-fuzz: target %s raised: %s\n", g_target, lua_tostring(L, -1));
        abort();
    }
    lua_settop(L, 0);
    if (++g_runs % 256 == 0) lua_gc(L, LUA_GCCOLLECT, 0);
    return 0;
}
