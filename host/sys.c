/*
 * sys.c — small operating-system helpers for Lua (obleth.sys).
 *
 *   version                 "0.1.0"
 *   paths                   {lua = dir, share = dir, exe = path}: where the
 *                           host found its Lua modules and shared files
 *                           (recipes/, web/)
 *   getpid()                -> integer
 *   kill(pid, sig)          sig: "TERM"|"KILL"|"INT"|"HUP"|"STOP"|"CONT"|0 -> true | nil, err
 *   hostname()              -> string
 *   random_hex(nbytes)      -> 2*nbytes hex chars from getrandom(2)
 *   consteq(a, b)           -> boolean; time depends only on the lengths
 *   stat(path[, nofollow])  -> {type="file"|"dir"|"link"|"other", size=, mtime=, mode=, uid=, dev=, ino=}
 *                           | nil, err (nofollow: lstat)
 *   geteuid()               -> integer: the effective user id (the service user)
 *   realpath(path)          -> the absolute path with no symbolic link, "." or ".." | nil, err
 *   listdir(path)           -> array of names (no "." / "..") | nil, err
 *   mkdir(path, mode?)      -> true | nil, err (exists is fine)
 *   rename(from, to)        -> true | nil, err (atomic on one filesystem)
 *   chmod(path, mode)       -> true | nil, err
 *   isatty(fd)              -> boolean
 *   sd_notify(state)        -> true if a notification socket was set (systemd)
 *   exit_now(code)          _exit(2): no cleanup — for fault injection only
 *   nofile([n])             -> soft, hard: the descriptor limit (RLIMIT_NOFILE); with n, the
 *                           soft limit is first set to n (at most the hard limit)
 *   trim_memory()           -> true when the C library gave free heap memory back to the
 *                           system (glibc's malloc_trim), false otherwise: after a
 *                           provisioner pass whose decoded job listing is garbage now
 *   user_groups(name)       -> array of the names of the user's groups in this host's
 *                           databases (NSS: files, LDAP, sssd ...), the primary group
 *                           first | nil, err when the user is unknown here
 */
#define _GNU_SOURCE
#include "host.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef OBLETH_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static char g_lua_dir[4096], g_share_dir[4096], g_exe[4096];

void obleth_sys_set_paths(const char *lua_dir, const char *share_dir, const char *exe) {
    snprintf(g_lua_dir, sizeof g_lua_dir, "%s", lua_dir);
    snprintf(g_share_dir, sizeof g_share_dir, "%s", share_dir);
    snprintf(g_exe, sizeof g_exe, "%s", exe);
}

static int push_errno(lua_State *L, const char *what) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", what, strerror(errno));
    return 2;
}

static int l_getpid(lua_State *L) { lua_pushinteger(L, getpid()); return 1; }

static int l_kill(lua_State *L) {
    lua_Integer pid = luaL_checkinteger(L, 1);
    int sig = 0;
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *s = lua_tostring(L, 2);
        static const struct { const char *n; int s; } t[] = {{"TERM", SIGTERM}, {"KILL", SIGKILL},
            {"INT", SIGINT}, {"HUP", SIGHUP}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"USR1", SIGUSR1}, {NULL, 0}};
        int found = 0;
        for (int i = 0; t[i].n; i++) if (strcmp(t[i].n, s) == 0) { sig = t[i].s; found = 1; }
        if (!found) return luaL_argerror(L, 2, "unknown signal name");
    } else {
        sig = (int)luaL_optinteger(L, 2, SIGTERM);
    }
    luaL_argcheck(L, pid > 0, 1, "pid must be > 0");
    if (kill((pid_t)pid, sig) != 0) return push_errno(L, "kill");
    lua_pushboolean(L, 1);
    return 1;
}

static int l_hostname(lua_State *L) {
    char h[256];
    if (gethostname(h, sizeof h) != 0) return push_errno(L, "gethostname");
    h[sizeof h - 1] = 0;
    lua_pushstring(L, h);
    return 1;
}

