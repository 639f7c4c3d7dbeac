/*
 * ldap.c — obleth.ldap: a thin binding of libldap's asynchronous API on the
 * event loop, for signing users in against the site's directory
 * (docs/access.md "LDAP"). Every call that talks to the server yields the
 * calling task and is resumed when the answer is there: the TCP connect is
 * made here, non-blocking, then handed to libldap (ldap_init_fd); a bind
 * (ldap_sasl_bind, LDAP_SASL_SIMPLE) or a search (ldap_search_ext) is sent,
 * and ldap_result is polled with a zero timeout each time libevent says the
 * socket (LDAP_OPT_DESC) is readable. Never a blocking call on the loop (but
 * see "Host names" below); every operation has a deadline.
 *
 * Lua API
 * -------
 * ldap.open(url [, opts]) -> conn  |  nil, err
 *     url: "ldap://host[:port]" (port 389 by default) or "ldaps://host[:port]"
 *     (TLS from the first byte, port 636 by default). opts: timeout = 10
 *     (seconds for the connect and for each later exchange: the StartTLS
 *     request, the TLS handshake, each operation); starttls = false (on an
 *     ldap:// URL: the StartTLS extended operation, then TLS, before open
 *     returns); ca_file = nil (a PEM file of the CAs to trust; nil: the
 *     system's, OpenSSL's default paths). Over TLS (ldaps:// or starttls) the
 *     server's certificate is always verified, and its name checked against
 *     the URL's host (a DNS name, or an IP address against the certificate's IP
 *     SANs); a refusal is err.code "tls" with the reason in the message
 *     (OpenSSL's, e.g. "unable to get local issuer certificate", "hostname
 *     mismatch"). Raises outside a task.
 *     Host names: a name that is not an address is resolved with a blocking
 *     getaddrinfo; give an address to keep the loop free of DNS.
 *     TLS: OpenSSL, driven by the loop (SSL_connect on the non-blocking socket,
 *     resumed on readable / writable), then installed under libldap as a
 *     Sockbuf I/O layer (ber_sockbuf_add_io at the transport level) so every
 *     later bind and search goes through it; libldap's own TLS is not used (its
 *     handshake polls, blocking the loop).
 * conn:bind(dn, password) -> true  |  nil, err
 *     A simple bind. An empty password is refused here (err.code
 *     "invalid_credentials"): the server would take it as an unauthenticated
 *     bind and answer success. The password is never logged nor kept.
 * conn:search(base, scope, filter [, attrs [, opts]]) -> entries  |  nil, err
 *     scope: "base" | "one" | "sub". attrs: a list of attribute names (nil:
 *     all user attributes). opts: limit = 100 (entries at most; more is not an
 *     error: the first ones). entries = {{dn = "...", attrs = {name = {v, ...}}}, ...}
 *     (attribute names as the server spells them). A base that does not exist
 *     answers {} (no entries). Values put in the filter must be escaped with
 *     ldap.escape_filter.
 * conn:close()   idempotent; also __close and __gc. A task waiting on the
 *                connection is resumed with nil, err (code "closed").
 * ldap.escape_filter(s) -> s'   every byte but [A-Za-z0-9] and "-._@ " as \XX
 *                (RFC 4515 assertion value: an allowlist, not a blocklist)
 * ldap.escape_dn(s) -> s'       every byte but [A-Za-z0-9] and "-._@" as \XX
 *                (RFC 4514 attribute value)
 *
 * One operation at a time per connection: a call while another task waits on
 * it raises "connection is busy".
 *
 * Errors (expected failures, returned as nil, err): err = {code=, message=
 * [, ldap_code=]} with metatable "obleth.ldap.error" (tostring "code: message").
 * code: "invalid_credentials" (LDAP result 49, or an empty password),
 * "connection" (cannot connect, or the connection was lost), "timeout" (the
 * deadline passed; the operation is abandoned), "closed", "invalid" (a bad
 * URL, filter or DN, an unreadable CA file), "tls" (the server refused
 * StartTLS, the handshake failed, or its certificate was refused: the message
 * says which and why), "error" (the rest; ldap_code is the LDAP result code).
 * Misuse (wrong types, a closed or busy connection) raises.
 */
#define _POSIX_C_SOURCE 200809L
#define LDAP_DEPRECATED 0
#include "ldap.h"
#include "host.h"
#include "util.h"

#include <event2/event.h>
#include <lauxlib.h>
#include <ldap.h>
#include <lua.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* libldap exports ldap_init_fd (OPENLDAP_2.5; since 2.4) but declares it in its private
 * ldap_pvt.h, which libldap-dev does not ship: declared here as SSSD does, for the same reason
 * (the connect is made non-blocking by the caller, then handed to libldap). */
