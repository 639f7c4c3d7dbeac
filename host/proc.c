/*
 * proc.c — child processes on the event loop (obleth.proc).
 *
 * A program runs without blocking the loop: posix_spawn with its stdout and
 * stderr on pipes that libevent watches, stdin from /dev/null, in a process
 * group of its own, with no descriptor of the host's but those three. Its exit
 * is seen through a pidfd (waitpid(WNOHANG) once it is readable; no SIGCHLD
 * handler), so nothing waits in waitpid. At the deadline the whole process
 * group gets SIGKILL; output past its limit is dropped (stdout past its limit
 * also kills the group: a command that prints that much is not doing its job),
 * so memory stays bounded whatever the program prints. When the program
 * exits, what is left of its process group is killed, and pipes a stray
 * process keeps open are closed a second later.
 *
 * The environment is built, never inherited: PATH, HOME and LANG from the
 * host's (PATH defaults to /usr/local/bin:/usr/bin:/bin), the names listed in
 * `inherit`, and the values in `env`. A name starting with OBLETH_ is refused
 * in both (obleth's own settings, the admin token among them, never reach a
 * child).
 *
 * Lua API (require "obleth.proc"):
 *   run{argv = {"/bin/sh", "-c", cmd},   -- argv[1]: a path, or a name looked up in PATH
 *       timeout = 30,                     -- seconds (float) until the group is killed
 *       stdout_limit = 1048576,           -- bytes kept of stdout (more: group killed)
 *       stderr_limit = 4096,              -- bytes kept of stderr (more: dropped)
 *       inherit = {"SLURM_CONF"},         -- host variables passed on, besides PATH, HOME, LANG
 *       env = {NAME = "value"}}           -- variables set for the child
 *     -> {status = exit code | nil, signal = "KILL" | ... | nil, stdout = s, stderr = s,
 *         timed_out = bool, stdout_truncated = bool, stderr_truncated = bool}
 *      | nil, {code = "spawn", message = ...}   (the program could not be started)
 *   Inside a task it yields that task only. Outside one (a CLI's main thread
 *   that cannot yield) it runs the same machinery on a private event base and
 *   returns when the child is done: it blocks the caller only, never a server
 *   loop, as no server runs outside a task.
 */
#define _GNU_SOURCE
#include "host.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define READ_CHUNK 65536
#define LINGER_SECONDS 1

typedef struct pipe_in {
    int fd; /* -1 once at EOF */
    struct event *ev;
    char *buf;
    size_t len, limit;
    int truncated;
} pipe_in;

typedef struct proc_op {
    struct event_base *base;
    int private_base; /* a base of our own (the caller cannot yield) */
    pid_t pid;
    int pidfd;
    struct event *pid_ev;   /* the pidfd, or a polling timer without one */
    struct event *deadline; /* the timeout */
    struct event *linger;   /* after the exit: pipes a stray process holds */
    pipe_in out, err;
    int exited, wstatus, timed_out, killed, done;
    obleth_waiter w;
    struct proc_op *next; /* in g_ops (live operations) */
} proc_op;

static proc_op *g_ops;

static void ops_remove(proc_op *op) {
    for (proc_op **pp = &g_ops; *pp; pp = &(*pp)->next)
        if (*pp == op) { *pp = op->next; return; }
}

static void kill_group(proc_op *op) {
    if (op->pid > 0) kill(-op->pid, SIGKILL);
    op->killed = 1;
}

static void pipe_close(pipe_in *p) {
    if (p->ev) { event_free(p->ev); p->ev = NULL; }
    if (p->fd >= 0) { close(p->fd); p->fd = -1; }
}

static void op_release(proc_op *op) {
    pipe_close(&op->out);
    pipe_close(&op->err);
    if (op->pid_ev) { event_free(op->pid_ev); op->pid_ev = NULL; }
    if (op->deadline) { event_free(op->deadline); op->deadline = NULL; }
    if (op->linger) { event_free(op->linger); op->linger = NULL; }
    if (op->pidfd >= 0) { close(op->pidfd); op->pidfd = -1; }
}

static void op_free(proc_op *op) {
    op_release(op);
    free(op->out.buf);
    free(op->err.buf);
    free(op);
}

static const char *signame(int sig) {
    switch (sig) {
    case SIGKILL: return "KILL"; case SIGTERM: return "TERM"; case SIGINT: return "INT";
    case SIGHUP: return "HUP"; case SIGSEGV: return "SEGV"; case SIGABRT: return "ABRT";
    case SIGPIPE: return "PIPE"; case SIGBUS: return "BUS"; case SIGFPE: return "FPE";
    case SIGQUIT: return "QUIT"; case SIGUSR1: return "USR1"; case SIGUSR2: return "USR2";
    case SIGALRM: return "ALRM"; case SIGXCPU: return "XCPU"; case SIGXFSZ: return "XFSZ";
    default: return "other";
    }
}