static int l_random_hex(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0 && n <= 256, 1, "1..256 bytes");
    unsigned char b[256];
    size_t got = 0;
    while (got < (size_t)n) {
        ssize_t r = getrandom(b + got, (size_t)n - got, 0);
        if (r < 0) { if (errno == EINTR) continue; return push_errno(L, "getrandom"); }
        got += (size_t)r;
    }
    char hex[513];
    for (lua_Integer i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    lua_pushlstring(L, hex, (size_t)n * 2);
    return 1;
}

static int l_consteq(lua_State *L) {
    size_t an, bn;
    const char *a = luaL_checklstring(L, 1, &an);
    const char *b = luaL_checklstring(L, 2, &bn);
    unsigned char d = (unsigned char)(an != bn);
    size_t n = an < bn ? an : bn;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    lua_pushboolean(L, d == 0);
    return 1;
}

/* stat(path[, nofollow]): {type = "file"|"dir"|"link"|"other", size, mtime, mode}; with nofollow
 * true a symbolic link is described itself (lstat), type "link". */
static int l_stat(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    int nofollow = lua_toboolean(L, 2);
    struct stat st;
    if ((nofollow ? lstat(p, &st) : stat(p, &st)) != 0) return push_errno(L, p);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "link" : "other");
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)st.st_size);
    lua_setfield(L, -2, "size");
    lua_pushnumber(L, (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9);
    lua_setfield(L, -2, "mtime");
    lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
    lua_setfield(L, -2, "mode");
    lua_pushinteger(L, (lua_Integer)st.st_uid);
    lua_setfield(L, -2, "uid");
    lua_pushinteger(L, (lua_Integer)st.st_dev);
    lua_setfield(L, -2, "dev");
    lua_pushinteger(L, (lua_Integer)st.st_ino);
    lua_setfield(L, -2, "ino");
    return 1;
}

static int l_geteuid(lua_State *L) { lua_pushinteger(L, (lua_Integer)geteuid()); return 1; }

static int l_realpath(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    char buf[PATH_MAX];
    if (!realpath(p, buf)) return push_errno(L, p);
    lua_pushstring(L, buf);
    return 1;
}

static int l_listdir(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    DIR *d = opendir(p);
    if (!d) return push_errno(L, p);
    lua_newtable(L);
    int i = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        lua_pushstring(L, e->d_name); /* OOM here is fatal; acceptable */
        lua_rawseti(L, -2, ++i);
    }
    closedir(d);
    return 1;
}

static int l_mkdir(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    mode_t mode = (mode_t)luaL_optinteger(L, 2, 0755);
    if (mkdir(p, mode) != 0 && errno != EEXIST) return push_errno(L, p);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_rename(lua_State *L) {
    const char *a = luaL_checkstring(L, 1), *b = luaL_checkstring(L, 2);
    if (rename(a, b) != 0) return push_errno(L, "rename");
    lua_pushboolean(L, 1);
    return 1;
}

static int l_chmod(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    lua_Integer mode = luaL_checkinteger(L, 2);
    luaL_argcheck(L, mode >= 0 && mode <= 07777, 2, "mode must be 0..07777");
    if (chmod(p, (mode_t)mode) != 0) return push_errno(L, p);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_isatty(lua_State *L) {
    lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 0)));
    return 1;
}

static int l_sd_notify(lua_State *L) {
    const char *state = luaL_checkstring(L, 1);
#ifdef OBLETH_HAVE_SYSTEMD
    int r = sd_notify(0, state);
    lua_pushboolean(L, r > 0);
#else
    (void)state;
    lua_pushboolean(L, 0);
#endif
    return 1;
}

static int l_exit_now(lua_State *L) {
    fflush(stdout);
    fflush(stderr);
    _exit((int)luaL_optinteger(L, 1, 0));
}

/* Buffers live in userdata (owned by the Lua stack), so nothing leaks if a push raises. */
static int l_nofile(lua_State *L) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return push_errno(L, "getrlimit");
    if (!lua_isnoneornil(L, 1)) {
        lua_Integer n = luaL_checkinteger(L, 1);
        luaL_argcheck(L, n >= 16, 1, "at least 16");
        rlim_t want = (rlim_t)n;
        if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return push_errno(L, "setrlimit");
    }
    lua_pushinteger(L, rl.rlim_cur == RLIM_INFINITY ? LUA_MAXINTEGER : (lua_Integer)rl.rlim_cur);
    lua_pushinteger(L, rl.rlim_max == RLIM_INFINITY ? LUA_MAXINTEGER : (lua_Integer)rl.rlim_max);
    return 2;
}