#ifndef LDAP_PROTO_TCP
#define LDAP_PROTO_TCP 1
#endif
int ldap_init_fd(ber_socket_t fd, int proto, LDAP_CONST char *url, LDAP **ldp);

#define CONN_MT "obleth.ldap.conn"
#define ERROR_MT "obleth.ldap.error"

enum op { OP_IDLE, OP_CONNECT, OP_STARTTLS, OP_HANDSHAKE, OP_BIND, OP_SEARCH, OP_CLOSED };
enum tls { TLS_NONE, TLS_LDAPS, TLS_STARTTLS };

typedef struct conn_ud {
    LDAP *ld;          /* NULL until connected, and once closed */
    int fd;            /* the socket while connecting (libldap owns it after) */
    char *url;         /* malloc'd, while connecting */
    char *host;        /* malloc'd, while connecting over TLS: the name the certificate must have */
    char *ca_file;     /* malloc'd, while connecting over TLS (NULL: the system's CAs) */
    SSL *ssl;          /* during the handshake; the Sockbuf layer owns it after (tls_io) */
    enum tls tls;
    struct event *ev;
    enum op op;
    int msgid;
    int limit;         /* search: entries at most */
    int self_ref;      /* registry ref to the userdata while connecting */
    double timeout;    /* seconds per operation */
    double deadline;   /* monotonic seconds */
    obleth_waiter w;
} conn_ud;

static void conn_cb(evutil_socket_t fd, short what, void *arg);

/* ---- errors ------------------------------------------------------------- */

static void push_err(lua_State *L, const char *code, const char *msg, int ldap_code) {
    obleth_error_push(L, ERROR_MT, code, msg, msg ? strlen(msg) : 0, "the directory failed without a message");
    if (ldap_code >= 0) {
        lua_pushinteger(L, ldap_code);
        lua_setfield(L, -2, "ldap_code");
    }
}

static const char *code_of(int rc) {
    switch (rc) {
    case LDAP_INVALID_CREDENTIALS: return "invalid_credentials";
    case LDAP_SERVER_DOWN:
    case LDAP_CONNECT_ERROR:
    case LDAP_UNAVAILABLE: return "connection";
    case LDAP_TIMEOUT:
    case LDAP_TIMELIMIT_EXCEEDED: return "timeout";
    case LDAP_FILTER_ERROR:
    case LDAP_INVALID_DN_SYNTAX:
    case LDAP_PARAM_ERROR: return "invalid";
    default: return "error";
    }
}

/* Pushes the error for LDAP result code rc (with the server's message when there is one). */
static void push_ldap_err(lua_State *L, int rc, const char *server_msg) {
    if (server_msg && *server_msg)
        lua_pushfstring(L, "%s (%s)", ldap_err2string(rc), server_msg);
    else
        lua_pushstring(L, ldap_err2string(rc));
    push_err(L, code_of(rc), lua_tostring(L, -1), rc);
    lua_remove(L, -2);
}

/* ---- the connection's state ------------------------------------------------ */

static conn_ud *check_conn(lua_State *L, int i) { return luaL_checkudata(L, i, CONN_MT); }

static conn_ud *check_open(lua_State *L, int i) {
    conn_ud *c = check_conn(L, i);
    if (!c->ld || c->op == OP_CLOSED) luaL_error(L, "the LDAP connection is closed");
    if (c->op != OP_IDLE) luaL_error(L, "the LDAP connection is busy (another task waits on it)");
    return c;
}

/* Watch fd for `what` until the deadline. */
static int watch(conn_ud *c, int fd, short what) {
    struct timeval tv = obleth_tv(c->deadline - obleth_mono());
    return obleth_fd_wait(&c->ev, fd, what, conn_cb, c, &tv);
}

static int ldap_fd(conn_ud *c) {
    int fd = -1;
    if (ldap_get_option(c->ld, LDAP_OPT_DESC, &fd) != LDAP_OPT_SUCCESS) return -1;
    return fd;
}

/* Resume the waiting task with the n values on its stack. */
static void done(conn_ud *c, int n) {
    c->op = c->ld ? OP_IDLE : OP_CLOSED;
    c->msgid = -1;
    if (c->ev) event_del(c->ev);
    obleth_wait_resume(&c->w, n);
}

/* ---- TLS under libldap: a Sockbuf I/O layer over an OpenSSL session ------------ */

/* The layer owns the SSL (sbiod_pvt) from ber_sockbuf_add_io to sbi_remove (ldap_unbind_ext).
 * It reads and writes the socket itself (SSL_set_fd); the layers below it (libldap's tcp and
 * read-ahead) are not called once it is there. A read or write that would block answers -1 with
 * errno EWOULDBLOCK, as a non-blocking socket does: libldap then waits for the next readable. */