static void push_result(lua_State *L, proc_op *op) {
    lua_createtable(L, 0, 7);
    if (op->exited && WIFEXITED(op->wstatus)) {
        lua_pushinteger(L, WEXITSTATUS(op->wstatus));
        lua_setfield(L, -2, "status");
    } else if (op->exited && WIFSIGNALED(op->wstatus)) {
        lua_pushstring(L, signame(WTERMSIG(op->wstatus)));
        lua_setfield(L, -2, "signal");
    }
    lua_pushlstring(L, op->out.buf ? op->out.buf : "", op->out.len);
    lua_setfield(L, -2, "stdout");
    lua_pushlstring(L, op->err.buf ? op->err.buf : "", op->err.len);
    lua_setfield(L, -2, "stderr");
    lua_pushboolean(L, op->timed_out);
    lua_setfield(L, -2, "timed_out");
    lua_pushboolean(L, op->out.truncated);
    lua_setfield(L, -2, "stdout_truncated");
    lua_pushboolean(L, op->err.truncated);
    lua_setfield(L, -2, "stderr_truncated");
}

/* Both pipes at EOF (or given up on) and the child reaped: hand back the result. */
static void maybe_finish(proc_op *op) {
    if (op->done || !op->exited || op->out.fd >= 0 || op->err.fd >= 0) return;
    op->done = 1;
    op_release(op);
    if (op->private_base) { event_base_loopbreak(op->base); return; }
    ops_remove(op);
    obleth_waiter w = op->w;
    if (w.co) {
        push_result(w.co, op);
        op_free(op); /* before the resume: the task may start another run */
        obleth_wait_resume(&w, 1);
    } else {
        op_free(op);
    }
}

static void linger_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    proc_op *op = arg;
    pipe_close(&op->out);
    pipe_close(&op->err);
    maybe_finish(op);
}

static void reap(proc_op *op) {
    if (op->exited) return;
    int st = 0;
    pid_t r = waitpid(op->pid, &st, WNOHANG);
    if (r == 0) return;                /* not yet */
    op->exited = 1;
    op->wstatus = r == op->pid ? st : 0;
    if (op->pid_ev) { event_free(op->pid_ev); op->pid_ev = NULL; }
    /* what is left of its group goes too; a process that left the group keeps the pipes
       open at most LINGER_SECONDS longer */
    kill(-op->pid, SIGKILL);
    if (op->out.fd >= 0 || op->err.fd >= 0) {
        op->linger = evtimer_new(op->base, linger_cb, op);
        struct timeval tv = {LINGER_SECONDS, 0};
        if (!op->linger || evtimer_add(op->linger, &tv) != 0) { linger_cb(-1, 0, op); return; }
    }
    maybe_finish(op);
}

static void pid_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    reap(arg);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    proc_op *op = arg;
    op->timed_out = 1;
    kill_group(op);
}

static void read_cb(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    proc_op *op = arg;
    pipe_in *p = fd == op->out.fd ? &op->out : &op->err;
    char chunk[READ_CHUNK];
    for (int i = 0; i < 16; i++) { /* a bounded amount per turn: other events get theirs */
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) { /* EOF, or an error that ends the pipe */
            pipe_close(p);
            maybe_finish(op);
            return;
        }
        size_t room = p->limit - p->len, take = (size_t)n < room ? (size_t)n : room;
        if (take) {
            memcpy(p->buf + p->len, chunk, take);
            p->len += take;
        }
        if (take < (size_t)n && !p->truncated) {
            p->truncated = 1;
            if (p == &op->out) kill_group(op);
        }
    }
}

/* ---- starting the child ------------------------------------------------------- */

static int env_name_ok(const char *k) {
    if (!*k || strchr(k, '=')) return 0;
    return strncmp(k, "OBLETH_", 7) != 0;
}

typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static void sv_free(strvec *s) {
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

static int sv_push(strvec *s, const char *a, const char *b) { /* a, or a=b */
    if (s->n + 2 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) return -1;
        s->v = nv;
        s->cap = nc;
    }
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    char *e = malloc(la + (b ? lb + 1 : 0) + 1);
    if (!e) return -1;
    memcpy(e, a, la);
    if (b) { e[la] = '='; memcpy(e + la + 1, b, lb); e[la + 1 + lb] = 0; }
    else e[la] = 0;
    s->v[s->n++] = e;
    s->v[s->n] = NULL;
    return 0;
}

