/* modules.c — registers the host's C modules in package.preload. */
#include "host.h"

void obleth_open_modules(lua_State *L) {
    static const luaL_Reg mods[] = {
        {"obleth.loop", luaopen_obleth_loop}, {"obleth.http", luaopen_obleth_http},
        {"obleth.log", luaopen_obleth_log},   {"obleth.yaml", luaopen_obleth_yaml},
        {"obleth.sys", luaopen_obleth_sys},
        {"obleth.sqlite", luaopen_obleth_sqlite},
        {"obleth.slurm.rest", luaopen_obleth_slurm_rest},
        {"obleth.readline", luaopen_obleth_readline},
        {"obleth.crypto", luaopen_obleth_crypto},   {"obleth.jsonscan", luaopen_obleth_jsonscan},
        {NULL, NULL}};
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    for (const luaL_Reg *m = mods; m->name; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    lua_pop(L, 1);
}

void obleth_newclass(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
                     lua_CFunction close) {
    if (!luaL_newmetatable(L, name)) { lua_pop(L, 1); return; }
    if (methods) {
        lua_newtable(L);
        luaL_setfuncs(L, methods, 0);
        lua_setfield(L, -2, "__index");
    }
    if (gc) { lua_pushcfunction(L, gc); lua_setfield(L, -2, "__gc"); }
    if (close) { lua_pushcfunction(L, close); lua_setfield(L, -2, "__close"); }
    lua_pop(L, 1);
}