static int tls_setup(Sockbuf_IO_Desc *sbiod, void *arg) {
    sbiod->sbiod_pvt = arg;
    return 0;
}

static int tls_remove(Sockbuf_IO_Desc *sbiod) {
    SSL_free(sbiod->sbiod_pvt);
    sbiod->sbiod_pvt = NULL;
    return 0;
}

static int tls_ctrl(Sockbuf_IO_Desc *sbiod, int opt, void *arg) {
    /* decrypted bytes already read off the socket: libldap asks before it polls the socket.
     * SSL_pending (not SSL_has_pending): a part of a record left is still on the socket, so the
     * socket turns readable; the default read_ahead off keeps OpenSSL from reading past a record */
    if (opt == LBER_SB_OPT_DATA_READY && sbiod->sbiod_pvt && SSL_pending(sbiod->sbiod_pvt) > 0) return 1;
    return LBER_SBIOD_CTRL_NEXT(sbiod, opt, arg);
}

static ber_slen_t tls_rw(Sockbuf_IO_Desc *sbiod, void *buf, ber_len_t len, int writing) {
    SSL *ssl = sbiod->sbiod_pvt;
    if (!ssl) { errno = EBADF; return -1; }
    if (len > (ber_len_t)INT32_MAX) len = INT32_MAX;
    ERR_clear_error();
    int n = writing ? SSL_write(ssl, buf, (int)len) : SSL_read(ssl, buf, (int)len);
    if (n > 0) return n;
    switch (SSL_get_error(ssl, n)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: errno = EWOULDBLOCK; return -1;
    case SSL_ERROR_ZERO_RETURN: return 0; /* the server closed TLS */
    default: ERR_clear_error(); errno = ECONNRESET; return -1;
    }
}

static ber_slen_t tls_read(Sockbuf_IO_Desc *sbiod, void *buf, ber_len_t len) { return tls_rw(sbiod, buf, len, 0); }
static ber_slen_t tls_write(Sockbuf_IO_Desc *sbiod, void *buf, ber_len_t len) { return tls_rw(sbiod, buf, len, 1); }

static int tls_close(Sockbuf_IO_Desc *sbiod) {
    if (sbiod->sbiod_pvt) { /* a close_notify if the socket takes it now; never waited for */
        ERR_clear_error();
        SSL_shutdown(sbiod->sbiod_pvt);
        ERR_clear_error();
    }
    return 0;
}

static Sockbuf_IO tls_io = {tls_setup, tls_remove, tls_ctrl, tls_read, tls_write, tls_close};

/* ---- connecting --------------------------------------------------------------- */

/* Free what only opening needs (the URL, the host, the CA file's name, an SSL not handed over). */
static void drop_open_state(conn_ud *c) {
    free(c->url);
    c->url = NULL;
    free(c->host);
    c->host = NULL;
    free(c->ca_file);
    c->ca_file = NULL;
    if (c->ssl) SSL_free(c->ssl);
    c->ssl = NULL;
}

