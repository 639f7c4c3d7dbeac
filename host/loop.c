/*
 * loop.c — the event loop, tasks, timers, signals and sleep (obleth.loop).
 *
 * One libevent base per process. Lua runs in tasks: coroutines anchored in
 * the registry table "obleth.tasks" until they end. A task that waits
 * (sleep, HTTP) yields; the event callback resumes it with the results.
 * Errors inside a task are logged with a traceback; they never unwind the
 * loop.
 *
 * Lua API (require "obleth.loop"):
 *   spawn(fn, ...)            start fn(...) as a new task; returns the thread
 *   sleep(seconds)            suspend the calling task (seconds >= 0, float)
 *   after(seconds, fn)        one-shot timer: fn() runs in a new task; returns timer
 *   every(seconds, fn)        repeating timer (first run after `seconds`); returns timer
 *   timer:cancel()            stop it (idempotent); also timer:close(), __close
 *   on_signal(name, fn)       "TERM" | "INT" | "HUP" | "USR1" | "USR2" | "QUIT";
 *                             fn(name) runs in a new task on each delivery; returns handle
 *   handle:cancel()           restore nothing: the signal is ignored after this
 *   run()                     park the calling task until stop(code); returns code
 *   stop([code])              wake run() with code (default 0)
 *   now()                     wall clock, seconds since the epoch (float)
 *   monotonic()               monotonic clock, seconds (float)
 *   in_task()                 true when the caller can wait (is inside a task)
 *   notifier()                a wake-up flag for one waiting task:
 *     n:wait([seconds])       suspend until n:notify() (or the timeout);
 *                             true when notified, false on timeout. A notify
 *                             made while nobody waited is kept: the next
 *                             wait returns true at once. One task at a time.
 *     n:notify()              wake the waiting task on the next loop turn
 *                             (never inside the caller); cheap when repeated
 */
#define _POSIX_C_SOURCE 200809L
#include "host.h"
#include "util.h"

#include <event2/event.h>
#include <lualib.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static struct event_base *g_base;
static lua_State *g_main;          /* the main state */
static lua_State *g_main_task;     /* the task running the main chunk */
static int g_exit_code;
static int g_main_done;

struct event_base *obleth_base(void) { return g_base; }
lua_State *obleth_main_state(void) { return g_main; }

int obleth_loop_init(void) {
    struct event_config *cfg = event_config_new();
    if (!cfg) return -1;
    /* batch the epoll changes of one loop turn: evhttp enables and disables a
       connection's events several times per request, and most of that nets out
       (spec/bench/router.sh: about 10% more requests per second under load).
       Safe as long as no descriptor is dup()ed, which the host never does. */
    event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    /* at most 4 callbacks of the low priority (2, below) per loop turn before the loop looks
       for new events again: a new request is not kept waiting behind a long queue of
       pipelined ones */
    event_config_set_max_dispatch_interval(cfg, NULL, 4, 2);
    g_base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    /* three priorities: 1 is every event's default; 2 is for requests a client pipelined
       (http_frame.c), which wait while new input is there to read; 0 is unused */
    if (g_base && event_base_priority_init(g_base, 3) != 0) {
        event_base_free(g_base);
        g_base = NULL;
    }
    return g_base ? 0 : -1;
}

void obleth_loop_free(void) {
    if (g_base) event_base_free(g_base);
    g_base = NULL;
}

void obleth_loop_dispatch(void) {
    if (!g_main_done) event_base_loop(g_base, EVLOOP_NO_EXIT_ON_EMPTY);
}

void obleth_loop_break(void) { event_base_loopbreak(g_base); }

/* ---- calling into Lua ---------------------------------------------------- */

static int msgh(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int obleth_pcall(lua_State *L, int nargs, int nresults) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msgh);
    lua_insert(L, base);
    int st = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return st;
}

/* ---- tasks --------------------------------------------------------------- */

static void tasks_table(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "obleth.tasks") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "obleth.tasks");
    }
}

