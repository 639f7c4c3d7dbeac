/*
 * readline.c — GNU readline for the REPL (obleth.readline).
 *
 *   readline(prompt)        -> line | nil at end of input (blocks the process:
 *                              only the REPL, between evaluations, uses it)
 *   add_history(line)
 *   read_history(path), write_history(path)  -> true | nil, err
 *   set_completer(fn)       fn(text, line_before_text) -> array of candidates;
 *                           called for Tab, from the main state, must not wait
 */
#include "host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <readline/history.h>
#include <readline/readline.h>

static lua_State *g_L;
static int g_completer = LUA_NOREF;
static char **g_matches;
static int g_nmatches, g_next;

static void free_matches(void) {
    for (int i = g_next; i < g_nmatches; i++) free(g_matches[i]);
    free(g_matches);
    g_matches = NULL;
    g_nmatches = g_next = 0;
}

/* Collect candidates from the Lua completer into g_matches (malloc'd). */
static void collect(const char *text) {
    free_matches();
    if (!g_L || g_completer == LUA_NOREF) return;
    lua_State *L = g_L;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, g_completer);
    lua_pushstring(L, text);
    lua_pushlstring(L, rl_line_buffer, (size_t)(rl_point - (int)strlen(text) > 0 ? rl_point - (int)strlen(text) : 0));
    if (obleth_pcall(L, 2, 1) == LUA_OK && lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        if (n > 0 && n < 100000) {
            g_matches = calloc((size_t)n, sizeof *g_matches);
            if (g_matches) {
                for (lua_Integer i = 1; i <= n; i++) {
                    lua_rawgeti(L, -1, i);
                    const char *s = lua_tostring(L, -1);
                    if (s) {
                        char *d = strdup(s);
                        if (d) g_matches[g_nmatches++] = d;
                    }
                    lua_pop(L, 1);
                }
            }
        }
    }
    lua_settop(L, top);
}

static char *generator(const char *text, int state) {
    if (state == 0) collect(text);
    if (g_next < g_nmatches) return g_matches[g_next++]; /* readline frees it */
    return NULL;
}

static char **completion(const char *text, int start, int end) {
    (void)start; (void)end;
    rl_attempted_completion_over = 1;
    return rl_completion_matches(text, generator);
}

static int l_readline(lua_State *L) {
    const char *prompt = luaL_optstring(L, 1, "> ");
    g_L = L;
    char *line = readline(prompt);
    if (!line) { lua_pushnil(L); return 1; }
    lua_pushstring(L, line); /* OOM raises: acceptable (fatal) */
    free(line);
    return 1;
}

static int l_add_history(lua_State *L) {
    add_history(luaL_checkstring(L, 1));
    return 0;
}

static int l_read_history(lua_State *L) {
    int r = read_history(luaL_checkstring(L, 1));
    if (r != 0) { lua_pushnil(L); lua_pushstring(L, strerror(r)); return 2; }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_write_history(lua_State *L) {
    int r = write_history(luaL_checkstring(L, 1));
    if (r != 0) { lua_pushnil(L); lua_pushstring(L, strerror(r)); return 2; }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_set_completer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    if (g_completer != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, g_completer);
    lua_pushvalue(L, 1);
    g_completer = luaL_ref(L, LUA_REGISTRYINDEX);
    g_L = L;
    rl_attempted_completion_function = completion;
    rl_completer_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^~#[]";
    return 0;
}

static int rl_gc(lua_State *L) {
    (void)L;
    free_matches();
    g_completer = LUA_NOREF;
    g_L = NULL;
    rl_clear_history();
    return 0;
}

int luaopen_obleth_readline(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"readline", l_readline}, {"add_history", l_add_history}, {"read_history", l_read_history},
        {"write_history", l_write_history}, {"set_completer", l_set_completer}, {NULL, NULL}};
    rl_readline_name = "obleth";
    luaL_newlib(L, funcs);
    obleth_sentinel(L, "obleth.readline.sentinel", rl_gc);
    return 1;
}