/* Opening failed: everything is released, and the task resumed with nil, {code, msg}. */
static void open_failed(conn_ud *c, const char *code, const char *msg) {
    lua_State *co = c->w.co;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    drop_open_state(c);
    if (c->ld) ldap_unbind_ext(c->ld, NULL, NULL);
    c->ld = NULL;
    luaL_unref(co, LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
    lua_pushnil(co);
    push_err(co, code, msg, -1);
    c->op = OP_CLOSED;
    if (c->ev) event_del(c->ev);
    obleth_wait_resume(&c->w, 2);
}

static void connect_failed(conn_ud *c, const char *msg) { open_failed(c, "connection", msg); }

/* Opened (and over TLS when asked): resume the task with the connection. */
static void open_done(conn_ud *c) {
    lua_State *co = c->w.co;
    drop_open_state(c);
    c->op = OP_IDLE;
    if (c->ev) event_del(c->ev);
    lua_rawgeti(co, LUA_REGISTRYINDEX, c->self_ref);
    luaL_unref(co, LUA_REGISTRYINDEX, c->self_ref);
    c->self_ref = LUA_NOREF;
    obleth_wait_resume(&c->w, 1);
}

/* Why the handshake failed, in words: the certificate's refusal first (OpenSSL's reason), then
 * the TLS error, then what the socket said. */
static void tls_reason(conn_ud *c, int ret, char *buf, size_t n) {
    long vr = SSL_get_verify_result(c->ssl);
    unsigned long e = ERR_peek_last_error();
    if (vr != X509_V_OK) {
        snprintf(buf, n, "the LDAP server's certificate was refused: %s (%s)", X509_verify_cert_error_string(vr),
                 c->ca_file ? "CA file" : "the system's CAs");
        if (c->ca_file) { /* name the file: the usual cause is the wrong one */
            size_t used = strlen(buf);
            snprintf(buf + used - 1, n - used + 1, " %s)", c->ca_file);
        }
    } else if (e) {
        char eb[200];
        ERR_error_string_n(e, eb, sizeof eb);
        snprintf(buf, n, "TLS handshake with the LDAP server failed: %s", eb);
    } else if (SSL_get_error(c->ssl, ret) == SSL_ERROR_SYSCALL) {
        snprintf(buf, n, "TLS handshake with the LDAP server failed: %s",
                 errno ? strerror(errno) : "the server closed the connection");
    } else {
        snprintf(buf, n, "TLS handshake with the LDAP server failed");
    }
    ERR_clear_error();
}

/* Start TLS on the connection's socket: an SSL that verifies the server's certificate against the CA
 * file (or the system's) and checks its name (or address) against the URL's host. */
static void begin_handshake(conn_ud *c) {
    char msg[512];
    int fd = ldap_fd(c);
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx || fd < 0) {
        if (ctx) SSL_CTX_free(ctx);
        open_failed(c, "tls", "cannot set up TLS (OpenSSL)");
        return;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* liblber retries a write that would block from where it got to, not with the same pointer */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    int loaded = c->ca_file ? SSL_CTX_load_verify_locations(ctx, c->ca_file, NULL) : SSL_CTX_set_default_verify_paths(ctx);
    if (loaded != 1) {
        unsigned long e = ERR_peek_last_error();
        char eb[200] = "";
        if (e) ERR_error_string_n(e, eb, sizeof eb);
        ERR_clear_error();
        snprintf(msg, sizeof msg, "cannot read the CA file %s: %s", c->ca_file ? c->ca_file : "(the system's)",
                 *eb ? eb : "no certificate in it");
        SSL_CTX_free(ctx);
        open_failed(c, "invalid", msg);
        return;
    }
    c->ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the SSL keeps its own reference */
    if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
        open_failed(c, "tls", "cannot set up TLS (OpenSSL)");
        return;
    }
    unsigned char addr[16];
    int is_ip = inet_pton(AF_INET, c->host, addr) == 1 || inet_pton(AF_INET6, c->host, addr) == 1;
    int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), c->host)
                   : SSL_set1_host(c->ssl, c->host) == 1 && SSL_set_tlsext_host_name(c->ssl, c->host) == 1;
    if (!ok) {
        ERR_clear_error();
        snprintf(msg, sizeof msg, "cannot check the LDAP server's certificate against the name %s", c->host);
        open_failed(c, "tls", msg);
        return;
    }
    SSL_set_connect_state(c->ssl);
    c->op = OP_HANDSHAKE;
    c->deadline = obleth_mono() + c->timeout;
    if (watch(c, fd, EV_WRITE) != 0) open_failed(c, "connection", "cannot watch the LDAP socket");
}

/* One step of the handshake: on, done (the layer installed under libldap), or failed. */
static void step_handshake(conn_ud *c, short what) {
    char msg[512];
    if (what & EV_TIMEOUT) { open_failed(c, "timeout", "the LDAP server did not finish the TLS handshake in time"); return; }
    ERR_clear_error();
    errno = 0;
    int ret = SSL_do_handshake(c->ssl);
    if (ret == 1) {
        Sockbuf *sb = NULL;
        if (ldap_get_option(c->ld, LDAP_OPT_SOCKBUF, &sb) != LDAP_OPT_SUCCESS || !sb ||
            ber_sockbuf_add_io(sb, &tls_io, LBER_SBIOD_LEVEL_TRANSPORT, c->ssl) != 0) {
            open_failed(c, "tls", "cannot put TLS under libldap");
            return;
        }
        c->ssl = NULL; /* the layer's now: freed by ldap_unbind_ext (tls_remove) */
        open_done(c);
        return;
    }
    int e = SSL_get_error(c->ssl, ret);
    int fd = ldap_fd(c);
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && fd >= 0) {
        if (watch(c, fd, e == SSL_ERROR_WANT_READ ? EV_READ : EV_WRITE) == 0) return;
        open_failed(c, "connection", "cannot watch the LDAP socket");
        return;
    }
    tls_reason(c, ret, msg, sizeof msg);
    open_failed(c, "tls", msg);
}

