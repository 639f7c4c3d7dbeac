/*
 * evhttp_proxy.c — the floor of obleth's HTTP layer, for spec/bench/router.sh:
 * a bare reverse proxy on the same libevent evhttp server and client that
 * obleth serve uses, with none of obleth's work (no Lua, no key check, no
 * model lookup, no balancing, no metrics, no log line). The distance between
 * it and obleth is obleth's own cost; between it and nginx, evhttp's.
 *
 *   evhttp_proxy LISTEN_PORT UPSTREAM_PORT   (both on 127.0.0.1)
 *
 * Keep-alive connections to the upstream are pooled; answers are held and sent
 * with a Content-Length, as res:proxy does for a short non-streamed answer.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define POOL 256

static struct event_base *base;
static struct evhttp_connection *pool[POOL];
static int npool, upstream_port;

struct pending {
    struct evhttp_request *client;
    struct evhttp_connection *conn;
};

static int skip(const char *name) {
    return strcasecmp(name, "connection") == 0 || strcasecmp(name, "keep-alive") == 0 ||
           strcasecmp(name, "transfer-encoding") == 0 || strcasecmp(name, "content-length") == 0 ||
           strcasecmp(name, "host") == 0;
}

static void answered(struct evhttp_request *up, void *arg) {
    struct pending *p = arg;
    if (!up || evhttp_request_get_response_code(up) == 0) {
        evhttp_send_error(p->client, 502, NULL);
        evhttp_connection_free_on_completion(p->conn);
    } else {
        struct evkeyvalq *out = evhttp_request_get_output_headers(p->client);
        for (struct evkeyval *h = evhttp_request_get_input_headers(up)->tqh_first; h; h = h->next.tqe_next)
            if (!skip(h->key)) evhttp_add_header(out, h->key, h->value);
        evhttp_send_reply(p->client, evhttp_request_get_response_code(up),
                          evhttp_request_get_response_code_line(up), evhttp_request_get_input_buffer(up));
        if (npool < POOL) pool[npool++] = p->conn;
        else evhttp_connection_free_on_completion(p->conn);
    }
    free(p);
}

static void handle(struct evhttp_request *req, void *arg) {
    (void)arg;
    struct pending *p = malloc(sizeof *p);
    if (!p) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    p->client = req;
    p->conn = npool ? pool[--npool] : evhttp_connection_base_new(base, NULL, "127.0.0.1", (ev_uint16_t)upstream_port);
    struct evhttp_request *up = evhttp_request_new(answered, p);
    struct evkeyvalq *out = evhttp_request_get_output_headers(up);
    for (struct evkeyval *h = evhttp_request_get_input_headers(req)->tqh_first; h; h = h->next.tqe_next)
        if (!skip(h->key) && strcasecmp(h->key, "authorization") != 0) evhttp_add_header(out, h->key, h->value);
    evhttp_add_header(out, "Host", "127.0.0.1");
    struct evbuffer *body = evhttp_request_get_input_buffer(req);
    char cl[32];
    snprintf(cl, sizeof cl, "%zu", evbuffer_get_length(body));
    evhttp_add_header(out, "Content-Length", cl);
    evbuffer_add_buffer(evhttp_request_get_output_buffer(up), body);
    evhttp_make_request(p->conn, up, evhttp_request_get_command(req), evhttp_request_get_uri(req));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: evhttp_proxy LISTEN_PORT UPSTREAM_PORT\n");
        return 2;
    }
    upstream_port = atoi(argv[2]);
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST); /* as obleth's loop */
    base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    struct evhttp *http = base ? evhttp_new(base) : NULL;
    if (!http || evhttp_bind_socket(http, "127.0.0.1", (ev_uint16_t)atoi(argv[1])) != 0) {
        fprintf(stderr, "evhttp_proxy: cannot listen on 127.0.0.1:%s\n", argv[1]);
        return 1;
    }
    evhttp_set_gencb(http, handle, NULL);
    event_base_dispatch(base);
    return 0;
}