static void task_release(lua_State *co) {
    lua_State *L = g_main;
    tasks_table(L);
    lua_pushthread(co);
    lua_xmove(co, L, 1);
    lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

static void main_task_finished(int code) {
    g_main_task = NULL;
    g_main_done = 1;
    g_exit_code = code;
    if (g_base) event_base_loopbreak(g_base);
}

/* Resume co with nargs values on its stack and handle the outcome. */
static void task_resume(lua_State *co, int nargs) {
    int nres = 0;
    int st = lua_resume(co, NULL, nargs, &nres);
    if (st == LUA_YIELD) {
        lua_pop(co, nres);
        return;
    }
    int is_main = (co == g_main_task);
    if (st == LUA_OK) {
        if (is_main) {
            int code = 0;
            if (nres > 0) {
                int idx = lua_gettop(co) - nres + 1;
                if (lua_isinteger(co, idx)) code = (int)lua_tointeger(co, idx);
                else if (lua_isboolean(co, idx)) code = lua_toboolean(co, idx) ? 0 : 1;
            }
            main_task_finished(code);
        }
        lua_pop(co, nres);
    } else {
        const char *msg = lua_tostring(co, -1);
        luaL_traceback(co, co, msg ? msg : "(error object is not a string)", 0);
        if (is_main) {
            fprintf(stderr, "obleth: %s\n", lua_tostring(co, -1));
            fflush(stderr);
            main_task_finished(1);
        } else {
            obleth_log("error", "task_error", "error=%s", lua_tostring(co, -1));
        }
        lua_resetthread(co);
    }
    task_release(co);
}

lua_State *obleth_task_spawn(lua_State *L, int nargs) {
    lua_State *co = lua_newthread(L);
    /* anchor: tasks[co] = true */
    tasks_table(L);
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    /* stack: fn args... co -> move fn and args into co */
    lua_insert(L, -(nargs + 2));
    lua_xmove(L, co, nargs + 1);
    lua_pop(L, 1); /* the thread; it stays anchored in tasks */
    task_resume(co, nargs);
    return lua_status(co) == LUA_YIELD ? co : NULL;
}

/* Run the function on top of L (below nargs args) as the main task. */
void obleth_run_main(lua_State *L, int nargs) {
    g_main = L;
    lua_State *co = lua_newthread(L);
    tasks_table(L);
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_insert(L, -(nargs + 2));
    lua_xmove(L, co, nargs + 1);
    lua_pop(L, 1);
    g_main_task = co;
    task_resume(co, nargs);
}

int obleth_exit_code(void) { return g_exit_code; }
int obleth_main_done(void) { return g_main_done; }
void obleth_set_main_state(lua_State *L) { g_main = L; }

void obleth_wait_begin(lua_State *L, obleth_waiter *w, const char *what) {
    if (!lua_isyieldable(L))
        luaL_error(L, "%s must be called inside a task (loop.spawn), not from the main thread", what);
    w->co = L;
    lua_pushthread(L);
    w->ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

int obleth_wait_resume(obleth_waiter *w, int nargs) {
    lua_State *co = w->co;
    if (co == NULL || w->ref == LUA_NOREF) return 0;
    luaL_unref(co, LUA_REGISTRYINDEX, w->ref);
    w->ref = LUA_NOREF;
    w->co = NULL;
    if (lua_status(co) != LUA_YIELD) {
        lua_pop(co, nargs);
        return 0;
    }
    task_resume(co, nargs);
    return 1;
}

void obleth_wait_drop(lua_State *L, obleth_waiter *w) {
    if (w->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, w->ref);
    w->ref = LUA_NOREF;
    w->co = NULL;
}

/* ---- time helpers ---------------------------------------------------------- */

static double check_seconds(lua_State *L, int i) {
    double s = luaL_checknumber(L, i);
    luaL_argcheck(L, s >= 0 && !isnan(s), i, "seconds must be a number >= 0");
    return s;
}

/* ---- sleep --------------------------------------------------------------- */

typedef struct {
    struct event *ev;
    obleth_waiter w;
    int self_ref;
} sleeper;

static void sleeper_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    sleeper *s = arg;
    lua_State *L = g_main;
    luaL_unref(L, LUA_REGISTRYINDEX, s->self_ref); /* may be collected after resume */
    s->self_ref = LUA_NOREF;
    obleth_wait_resume(&s->w, 0);
}

static int sleeper_gc(lua_State *L) {
    sleeper *s = luaL_checkudata(L, 1, "obleth.sleeper");
    if (s->ev) { event_free(s->ev); s->ev = NULL; }
    return 0;
}

static int l_sleep(lua_State *L) {
    double secs = check_seconds(L, 1);
    if (!lua_isyieldable(L))
        return luaL_error(L, "sleep must be called inside a task (loop.spawn), not from the main thread");
    sleeper *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    s->w.ref = LUA_NOREF;
    s->self_ref = LUA_NOREF;
    luaL_setmetatable(L, "obleth.sleeper");
    s->ev = evtimer_new(g_base, sleeper_cb, s);
    if (!s->ev) return luaL_error(L, "out of memory");
    s->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    struct timeval tv = obleth_tv(secs);
    /* timers count from libevent's cached loop time, which is stale when
       a task ran for long without yielding: refresh it first */
    event_base_update_cache_time(g_base);
    evtimer_add(s->ev, &tv);
    obleth_wait_begin(L, &s->w, "sleep");
    return lua_yield(L, 0);
}

/* ---- notifier ------------------------------------------------------------ */

#define NOTIFIER_MT "obleth.notifier"

typedef struct {
    struct event *ev;   /* fires for the timeout, or made active by notify */
    obleth_waiter w;
    int notified;       /* a notify not yet seen by a wait */
    int waiting;
} notifier;

static void notifier_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    notifier *n = arg;
    if (!n->waiting) return;
    n->waiting = 0;
    event_del(n->ev);
    int got = n->notified;
    n->notified = 0;
    lua_State *co = n->w.co;
    if (!co) return;
    lua_pushboolean(co, got);
    obleth_wait_resume(&n->w, 1);
}