/* The StartTLS answer: on to the handshake, or the server's refusal. */
static void step_starttls(conn_ud *c, short what) {
    char msg[512];
    if (what & EV_TIMEOUT && obleth_mono() >= c->deadline) {
        open_failed(c, "timeout", "the LDAP server did not answer StartTLS in time");
        return;
    }
    LDAPMessage *res = NULL;
    struct timeval zero = {0, 0};
    int t = ldap_result(c->ld, c->msgid, LDAP_MSG_ALL, &zero, &res);
    if (t == 0) {
        int fd = ldap_fd(c);
        if (fd >= 0 && watch(c, fd, EV_READ) == 0) return;
        open_failed(c, "connection", "cannot watch the LDAP socket");
        return;
    }
    if (t < 0 || !res) {
        if (res) ldap_msgfree(res);
        open_failed(c, "connection", "the LDAP server closed the connection after StartTLS was asked");
        return;
    }
    int err = 0;
    char *emsg = NULL;
    int rc = ldap_parse_result(c->ld, res, &err, NULL, &emsg, NULL, NULL, 1);
    if (rc != LDAP_SUCCESS) err = rc;
    if (err != LDAP_SUCCESS) {
        snprintf(msg, sizeof msg, "the LDAP server refused StartTLS: %s%s%s%s", ldap_err2string(err),
                 emsg && *emsg ? " (" : "", emsg && *emsg ? emsg : "", emsg && *emsg ? ")" : "");
        ldap_memfree(emsg);
        open_failed(c, "tls", msg);
        return;
    }
    ldap_memfree(emsg);
    c->msgid = -1;
    Sockbuf *sb = NULL;
    if (ldap_get_option(c->ld, LDAP_OPT_SOCKBUF, &sb) == LDAP_OPT_SUCCESS && sb &&
        ber_sockbuf_ctrl(sb, LBER_SB_OPT_DATA_READY, NULL) > 0) {
        /* bytes after the answer, before our ClientHello: not from a server that speaks StartTLS */
        open_failed(c, "tls", "the LDAP server sent data in the clear after agreeing to StartTLS");
        return;
    }
    begin_handshake(c);
}

static void step_connect(conn_ud *c, short what) {
    char msg[256];
    if (what & EV_TIMEOUT) { connect_failed(c, "timed out connecting to the LDAP server"); return; }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
    if (soerr != 0) {
        snprintf(msg, sizeof msg, "cannot connect to the LDAP server: %s", strerror(soerr));
        connect_failed(c, msg);
        return;
    }
    LDAP *ld = NULL;
    int rc = ldap_init_fd(c->fd, LDAP_PROTO_TCP, c->url, &ld);
    if (rc != LDAP_SUCCESS || !ld) {
        snprintf(msg, sizeof msg, "libldap: %s", ldap_err2string(rc));
        connect_failed(c, msg);
        return;
    }
    c->fd = -1; /* libldap's now */
    int v3 = LDAP_VERSION3;
    ldap_set_option(ld, LDAP_OPT_PROTOCOL_VERSION, &v3);
    ldap_set_option(ld, LDAP_OPT_REFERRALS, LDAP_OPT_OFF);
    c->ld = ld;
    if (c->tls == TLS_LDAPS) { begin_handshake(c); return; }
    if (c->tls == TLS_STARTTLS) {
        int msgid = -1;
        rc = ldap_extended_operation(ld, LDAP_EXOP_START_TLS, NULL, NULL, NULL, &msgid);
        int fd = ldap_fd(c);
        if (rc != LDAP_SUCCESS || fd < 0) {
            snprintf(msg, sizeof msg, "cannot ask the LDAP server for StartTLS: %s", ldap_err2string(rc));
            open_failed(c, "connection", msg);
            return;
        }
        c->msgid = msgid;
        c->op = OP_STARTTLS;
        c->deadline = obleth_mono() + c->timeout;
        if (watch(c, fd, EV_READ) != 0) open_failed(c, "connection", "cannot watch the LDAP socket");
        return;
    }
    open_done(c);
}

/* ---- results ------------------------------------------------------------------ */

/* The bind's answer: true, or nil, err. */
static int push_bind(lua_State *L, conn_ud *c, LDAPMessage *res) {
    int err = 0;
    char *emsg = NULL;
    int rc = ldap_parse_result(c->ld, res, &err, NULL, &emsg, NULL, NULL, 0);
    if (rc != LDAP_SUCCESS) err = rc;
    if (err == LDAP_SUCCESS) {
        lua_pushboolean(L, 1);
        ldap_memfree(emsg);
        return 1;
    }
    lua_pushnil(L);
    push_ldap_err(L, err, emsg);
    ldap_memfree(emsg);
    return 2;
}

static void push_entry(lua_State *L, LDAP *ld, LDAPMessage *e) {
    lua_createtable(L, 0, 2);
    char *dn = ldap_get_dn(ld, e);
    lua_pushstring(L, dn ? dn : "");
    lua_setfield(L, -2, "dn");
    ldap_memfree(dn);
    lua_newtable(L);
    BerElement *ber = NULL;
    for (char *a = ldap_first_attribute(ld, e, &ber); a; a = ldap_next_attribute(ld, e, ber)) {
        struct berval **vals = ldap_get_values_len(ld, e, a);
        lua_newtable(L);
        for (int i = 0; vals && vals[i]; i++) {
            lua_pushlstring(L, vals[i]->bv_val, vals[i]->bv_len);
            lua_rawseti(L, -2, i + 1);
        }
        ldap_value_free_len(vals);
        lua_setfield(L, -2, a);
        ldap_memfree(a);
    }
    if (ber) ber_free(ber, 0);
    lua_setfield(L, -2, "attrs");
}

