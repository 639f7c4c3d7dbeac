#!/usr/bin/env python3
"""A misbehaving HTTP upstream for the proxy specs (spec/host/http_proxy_raw_spec.lua).

It stands in for an inference engine that breaks the protocol, which no real
engine here can be made to do on cue: for every connection it reads one
request (head and a Content-Length body), writes the bytes of ANSWERS[mode],
and closes the connection.

    python3 spec/support/raw_upstream.py MODE    prints the port it listens on (127.0.0.1)

MODE is a key of ANSWERS, or slow_close. From Lua: spec/support/raw_upstream.lua.
"""
import socket
import sys
import time

ANSWERS = {
    # the connection ends inside the status line, the headers, or a chunk
    "partial_firstline": b"HTTP/1.1 20",
    "partial_headers": b"HTTP/1.1 200 OK\r\nContent-Type: appl",
    "partial_chunk": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"b\r\ndata: one\n\r\n20\r\ndata: tw",
    # answers that must not be passed on as they are
    "status_101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\nRAW BYTES",
    "status_negative": b"HTTP/1.1 -200 OK\r\nContent-Length: 2\r\n\r\nok",
    "not_http": b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    "reason_cr": b"HTTP/1.1 200 OK\rSet-Cookie: pwned=1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
    "bad_header_name": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                       b"Transfer-Encoding : chunked\r\nX-Fine: yes\r\n\r\nok",
}


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


# a replica that takes the request, stays silent for half a second and closes the
# connection without a byte of answer (a process that dies mid-prefill)
SLOW_CLOSE = "slow_close"


def main():
    mode = sys.argv[1]
    answer = b"" if mode == SLOW_CLOSE else ANSWERS[mode]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    print(srv.getsockname()[1], flush=True)
    while True:
        conn, _ = srv.accept()
        try:
            read_request(conn)
            if mode == SLOW_CLOSE:
                time.sleep(0.5)
            conn.sendall(answer)
        except OSError:
            pass
        finally:
            conn.close()


if __name__ == "__main__":
    main()