static int l_notifier(lua_State *L) {
    notifier *n = lua_newuserdatauv(L, sizeof *n, 0);
    memset(n, 0, sizeof *n);
    n->w.ref = LUA_NOREF;
    luaL_setmetatable(L, NOTIFIER_MT);
    n->ev = event_new(g_base, -1, 0, notifier_cb, n);
    if (!n->ev) return luaL_error(L, "out of memory");
    return 1;
}

static int notifier_wait(lua_State *L) {
    notifier *n = luaL_checkudata(L, 1, NOTIFIER_MT);
    int timed = !lua_isnoneornil(L, 2);
    double secs = timed ? check_seconds(L, 2) : 0;
    if (n->notified) {
        n->notified = 0;
        lua_pushboolean(L, 1);
        return 1;
    }
    if (n->waiting) return luaL_error(L, "notifier: another task is already waiting");
    if (!lua_isyieldable(L))
        return luaL_error(L, "wait must be called inside a task (loop.spawn), not from the main thread");
    if (!n->ev) return luaL_error(L, "notifier: closed");
    n->waiting = 1;
    if (timed) {
        struct timeval tv = obleth_tv(secs);
        event_base_update_cache_time(g_base);
        event_add(n->ev, &tv);
    }
    obleth_wait_begin(L, &n->w, "notifier:wait");
    lua_settop(L, 1); /* n stays on the waiting task's stack: it cannot be collected */
    return lua_yield(L, 0);
}

static int notifier_notify(lua_State *L) {
    notifier *n = luaL_checkudata(L, 1, NOTIFIER_MT);
    n->notified = 1;
    if (n->waiting && n->ev) event_active(n->ev, EV_TIMEOUT, 1);
    return 0;
}

static int notifier_gc(lua_State *L) {
    notifier *n = luaL_checkudata(L, 1, NOTIFIER_MT);
    obleth_wait_drop(L, &n->w);
    if (n->ev) { event_free(n->ev); n->ev = NULL; }
    return 0;
}

/* ---- timers ------------------------------------------------------------- */

#define TIMER_MT "obleth.timer"