/* The search's answer: entries, or nil, err. */
static int push_search(lua_State *L, conn_ud *c, LDAPMessage *chain) {
    lua_newtable(L);
    int n = 0, err = LDAP_SUCCESS;
    char *emsg = NULL;
    for (LDAPMessage *m = ldap_first_message(c->ld, chain); m; m = ldap_next_message(c->ld, m)) {
        int t = ldap_msgtype(m);
        if (t == LDAP_RES_SEARCH_ENTRY) {
            if (n >= c->limit) continue;
            push_entry(L, c->ld, m);
            lua_rawseti(L, -2, ++n);
        } else if (t == LDAP_RES_SEARCH_RESULT) {
            int rc = ldap_parse_result(c->ld, m, &err, NULL, &emsg, NULL, NULL, 0);
            if (rc != LDAP_SUCCESS) err = rc;
        }
    }
    if (err == LDAP_SUCCESS || err == LDAP_SIZELIMIT_EXCEEDED || err == LDAP_NO_SUCH_OBJECT) {
        ldap_memfree(emsg);
        return 1;
    }
    lua_pop(L, 1);
    lua_pushnil(L);
    push_ldap_err(L, err, emsg);
    ldap_memfree(emsg);
    return 2;
}

/* ---- the socket's callback ----------------------------------------------------- */

static void conn_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    conn_ud *c = arg;
    lua_State *co = c->w.co;
    if (c->op == OP_CLOSED) { /* close() while a task waited: tell it */
        if (co) {
            lua_pushnil(co);
            push_err(co, "closed", "the LDAP connection was closed", -1);
            obleth_wait_resume(&c->w, 2);
        }
        return;
    }
    if (c->op == OP_CONNECT) { step_connect(c, what); return; }
    if (c->op == OP_STARTTLS) { step_starttls(c, what); return; }
    if (c->op == OP_HANDSHAKE) { step_handshake(c, what); return; }
    if (c->op != OP_BIND && c->op != OP_SEARCH) return;
    if (!co) { c->op = OP_IDLE; return; }
    LDAPMessage *res = NULL;
    struct timeval zero = {0, 0};
    int t = ldap_result(c->ld, c->msgid, LDAP_MSG_ALL, &zero, &res);
    if (t == 0) {
        if (obleth_mono() < c->deadline) {
            int sfd = ldap_fd(c);
            if (sfd >= 0 && watch(c, sfd, EV_READ) == 0) return;
        }
        ldap_abandon_ext(c->ld, c->msgid, NULL, NULL);
        lua_pushnil(co);
        push_err(co, "timeout", "the LDAP server did not answer in time", -1);
        done(c, 2);
        return;
    }
    if (t < 0 || !res) {
        int rc = LDAP_SERVER_DOWN;
        ldap_get_option(c->ld, LDAP_OPT_RESULT_CODE, &rc);
        if (res) ldap_msgfree(res);
        lua_pushnil(co);
        push_ldap_err(co, rc, NULL);
        done(c, 2);
        return;
    }
    int n = c->op == OP_BIND ? push_bind(co, c, res) : push_search(co, c, res);
    ldap_msgfree(res);
    done(c, n);
}

/* ---- Lua functions ------------------------------------------------------------- */