static int l_user_groups(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    struct passwd pw, *pwp = NULL;
    size_t bufsz = 4096;
    int rc;
    for (;;) {
        char *buf = lua_newuserdatauv(L, bufsz, 0);
        rc = getpwnam_r(name, &pw, buf, bufsz, &pwp);
        if (rc != ERANGE || bufsz >= (1u << 20)) break;
        lua_pop(L, 1);
        bufsz *= 2;
    }
    if (rc != 0) {
        errno = rc;
        return push_errno(L, "getpwnam_r");
    }
    if (pwp == NULL) {
        lua_pushnil(L);
        lua_pushfstring(L, "user %s is not in this host's user database", name);
        return 2;
    }
    gid_t primary = pw.pw_gid;
    int ng = 64;
    gid_t *gids = lua_newuserdatauv(L, (size_t)ng * sizeof(gid_t), 0);
    if (getgrouplist(name, primary, gids, &ng) < 0) {
        int want = ng;
        gids = lua_newuserdatauv(L, (size_t)want * sizeof(gid_t), 0);
        ng = want;
        if (getgrouplist(name, primary, gids, &ng) < 0) {
            lua_pushnil(L);
            lua_pushfstring(L, "getgrouplist %s: the group list changed while it was read", name);
            return 2;
        }
    }
    lua_createtable(L, ng, 0);
    int out = lua_gettop(L), n = 0;
    size_t gbufsz = 4096;
    char *gbuf = lua_newuserdatauv(L, gbufsz, 0);
    for (int i = 0; i < ng; i++) {
        struct group gr, *grp = NULL;
        for (;;) {
            rc = getgrgid_r(gids[i], &gr, gbuf, gbufsz, &grp);
            if (rc != ERANGE || gbufsz >= (1u << 24)) break;
            gbufsz *= 2;
            lua_pop(L, 1);
            gbuf = lua_newuserdatauv(L, gbufsz, 0);
        }
        if (rc != 0 || grp == NULL) continue; /* a gid without a name cannot match AllowGroups */
        int dup = 0;
        for (int j = 0; j < i; j++) {
            if (gids[j] == gids[i]) dup = 1;
        }
        if (dup) continue;
        lua_pushstring(L, grp->gr_name);
        lua_rawseti(L, out, ++n);
    }
    lua_settop(L, out);
    return 1;
}

static int l_trim_memory(lua_State *L) {
#ifdef __GLIBC__
    lua_pushboolean(L, malloc_trim(0));
#else
    lua_pushboolean(L, 0);
#endif
    return 1;
}

int luaopen_obleth_sys(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"getpid", l_getpid},     {"kill", l_kill},       {"hostname", l_hostname},
        {"random_hex", l_random_hex}, {"consteq", l_consteq}, {"stat", l_stat},
        {"listdir", l_listdir},   {"mkdir", l_mkdir},     {"rename", l_rename}, {"chmod", l_chmod},
        {"isatty", l_isatty},     {"sd_notify", l_sd_notify}, {"exit_now", l_exit_now},
        {"user_groups", l_user_groups}, {"nofile", l_nofile}, {"geteuid", l_geteuid},
        {"realpath", l_realpath}, {"trim_memory", l_trim_memory},
        {NULL, NULL}};
    luaL_newlib(L, funcs);
    lua_pushliteral(L, OBLETH_VERSION);
    lua_setfield(L, -2, "version");
    lua_createtable(L, 0, 3);
    lua_pushstring(L, g_lua_dir);
    lua_setfield(L, -2, "lua");
    lua_pushstring(L, g_share_dir);
    lua_setfield(L, -2, "share");
    lua_pushstring(L, g_exe);
    lua_setfield(L, -2, "exe");
    lua_setfield(L, -2, "paths");
    return 1;
}