typedef struct {
    struct event *ev;
    int fn_ref;
    int self_ref;
    int repeat;
    double interval;
} ltimer;

static void timer_stop(lua_State *L, ltimer *t) {
    if (t->ev) { event_free(t->ev); t->ev = NULL; }
    if (t->fn_ref != LUA_NOREF) { luaL_unref(L, LUA_REGISTRYINDEX, t->fn_ref); t->fn_ref = LUA_NOREF; }
    if (t->self_ref != LUA_NOREF) { luaL_unref(L, LUA_REGISTRYINDEX, t->self_ref); t->self_ref = LUA_NOREF; }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    ltimer *t = arg;
    lua_State *L = g_main;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->fn_ref);
    if (!t->repeat) {
        /* one-shot: release before running so the timer can be collected */
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->self_ref); /* keep alive during spawn */
        lua_insert(L, -2);
        timer_stop(L, t);
        obleth_task_spawn(L, 0);
    } else {
        obleth_task_spawn(L, 0);
    }
    lua_settop(L, top);
}

static int new_timer(lua_State *L, int repeat) {
    double secs = check_seconds(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    if (repeat) luaL_argcheck(L, secs > 0, 1, "interval must be > 0");
    ltimer *t = lua_newuserdatauv(L, sizeof *t, 0);
    t->ev = NULL; t->fn_ref = LUA_NOREF; t->self_ref = LUA_NOREF;
    t->repeat = repeat; t->interval = secs;
    luaL_setmetatable(L, TIMER_MT);
    t->ev = event_new(g_base, -1, repeat ? EV_PERSIST : 0, timer_cb, t);
    if (!t->ev) return luaL_error(L, "out of memory");
    lua_pushvalue(L, 2);
    t->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, -1);
    t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    struct timeval tv = obleth_tv(secs);
    event_base_update_cache_time(g_base);
    event_add(t->ev, &tv);
    return 1;
}

static int l_after(lua_State *L) { return new_timer(L, 0); }
static int l_every(lua_State *L) { return new_timer(L, 1); }

static int timer_cancel(lua_State *L) {
    ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    timer_stop(L, t);
    return 0;
}

static int timer_active(lua_State *L) {
    ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    lua_pushboolean(L, t->ev != NULL);
    return 1;
}

static int timer_gc(lua_State *L) {
    ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    if (t->ev) { event_free(t->ev); t->ev = NULL; }
    return 0;
}

/* ---- signals ------------------------------------------------------------ */

#define SIGNAL_MT "obleth.signal"

typedef struct {
    struct event *ev;
    int fn_ref;
    int self_ref;
    int signo;
} lsignal;

static const struct { const char *name; int signo; } signames[] = {
    {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"QUIT", SIGQUIT}, {NULL, 0}};

static const char *signame(int signo) {
    for (int i = 0; signames[i].name; i++)
        if (signames[i].signo == signo) return signames[i].name;
    return "?";
}

static void signal_cb(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    lsignal *s = arg;
    lua_State *L = g_main;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->fn_ref);
    lua_pushstring(L, signame((int)fd));
    obleth_task_spawn(L, 1);
    lua_settop(L, top);
}

static void signal_stop(lua_State *L, lsignal *s) {
    if (s->ev) { event_free(s->ev); s->ev = NULL; }
    if (s->fn_ref != LUA_NOREF) { luaL_unref(L, LUA_REGISTRYINDEX, s->fn_ref); s->fn_ref = LUA_NOREF; }
    if (s->self_ref != LUA_NOREF) { luaL_unref(L, LUA_REGISTRYINDEX, s->self_ref); s->self_ref = LUA_NOREF; }
}