static int l_open(lua_State *L) {
    const char *url = luaL_checkstring(L, 1);
    double timeout = 10;
    int starttls = 0;
    const char *ca_file = NULL;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (lua_getfield(L, 2, "timeout") != LUA_TNIL) timeout = luaL_checknumber(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 2, "starttls") != LUA_TNIL) {
            luaL_checktype(L, -1, LUA_TBOOLEAN);
            starttls = lua_toboolean(L, -1);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 2, "ca_file") != LUA_TNIL) ca_file = luaL_checkstring(L, -1);
        lua_pop(L, 1); /* the string stays alive in the table at 2 until it is copied below */
    }
    luaL_argcheck(L, timeout > 0 && timeout < 1e6, 2, "timeout must be > 0");
    if (!lua_isyieldable(L))
        return luaL_error(L, "ldap.open must be called inside a task (loop.spawn), not from the main thread");
    LDAPURLDesc *lud = NULL;
    if (ldap_url_parse(url, &lud) != LDAP_URL_SUCCESS || !lud) {
        lua_pushnil(L);
        push_err(L, "invalid", "not an LDAP URL (ldap://host[:port] or ldaps://host[:port])", -1);
        return 2;
    }
    int ldaps = strcmp(lud->lud_scheme, "ldaps") == 0;
    if (!ldaps && strcmp(lud->lud_scheme, "ldap") != 0) {
        ldap_free_urldesc(lud);
        lua_pushnil(L);
        push_err(L, "invalid", "only ldap:// and ldaps:// URLs are supported (not ldapi://)", -1);
        return 2;
    }
    if (ldaps && starttls) {
        ldap_free_urldesc(lud);
        lua_pushnil(L);
        push_err(L, "invalid", "starttls is for an ldap:// URL (an ldaps:// one is TLS already)", -1);
        return 2;
    }
    char host[256], port[16];
    snprintf(host, sizeof host, "%s", lud->lud_host && *lud->lud_host ? lud->lud_host : "127.0.0.1");
    snprintf(port, sizeof port, "%d", lud->lud_port > 0 ? lud->lud_port : ldaps ? 636 : 389);
    ldap_free_urldesc(lud);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    int gerr = getaddrinfo(host, port, &hints, &ai);
    if (gerr == EAI_NONAME) { /* a name, not an address: resolved (blocking; see the header) */
        hints.ai_flags = AI_NUMERICSERV;
        gerr = getaddrinfo(host, port, &hints, &ai);
    }
    if (gerr != 0 || !ai) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot resolve the LDAP server %s: %s", host, gai_strerror(gerr));
        push_err(L, "connection", lua_tostring(L, -1), -1);
        lua_remove(L, -2); /* the message: nil, err */
        return 2;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    int cr = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
    int cerr = errno;
    freeaddrinfo(ai);
    if (fd < 0 || (cr != 0 && cerr != EINPROGRESS)) {
        if (fd >= 0) close(fd);
        lua_pushnil(L);
        lua_pushfstring(L, "cannot connect to the LDAP server %s:%s: %s", host, port, strerror(cerr));
        push_err(L, "connection", lua_tostring(L, -1), -1);
        lua_remove(L, -2); /* the message: nil, err */
        return 2;
    }
    lua_settop(L, 1);
    conn_ud *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->w.ref = LUA_NOREF;
    c->self_ref = LUA_NOREF;
    c->fd = fd;
    c->msgid = -1;
    c->timeout = timeout;
    c->deadline = obleth_mono() + timeout;
    c->op = OP_CONNECT;
    c->tls = ldaps ? TLS_LDAPS : starttls ? TLS_STARTTLS : TLS_NONE;
    luaL_setmetatable(L, CONN_MT);
    c->url = strdup(url);
    int copied = c->url != NULL;
    if (c->tls != TLS_NONE) {
        c->host = strdup(host);
        c->ca_file = ca_file ? strdup(ca_file) : NULL;
        copied = copied && c->host && (!ca_file || c->ca_file);
    }
    if (!copied || watch(c, fd, EV_WRITE) != 0) {
        close(fd);
        c->fd = -1;
        drop_open_state(c);
        c->op = OP_CLOSED;
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the LDAP socket", -1);
        return 2;
    }
    lua_pushvalue(L, -1);
    c->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    obleth_wait_begin(L, &c->w, "ldap.open");
    return lua_yield(L, 0);
}

/* The request was sent (msgid) or not (rc): wait for its answer. */
static int start(lua_State *L, conn_ud *c, int rc, int msgid, enum op op, const char *what) {
    if (rc != LDAP_SUCCESS) {
        lua_pushnil(L);
        push_ldap_err(L, rc, NULL);
        return 2;
    }
    int fd = ldap_fd(c);
    c->msgid = msgid;
    c->op = op;
    c->deadline = obleth_mono() + c->timeout;
    if (fd < 0 || watch(c, fd, EV_READ) != 0) {
        ldap_abandon_ext(c->ld, msgid, NULL, NULL);
        c->op = OP_IDLE;
        lua_pushnil(L);
        push_err(L, "connection", "cannot watch the LDAP socket", -1);
        return 2;
    }
    lua_settop(L, 1); /* the conn stays on the waiting task's stack: it cannot be collected */
    obleth_wait_begin(L, &c->w, what);
    return lua_yield(L, 0);
}

static int conn_bind(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    const char *dn = luaL_checkstring(L, 2);
    size_t pwlen;
    const char *pw = luaL_checklstring(L, 3, &pwlen);
    if (!lua_isyieldable(L)) return luaL_error(L, "an LDAP bind must be made inside a task (loop.spawn)");
    if (pwlen == 0) {
        lua_pushnil(L);
        push_err(L, "invalid_credentials", "an empty password is refused (it would be an unauthenticated bind)", -1);
        return 2;
    }
    struct berval cred;
    cred.bv_val = (char *)pw;
    cred.bv_len = pwlen;
    int msgid = -1;
    int rc = ldap_sasl_bind(c->ld, dn, LDAP_SASL_SIMPLE, &cred, NULL, NULL, &msgid);
    return start(L, c, rc, msgid, OP_BIND, "ldap bind");
}

