/*
 * util.h — small helpers the host's C modules share (internal: no Lua module of its own).
 *
 * - the monotonic clock and seconds as a libevent timeout;
 * - waiting once on a socket with one reusable event (obleth.pg, obleth.ldap);
 * - the error objects modules return as `nil, err` (docs/errors.md): {code = "...", message = "..."}
 *   with the module's metatable ("obleth.<module>.error", tostring "code: message"), or none.
 */
#ifndef OBLETH_UTIL_H
#define OBLETH_UTIL_H

#include <event2/event.h>
#include <lua.h>
#include <stddef.h>
#include <sys/time.h>

/* Seconds on CLOCK_MONOTONIC. */
double obleth_mono(void);

/* `s` seconds as a timeval for libevent: a negative or NaN `s` is 0, more than 1e9 is 1e9. */
struct timeval obleth_tv(double s);

/*
 * Watch fd for `what` (EV_READ and / or EV_WRITE; not EV_PERSIST) on the process's event base: cb(fd,
 * what, arg) runs once, when the socket is ready or (what = EV_TIMEOUT) after tv (NULL: no timeout).
 * *ev is made on the first call and reused after (a watch still pending is replaced); the caller owns
 * it and frees it with event_free. Returns 0, or -1 when libevent refuses (*ev is then left as made).
 */
int obleth_fd_wait(struct event **ev, int fd, short what, event_callback_fn cb, void *arg,
                   const struct timeval *tv);

/* Stop the watch of ev (NULL: none was made). With wake, cb(-1, EV_TIMEOUT, arg) runs once on the next
   loop turn instead: how a task waiting on a connection being closed is resumed. */
void obleth_fd_wait_stop(struct event *ev, int wake, event_callback_fn cb, void *arg);

/*
 * Push a new error object {code = code, message = ...} with the metatable `mt` (registered by
 * obleth_error_class; NULL: a plain table). The message is the first `len` bytes of msg; `fallback`
 * instead when msg is NULL, or empty and a fallback is given; none when both are NULL. The object is
 * left at the top of the stack: the caller may add fields to it (sqlstate, ldap_code, ...).
 */
void obleth_error_push(lua_State *L, const char *mt, const char *code, const char *msg, size_t len,
                       const char *fallback);

/* Register the metatable `mt` of a module's error objects: tostring gives "code: message".
   Leaves the stack as it was. */
void obleth_error_class(lua_State *L, const char *mt);

#endif
