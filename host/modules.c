/* modules.c — registers the host's C modules in package.preload. */
#include "host.h"

void obleth_open_modules(lua_State *L) {
    static const luaL_Reg mods[] = {
        {"obleth.loop", luaopen_obleth_loop}, {"obleth.http", luaopen_obleth_http},
        {"obleth.log", luaopen_obleth_log},   {"obleth.yaml", luaopen_obleth_yaml},
        {"obleth.sys", luaopen_obleth_sys},
        {"obleth.sqlite", luaopen_obleth_sqlite}, {"obleth.pg", luaopen_obleth_pg},
        {"obleth.ldap", luaopen_obleth_ldap},
        {"obleth.slurm.rest", luaopen_obleth_slurm_rest},
        {"obleth.readline", luaopen_obleth_readline},
        {"obleth.crypto", luaopen_obleth_crypto},   {"obleth.jsonscan", luaopen_obleth_jsonscan},
        {"obleth.proc", luaopen_obleth_proc},
        {NULL, NULL}};
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    for (const luaL_Reg *m = mods; m->name; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    lua_pop(L, 1);
}

void obleth_newclass(lua_State *L, const char *name, const obleth_class *c) {
    if (!luaL_newmetatable(L, name)) { lua_pop(L, 1); return; }
    if (c->methods) {
        lua_newtable(L);
        luaL_setfuncs(L, c->methods, 0);
        lua_setfield(L, -2, c->index ? "methods" : "__index");
    }
    if (c->index) { lua_pushcfunction(L, c->index); lua_setfield(L, -2, "__index"); }
    if (c->gc) { lua_pushcfunction(L, c->gc); lua_setfield(L, -2, "__gc"); }
    if (c->close) { lua_pushcfunction(L, c->close); lua_setfield(L, -2, "__close"); }
    if (c->tostring) { lua_pushcfunction(L, c->tostring); lua_setfield(L, -2, "__tostring"); }
    lua_pop(L, 1);
}

void obleth_sentinel(lua_State *L, const char *key, lua_CFunction gc) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, key) != LUA_TNIL) { lua_pop(L, 1); return; }
    lua_pop(L, 1);
    lua_newuserdatauv(L, 0, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}