/* Is name already set in envp (as NAME=...)? */
static int sv_has(const strvec *s, const char *name) {
    size_t l = strlen(name);
    for (size_t i = 0; i < s->n; i++)
        if (strncmp(s->v[i], name, l) == 0 && s->v[i][l] == '=') return 1;
    return 0;
}

static void oom_raise(lua_State *L, strvec *a, strvec *b) {
    sv_free(a);
    sv_free(b);
    luaL_error(L, "out of memory");
}

/* argv and envp from the options table at index 1 (raises on bad options). */
static void build(lua_State *L, strvec *argv, strvec *envp) {
    if (lua_getfield(L, 1, "argv") != LUA_TTABLE) luaL_argerror(L, 1, "'argv' must be a list of strings");
    lua_Integer n = luaL_len(L, -1);
    if (n < 1) luaL_argerror(L, 1, "'argv' must have a program");
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, -1, i) != LUA_TSTRING) { sv_free(argv); luaL_argerror(L, 1, "'argv' must be a list of strings"); }
        size_t l;
        const char *a = lua_tolstring(L, -1, &l);
        if (strlen(a) != l) { sv_free(argv); luaL_argerror(L, 1, "an argument holds a NUL byte"); }
        if (sv_push(argv, a, NULL)) oom_raise(L, argv, envp);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    /* env: explicit values first (they win over inherited ones) */
    if (lua_getfield(L, 1, "env") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING) {
                sv_free(argv); sv_free(envp);
                luaL_argerror(L, 1, "'env' must map names to strings");
            }
            size_t kl, vl;
            const char *k = lua_tolstring(L, -2, &kl), *v = lua_tolstring(L, -1, &vl);
            if (!env_name_ok(k) || strlen(k) != kl || strlen(v) != vl) {
                sv_free(argv); sv_free(envp);
                luaL_argerror(L, 1, "'env': a name is empty, has '=' or NUL, or starts with OBLETH_");
            }
            if (sv_push(envp, k, v)) oom_raise(L, argv, envp);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    static const char *always[] = {"PATH", "HOME", "LANG", NULL};
    for (int i = 0; always[i]; i++) {
        const char *v = getenv(always[i]);
        if (!v && i == 0) v = "/usr/local/bin:/usr/bin:/bin";
        if (v && !sv_has(envp, always[i]) && sv_push(envp, always[i], v)) oom_raise(L, argv, envp);
    }
    if (lua_getfield(L, 1, "inherit") == LUA_TTABLE) {
        lua_Integer m = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= m; i++) {
            const char *k = lua_rawgeti(L, -1, i) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            if (!k || !env_name_ok(k)) {
                sv_free(argv); sv_free(envp);
                luaL_argerror(L, 1, "'inherit' must list variable names (none starting with OBLETH_)");
            }
            const char *v = getenv(k);
            if (v && !sv_has(envp, k) && sv_push(envp, k, v)) oom_raise(L, argv, envp);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (!envp->v && sv_push(envp, "PATH", "/usr/local/bin:/usr/bin:/bin")) oom_raise(L, argv, envp);
}

static lua_Integer opt_int(lua_State *L, const char *k, lua_Integer def, lua_Integer lo, lua_Integer hi) {
    lua_getfield(L, 1, k);
    lua_Integer v = luaL_optinteger(L, -1, def);
    lua_pop(L, 1);
    if (v < lo || v > hi) luaL_error(L, "bad option '%s' (%I..%I)", k, lo, hi);
    return v;
}

/* Spawn; 0, or an errno with the pipes closed. */
static int start(proc_op *op, char **argv, char **envp) {
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC | O_NONBLOCK) || pipe2(pe, O_CLOEXEC | O_NONBLOCK)) {
        int e = errno;
        if (po[0] >= 0) { close(po[0]); close(po[1]); }
        return e;
    }
    /* the child's ends block as usual */
    fcntl(po[1], F_SETFL, 0);
    fcntl(pe[1], F_SETFL, 0);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    int rc = strchr(argv[0], '/') ? posix_spawn(&pid, argv[0], &fa, &at, argv, envp)
                                  : posix_spawnp(&pid, argv[0], &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(po[1]);
    close(pe[1]);
    if (rc != 0) {
        close(po[0]);
        close(pe[0]);
        return rc;
    }
    op->pid = pid;
    op->out.fd = po[0];
    op->err.fd = pe[0];
    return 0;
}

