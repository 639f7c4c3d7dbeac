/*
 * host.h — shared pieces of the obleth C host.
 *
 * The host owns one Lua state and one libevent base for the life of the
 * process. Lua code runs in *tasks* (coroutines anchored by the host); a C
 * function that has to wait (sleep, an HTTP request, a streamed write)
 * yields the calling task and the event loop resumes it later with the
 * results. Calls from C into Lua go through obleth_pcall / obleth_task_*
 * so an error inside an event callback is logged with a traceback and never
 * unwinds the loop (CONVENTIONS.md, "The C host").
 */
#ifndef OBLETH_HOST_H
#define OBLETH_HOST_H

#include <lua.h>
#include <lauxlib.h>

struct event_base;

#define OBLETH_VERSION "0.1.0"

/* The process-wide event base; created by obleth_loop_init. */
struct event_base *obleth_base(void);

/* Create the event base. Returns 0 on success. */
int obleth_loop_init(void);
/* Free the event base. Call after lua_close. */
void obleth_loop_free(void);

/* Run the event loop until obleth_loop_break is called. */
void obleth_loop_dispatch(void);
void obleth_loop_break(void);

/*
 * Call the function at the top of the stack below its nargs arguments with
 * a traceback handler. Returns the lua_pcall status; on error the message
 * (with traceback) is left on the stack.
 */
int obleth_pcall(lua_State *L, int nargs, int nresults);

/*
 * Start a new task: pops a function and its nargs arguments from L, creates
 * a coroutine anchored in the registry, and resumes it once. Errors in the
 * task are logged, never raised. Returns the task thread (valid until the
 * task ends) or NULL if it already finished.
 */
lua_State *obleth_task_spawn(lua_State *L, int nargs);

/*
 * A task parked by obleth_wait_begin waits for an event. obleth_wait_begin
 * anchors the coroutine L in the registry and returns the anchor; the C
 * function must then `return lua_yield(L, 0)`. When the event fires, push
 * the results on the coroutine's stack and call obleth_wait_resume with
 * their count; it releases the anchor. Raises if L cannot yield.
 */
typedef struct obleth_waiter {
    lua_State *co;
    int ref; /* LUA_NOREF when not waiting */
} obleth_waiter;

void obleth_wait_begin(lua_State *L, obleth_waiter *w, const char *what);
/* Returns 1 if the coroutine was resumed, 0 if it was not waiting. */
int obleth_wait_resume(obleth_waiter *w, int nargs);
/* Release the anchor without resuming (object being closed at shutdown). */
void obleth_wait_drop(lua_State *L, obleth_waiter *w);

/* The main Lua state (for callbacks that need a stack to start from). */
lua_State *obleth_main_state(void);

/* Logging from C, same format as obleth.log (see log.h). */
void obleth_log(const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Module openers, registered in package.preload by obleth_open_modules. */
int luaopen_obleth_loop(lua_State *L);
int luaopen_obleth_http(lua_State *L);
int luaopen_obleth_log(lua_State *L);
int luaopen_obleth_yaml(lua_State *L);
int luaopen_obleth_sys(lua_State *L);
int luaopen_obleth_sqlite(lua_State *L);
int luaopen_obleth_pg(lua_State *L);
int luaopen_obleth_ldap(lua_State *L);
int luaopen_obleth_slurm_rest(lua_State *L);
int luaopen_obleth_readline(lua_State *L);
int luaopen_obleth_crypto(lua_State *L);
int luaopen_obleth_jsonscan(lua_State *L);
/* The prompt_tokens and completion_tokens (-1: missing) of the last "usage" object in
   s[0..n) (an OpenAI answer or the end of one); 1 when one was found, else 0. Reads
   only s; allocates nothing. */
int obleth_usage_scan(const char *s, size_t n, long long *prompt, long long *completion);
int luaopen_obleth_proc(lua_State *L);

void obleth_open_modules(lua_State *L);

/* A userdata class: every field may be NULL.
   methods   its methods: __index is a table of them (or, with `index`, the
             metatable's field "methods", for `index` to look in)
   index     an __index function instead of the methods table
   gc        __gc: only frees memory
   close     __close (and what :close() does, when it is one of `methods`)
   tostring  __tostring */
typedef struct {
    const luaL_Reg *methods;
    lua_CFunction index, gc, close, tostring;
} obleth_class;

/* Register the metatable `name` (once, "obleth.<type>") for class c, e.g.
     obleth_newclass(L, DB_MT, &(obleth_class){.methods = db_m, .gc = db_close, .close = db_close});
   Leaves the stack as it was. */
void obleth_newclass(lua_State *L, const char *name, const obleth_class *c);

/* Keep a userdata under registry[key] whose __gc is gc (once): module-wide
   state released at lua_close. Leaves the stack as it was. */
void obleth_sentinel(lua_State *L, const char *key, lua_CFunction gc);

#endif
