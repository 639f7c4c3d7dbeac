/*
 * main.c — the obleth command: sets up the Lua runtime and the event loop,
 * then runs a Lua file, a chunk of code, or one of the product's commands
 * (implemented in lua/obleth/cli/<command>.lua) as the main task.
 *
 * The process exits when the main task ends: with the integer it returns,
 * 1 if it raised (the error and traceback go to stderr), else 0.
 */
#define _GNU_SOURCE
#include "host.h"

#include <curl/curl.h>
#include <libgen.h>
#include <limits.h>
#include <lualib.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void obleth_run_main(lua_State *L, int nargs);
int obleth_exit_code(void);
int obleth_main_done(void);
void obleth_set_main_state(lua_State *L);
void obleth_sys_set_paths(const char *lua_dir, const char *share_dir, const char *exe);

static const char usage[] =
    "usage: obleth <command> [options]\n"
    "\n"
    "Runs large-language-model servers as Slurm jobs and routes OpenAI-style\n"
    "requests to their healthy replicas.\n"
    "\n"
    "commands:\n"
    "  serve               the Management API and the OpenAI-compatible router\n"
    "  provisioner         keep every managed model's replicas running on Slurm\n"
    "                      (also run as obleth-provisioner)\n"
    "  slurm SUBCOMMAND    talk to slurmrestd: ping, partitions, nodes, jobs, job ID,\n"
    "                      submit, cancel ID, token-expiry (--json for scripts)\n"
    "  store copy --from LOCATION --to LOCATION\n"
    "                      copy a whole store into an empty one (SQLite to PostgreSQL)\n"
    "  repl [--write]      interactive Lua on the live cluster: slurm, api, plan()\n"
    "                      (a dry run of the next pass), policy.try(FILE), help()\n"
    "  smoke-engine        a tiny OpenAI-shaped engine for end-to-end checks\n"
    "  lua FILE [ARGS]     run a Lua file in the obleth runtime\n"
    "  lua -e CODE         run a chunk of Lua code\n"
    "  version             print the version\n"
    "  help                print this help\n";

