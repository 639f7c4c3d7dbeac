/*
 * util.c — small helpers the host's C modules share: the monotonic clock, timeouts, waiting once on
 * a socket, error objects (util.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "util.h"
#include "host.h"

#include <lauxlib.h>
#include <math.h>
#include <time.h>

double obleth_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct timeval obleth_tv(double s) {
    struct timeval tv;
    if (!(s > 0) || isnan(s)) s = 0;
    if (s > 1e9) s = 1e9;
    tv.tv_sec = (time_t)s;
    tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
    return tv;
}

int obleth_fd_wait(struct event **ev, int fd, short what, event_callback_fn cb, void *arg,
                   const struct timeval *tv) {
    if (*ev) event_del(*ev);
    else if (!(*ev = event_new(obleth_base(), -1, 0, cb, arg))) return -1;
    if (event_assign(*ev, obleth_base(), fd, what, cb, arg) != 0) return -1;
    return event_add(*ev, tv);
}

void obleth_fd_wait_stop(struct event *ev, int wake, event_callback_fn cb, void *arg) {
    if (!ev) return;
    event_del(ev);
    if (wake) {
        event_assign(ev, obleth_base(), -1, 0, cb, arg);
        event_active(ev, EV_TIMEOUT, 1);
    }
}

void obleth_error_push(lua_State *L, const char *mt, const char *code, const char *msg, size_t len,
                       const char *fallback) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, code);
    lua_setfield(L, -2, "code");
    if (msg && (len > 0 || !fallback)) lua_pushlstring(L, msg, len);
    else lua_pushstring(L, fallback); /* NULL: nil, no message */
    lua_setfield(L, -2, "message");
    if (mt) luaL_setmetatable(L, mt);
}

static int error_tostring(lua_State *L) {
    lua_getfield(L, 1, "code");
    lua_getfield(L, 1, "message");
    lua_pushfstring(L, "%s: %s", luaL_optstring(L, -2, "error"), luaL_optstring(L, -1, "?"));
    return 1;
}

void obleth_error_class(lua_State *L, const char *mt) {
    obleth_newclass(L, mt, &(obleth_class){.tostring = error_tostring});
}