static void poll_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    reap(arg);
}

/* Watch the pipes, the exit and the deadline on op->base; -1 when out of memory. */
static int watch(proc_op *op, double timeout) {
    op->out.ev = event_new(op->base, op->out.fd, EV_READ | EV_PERSIST, read_cb, op);
    op->err.ev = event_new(op->base, op->err.fd, EV_READ | EV_PERSIST, read_cb, op);
    op->deadline = evtimer_new(op->base, deadline_cb, op);
    op->pidfd = pidfd_open(op->pid, 0);
    if (op->pidfd >= 0) {
        op->pid_ev = event_new(op->base, op->pidfd, EV_READ | EV_PERSIST, pid_cb, op);
    } else { /* no pidfd (an old kernel): look every 50 ms */
        op->pid_ev = event_new(op->base, -1, EV_PERSIST, poll_cb, op);
    }
    if (!op->out.ev || !op->err.ev || !op->deadline || !op->pid_ev) return -1;
    struct timeval dl = {(time_t)timeout, (suseconds_t)((timeout - floor(timeout)) * 1e6)};
    struct timeval poll = {0, 50000};
    if (event_add(op->out.ev, NULL) || event_add(op->err.ev, NULL) || evtimer_add(op->deadline, &dl) ||
        event_add(op->pid_ev, op->pidfd >= 0 ? NULL : &poll))
        return -1;
    return 0;
}

static int l_run(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "timeout");
    double timeout = luaL_optnumber(L, -1, 30);
    lua_pop(L, 1);
    luaL_argcheck(L, timeout > 0 && timeout <= 86400, 1, "'timeout' must be 0 < seconds <= 86400");
    size_t out_lim = (size_t)opt_int(L, "stdout_limit", 1 << 20, 0, 1 << 30);
    size_t err_lim = (size_t)opt_int(L, "stderr_limit", 4096, 0, 1 << 30);
    strvec argv = {0}, envp = {0};
    build(L, &argv, &envp);
    proc_op *op = calloc(1, sizeof *op);
    if (!op) oom_raise(L, &argv, &envp);
    op->pidfd = -1;
    op->out.fd = op->err.fd = -1;
    op->out.limit = out_lim;
    op->err.limit = err_lim;
    op->w.ref = LUA_NOREF;
    op->out.buf = malloc(out_lim ? out_lim : 1);
    op->err.buf = malloc(err_lim ? err_lim : 1);
    if (!op->out.buf || !op->err.buf) { op_free(op); oom_raise(L, &argv, &envp); }
    int yieldable = lua_isyieldable(L);
    op->private_base = !yieldable;
    op->base = yieldable ? obleth_base() : event_base_new();
    int rc = op->base ? start(op, argv.v, envp.v) : ENOMEM;
    lua_pushstring(L, argv.v[0]);
    sv_free(&argv);
    sv_free(&envp);
    if (rc != 0) {
        if (op->private_base && op->base) event_base_free(op->base);
        op_free(op);
        lua_pushnil(L);
        lua_createtable(L, 0, 2);
        lua_pushliteral(L, "spawn");
        lua_setfield(L, -2, "code");
        lua_pushfstring(L, "cannot start %s: %s", lua_tostring(L, -3), strerror(rc));
        lua_setfield(L, -2, "message");
        return 2;
    }
    if (watch(op, timeout) != 0) {
        kill_group(op);
        waitpid(op->pid, NULL, 0); /* SIGKILLed: returns at once */
        if (op->private_base) event_base_free(op->base);
        op_free(op);
        return luaL_error(L, "out of memory");
    }
    if (op->private_base) {
        while (!op->done) event_base_loop(op->base, EVLOOP_ONCE);
        struct event_base *b = op->base;
        push_result(L, op);
        op_free(op);
        event_base_free(b);
        return 1;
    }
    op->next = g_ops;
    g_ops = op;
    obleth_wait_begin(L, &op->w, "proc.run");
    return lua_yield(L, 0);
}

/* At lua_close: children still running are killed and reaped, their state freed. */
static int ops_gc(lua_State *L) {
    (void)L;
    while (g_ops) {
        proc_op *op = g_ops;
        g_ops = op->next;
        if (!op->exited) {
            kill_group(op);
            waitpid(op->pid, NULL, 0);
        }
        op_free(op);
    }
    return 0;
}

int luaopen_obleth_proc(lua_State *L) {
    obleth_sentinel(L, "obleth.proc.ops", ops_gc);
    lua_newtable(L);
    lua_pushcfunction(L, l_run);
    lua_setfield(L, -2, "run");
    return 1;
}