static int conn_search(lua_State *L) {
    conn_ud *c = check_open(L, 1);
    const char *base = luaL_checkstring(L, 2);
    static const char *const scopes[] = {"base", "one", "sub", NULL};
    static const int scope_v[] = {LDAP_SCOPE_BASE, LDAP_SCOPE_ONELEVEL, LDAP_SCOPE_SUBTREE};
    int scope = scope_v[luaL_checkoption(L, 3, NULL, scopes)];
    const char *filter = luaL_checkstring(L, 4);
    int limit = 100;
    if (!lua_isnoneornil(L, 6)) {
        luaL_checktype(L, 6, LUA_TTABLE);
        if (lua_getfield(L, 6, "limit") != LUA_TNIL) limit = (int)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
        luaL_argcheck(L, limit > 0 && limit <= 100000, 6, "limit must be 1..100000");
    }
    if (!lua_isyieldable(L)) return luaL_error(L, "an LDAP search must be made inside a task (loop.spawn)");
    char **attrs = NULL;
    int nattrs = 0;
    if (!lua_isnoneornil(L, 5)) {
        luaL_checktype(L, 5, LUA_TTABLE);
        nattrs = (int)luaL_len(L, 5);
        luaL_argcheck(L, nattrs >= 0 && nattrs <= 64, 5, "at most 64 attributes");
        attrs = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nattrs + 1), 0);
        for (int i = 0; i < nattrs; i++) {
            lua_rawgeti(L, 5, i + 1);
            attrs[i] = (char *)luaL_checkstring(L, -1); /* kept alive by the table at 5 */
            lua_pop(L, 1);
        }
        attrs[nattrs] = NULL;
    }
    c->limit = limit;
    struct timeval tl;
    tl.tv_sec = (time_t)c->timeout;
    tl.tv_usec = 0;
    if (tl.tv_sec < 1) tl.tv_sec = 1;
    int msgid = -1;
    int rc = ldap_search_ext(c->ld, base, scope, filter, attrs, 0, NULL, NULL, &tl, limit, &msgid);
    return start(L, c, rc, msgid, OP_SEARCH, "ldap search");
}

static void release(conn_ud *c) {
    drop_open_state(c);
    if (c->ld) ldap_unbind_ext(c->ld, NULL, NULL); /* sends the unbind, closes the socket; no wait */
    c->ld = NULL;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

static int conn_close(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    int waiting = c->w.co != NULL && c->op != OP_CLOSED && c->op != OP_IDLE;
    if (c->self_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, c->self_ref);
        c->self_ref = LUA_NOREF;
    }
    release(c);
    c->op = OP_CLOSED;
    /* a waiting task is resumed on the next loop turn, with nil, err (conn_cb) */
    obleth_fd_wait_stop(c->ev, waiting, conn_cb, c);
    return 0;
}

static int conn_gc(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    release(c);
    c->op = OP_CLOSED;
    if (c->ev) { event_free(c->ev); c->ev = NULL; }
    obleth_wait_drop(L, &c->w);
    return 0;
}

static int conn_tostring(lua_State *L) {
    conn_ud *c = check_conn(L, 1);
    lua_pushfstring(L, "obleth.ldap.conn (%s)", c->ld ? "open" : "closed");
    return 1;
}

/* Every byte outside the allowlist as \XX (two hex digits). */
static int escape(lua_State *L, const char *allow) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            (ch != '\0' && strchr(allow, ch))) {
            luaL_addchar(&b, (char)ch);
        } else {
            char hex[4];
            snprintf(hex, sizeof hex, "\\%02x", ch);
            luaL_addlstring(&b, hex, 3);
        }
    }
    luaL_pushresult(&b);
    return 1;
}

static int l_escape_filter(lua_State *L) { return escape(L, "-._@ "); }
static int l_escape_dn(lua_State *L) { return escape(L, "-._@"); }

int luaopen_obleth_ldap(lua_State *L) {
    static const luaL_Reg conn_m[] = {
        {"bind", conn_bind}, {"search", conn_search}, {"close", conn_close}, {NULL, NULL}};
    obleth_newclass(L, CONN_MT,
                    &(obleth_class){.methods = conn_m, .gc = conn_gc, .close = conn_close, .tostring = conn_tostring});
    obleth_error_class(L, ERROR_MT);
    static const luaL_Reg fns[] = {
        {"open", l_open}, {"escape_filter", l_escape_filter}, {"escape_dn", l_escape_dn}, {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