static int l_on_signal(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int signo = 0;
    for (int i = 0; signames[i].name; i++)
        if (strcmp(signames[i].name, name) == 0) signo = signames[i].signo;
    if (!signo) return luaL_argerror(L, 1, "unknown signal (TERM, INT, HUP, USR1, USR2, QUIT)");
    lsignal *s = lua_newuserdatauv(L, sizeof *s, 0);
    s->ev = NULL; s->fn_ref = LUA_NOREF; s->self_ref = LUA_NOREF; s->signo = signo;
    luaL_setmetatable(L, SIGNAL_MT);
    s->ev = evsignal_new(g_base, signo, signal_cb, s);
    if (!s->ev) return luaL_error(L, "out of memory");
    lua_pushvalue(L, 2);
    s->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, -1);
    s->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    event_add(s->ev, NULL);
    return 1;
}

static int signal_cancel(lua_State *L) {
    lsignal *s = luaL_checkudata(L, 1, SIGNAL_MT);
    signal_stop(L, s);
    return 0;
}

static int signal_gc(lua_State *L) {
    lsignal *s = luaL_checkudata(L, 1, SIGNAL_MT);
    if (s->ev) { event_free(s->ev); s->ev = NULL; }
    return 0;
}

/* ---- run / stop ----------------------------------------------------------- */

static obleth_waiter g_run_waiter = {NULL, LUA_NOREF};
static int g_stop_pending;
static lua_Integer g_stop_code;

static void stop_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    if (g_run_waiter.ref != LUA_NOREF) {
        g_stop_pending = 0;
        lua_pushinteger(g_run_waiter.co, g_stop_code);
        obleth_wait_resume(&g_run_waiter, 1);
    }
}

static int l_run(lua_State *L) {
    if (g_stop_pending) {
        g_stop_pending = 0;
        lua_pushinteger(L, g_stop_code);
        return 1;
    }
    if (g_run_waiter.ref != LUA_NOREF) return luaL_error(L, "loop.run is already waiting in another task");
    obleth_wait_begin(L, &g_run_waiter, "loop.run");
    return lua_yield(L, 0);
}

static int l_stop(lua_State *L) {
    g_stop_code = luaL_optinteger(L, 1, 0);
    g_stop_pending = 1;
    struct timeval tv = {0, 0};
    event_base_once(g_base, -1, EV_TIMEOUT, stop_cb, NULL, &tv);
    return 0;
}

static int l_spawn(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int n = lua_gettop(L);
    lua_State *co = obleth_task_spawn(L, n - 1);
    if (co) { lua_pushthread(co); lua_xmove(co, L, 1); }
    else lua_pushnil(L);
    return 1;
}

static int l_now(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    return 1;
}

static int l_monotonic(lua_State *L) {
    lua_pushnumber(L, obleth_mono());
    return 1;
}

static int l_in_task(lua_State *L) {
    lua_pushboolean(L, lua_isyieldable(L));
    return 1;
}

int luaopen_obleth_loop(lua_State *L) {
    static const luaL_Reg timer_m[] = {
        {"cancel", timer_cancel}, {"close", timer_cancel}, {"active", timer_active}, {NULL, NULL}};
    static const luaL_Reg signal_m[] = {
        {"cancel", signal_cancel}, {"close", signal_cancel}, {NULL, NULL}};
    static const luaL_Reg funcs[] = {
        {"spawn", l_spawn},       {"sleep", l_sleep},         {"after", l_after},
        {"every", l_every},       {"on_signal", l_on_signal}, {"run", l_run},
        {"stop", l_stop},         {"now", l_now},             {"monotonic", l_monotonic},
        {"in_task", l_in_task},   {"notifier", l_notifier},   {NULL, NULL}};
    static const luaL_Reg notifier_m[] = {
        {"wait", notifier_wait}, {"notify", notifier_notify}, {NULL, NULL}};

    obleth_newclass(L, "obleth.sleeper", &(obleth_class){.gc = sleeper_gc});
    obleth_newclass(L, TIMER_MT, &(obleth_class){.methods = timer_m, .gc = timer_gc, .close = timer_cancel});
    obleth_newclass(L, NOTIFIER_MT, &(obleth_class){.methods = notifier_m, .gc = notifier_gc});
    obleth_newclass(L, SIGNAL_MT, &(obleth_class){.methods = signal_m, .gc = signal_gc, .close = signal_cancel});

    luaL_newlib(L, funcs);
    return 1;
}