/* snprintf into a path buffer; a path that does not fit is left empty. */
static void pathf(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *dst, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(dst, n, fmt, ap);
    va_end(ap);
    if (r < 0 || (size_t)r >= n) dst[0] = 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Find the Lua modules: $OBLETH_LUA_DIR, the source tree (build/obleth ->
   ../lua), or the installed tree (PREFIX/bin/obleth -> PREFIX/share/obleth/lua). */
static void setup_paths(lua_State *L, char *exe_buf, size_t exe_len) {
    char lua_dir[PATH_MAX] = "", share_dir[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/exe", exe_buf, exe_len - 1);
    if (n < 0) n = 0;
    exe_buf[n] = 0;
    char tmp[PATH_MAX];
    pathf(tmp, sizeof tmp, "%s", exe_buf);
    const char *bindir = dirname(tmp);
    const char *env = getenv("OBLETH_LUA_DIR");
    char probe[PATH_MAX + 64];
    if (env && *env) {
        pathf(lua_dir, sizeof lua_dir, "%s", env);
    } else {
        /* build/obleth and build/asan/obleth in a source tree */
        static const char *up[] = {"..", "../..", NULL};
        for (int i = 0; up[i] && !lua_dir[0]; i++) {
            pathf(probe, sizeof probe, "%s/%s/lua/obleth/cli/init.lua", bindir, up[i]);
            if (is_file(probe)) {
                pathf(lua_dir, sizeof lua_dir, "%s/%s/lua", bindir, up[i]);
                pathf(share_dir, sizeof share_dir, "%s/%s", bindir, up[i]);
            }
        }
        if (!lua_dir[0]) {
            pathf(lua_dir, sizeof lua_dir, "%s/../share/obleth/lua", bindir);
            pathf(share_dir, sizeof share_dir, "%s/../share/obleth", bindir);
        }
    }
    if (!share_dir[0]) {
        pathf(probe, sizeof probe, "%s/..", lua_dir);
        pathf(share_dir, sizeof share_dir, "%s", probe);
    }
    char rl[PATH_MAX], rs[PATH_MAX];
    if (realpath(lua_dir, rl)) pathf(lua_dir, sizeof lua_dir, "%s", rl);
    if (realpath(share_dir, rs)) pathf(share_dir, sizeof share_dir, "%s", rs);
    if (!is_dir(lua_dir)) fprintf(stderr, "obleth: warning: Lua modules not found at %s (set OBLETH_LUA_DIR)\n", lua_dir);
    obleth_sys_set_paths(lua_dir, share_dir, exe_buf);

    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", lua_dir, lua_dir);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
}

static void set_arg(lua_State *L, char **argv, int argc, int script) {
    lua_createtable(L, argc - script, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    char *base = basename(argv[0]);
    const char *cmd = NULL;
    int first_arg = 2;
    if (strcmp(base, "obleth-provisioner") == 0) {
        cmd = "provisioner";
        first_arg = 1;
    } else if (argc >= 2) {
        cmd = argv[1];
    }
    if (!cmd || strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage, cmd ? stdout : stderr);
        return cmd ? 0 : 2;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("obleth %s (%s)\n", OBLETH_VERSION, LUA_RELEASE);
        return 0;
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || obleth_loop_init() != 0) {
        fputs("obleth: cannot initialise libcurl or libevent\n", stderr);
        return 1;
    }
    lua_State *L = luaL_newstate();
    if (!L) { fputs("obleth: out of memory\n", stderr); return 1; }
    luaL_openlibs(L);
    obleth_set_main_state(L);
    obleth_open_modules(L);
    static char exe[PATH_MAX];
    setup_paths(L, exe, sizeof exe);

    int status = 0;
    if (strcmp(cmd, "lua") == 0) {
        if (argc < 3) {
            fputs("usage: obleth lua FILE [ARGS] | obleth lua -e CODE [ARGS]\n", stderr);
            status = 2;
        } else if (strcmp(argv[2], "-e") == 0) {
            if (argc < 4) { fputs("obleth lua -e: missing CODE\n", stderr); status = 2; }
            else {
                set_arg(L, argv, argc, 3);
                if (luaL_loadbuffer(L, argv[3], strlen(argv[3]), "=(command line)") != LUA_OK) {
                    fprintf(stderr, "obleth: %s\n", lua_tostring(L, -1));
                    status = 1;
                } else {
                    for (int i = 4; i < argc; i++) lua_pushstring(L, argv[i]);
                    obleth_run_main(L, argc - 4);
                }
            }
        } else {
            set_arg(L, argv, argc, 2);
            if (luaL_loadfile(L, argv[2]) != LUA_OK) {
                fprintf(stderr, "obleth: %s\n", lua_tostring(L, -1));
                status = 1;
            } else {
                for (int i = 3; i < argc; i++) lua_pushstring(L, argv[i]);
                obleth_run_main(L, argc - 3);
            }
        }
    } else {
        /* product commands live in Lua: require("obleth.cli").main(cmd, args) */
        set_arg(L, argv, argc, first_arg - 1);
        static const char boot[] =
            "local cmd = ...\n"
            "local args = {}\n"
            "for i = 1, #arg do args[i] = arg[i] end\n"
            "return require('obleth.cli').main(cmd, args)\n";
        if (luaL_loadbuffer(L, boot, sizeof boot - 1, "=obleth") != LUA_OK) {
            fprintf(stderr, "obleth: %s\n", lua_tostring(L, -1));
            status = 1;
        } else {
            lua_pushstring(L, cmd);
            obleth_run_main(L, 1);
        }
    }
    if (status == 0) {
        obleth_loop_dispatch();
        status = obleth_main_done() ? obleth_exit_code() : 1;
    }
    fflush(stdout);
    lua_close(L);
    obleth_loop_free();
    curl_global_cleanup();
    return status;
}
