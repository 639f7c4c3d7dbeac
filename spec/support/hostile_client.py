#!/usr/bin/env python3
"""Hostile HTTP clients for the connection-handling specs (spec/host/http_connections_spec.lua).

  hostile_client.py slowloris PORT N [INTERVAL [SECONDS]]
      holds N connections to 127.0.0.1:PORT, each sending a header section that never ends: a
      request line, then one header line every INTERVAL seconds (default 1). A connection the
      server closes is opened again (as slowloris does), so N stay in play. Prints "held N" once
      N connections were open at the same time (or "held K" for the most it got, after 30 s),
      then "stats opened=X closed_by_server=Y refused=Z" every 2 s.
  hostile_client.py pipeline PORT N P TOKEN [SECONDS [PATH]]
      opens N connections, writes P pipelined GET PATH (/api/v1/models) requests with the admin token on
      each, never reads an answer; prints "sent" once every byte is written (or the server stops
      taking them: "sent partial"), then holds the connections.
Both run until killed (the spec's end), at most SECONDS (default 300), raising their own
descriptor limit first.
"""
import os
import resource
import selectors
import socket
import sys
import time


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n + 64))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def slowloris(port, n, interval, seconds):
    raise_nofile(n)
    sel = selectors.DefaultSelector()
    conns = {}  # socket -> next time to send
    opened = closed = refused = 0
    held_said = False
    start = time.monotonic()
    most = 0
    last_stats = start

    def open_one():
        nonlocal opened, refused
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            refused += 1
            return
        conns[s] = 0.0  # the request line goes as soon as it is connected
        sel.register(s, selectors.EVENT_READ, "conn")
        opened += 1

    while time.monotonic() - start < seconds:
        now = time.monotonic()
        while len(conns) < n:
            before = len(conns)
            open_one()
            if len(conns) == before:
                break
        live = len(conns)
        if live > most:
            most = live
        if not held_said and (most >= n or now - start > 30):
            print("held %d" % most, flush=True)
            held_said = True
        if now - last_stats > 2:
            print("stats opened=%d closed_by_server=%d refused=%d" % (opened, closed, refused), flush=True)
            last_stats = now
        for s, due in list(conns.items()):
            if due <= now:
                try:
                    s.send(b"GET / HTTP/1.1\r\nHost: x\r\n" if due == 0.0 else b"X-Slow: 1\r\n")
                    conns[s] = now + interval
                except BlockingIOError:
                    conns[s] = now + 0.1
                except OSError:
                    sel.unregister(s)
                    del conns[s]
                    s.close()
                    closed += 1
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            try:
                b = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                b = b""
            if not b:
                sel.unregister(s)
                del conns[s]
                s.close()
                closed += 1


def pipeline(port, n, p, token, seconds, path):
    raise_nofile(n)
    req = ("GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % (path, token)).encode()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        socks.append([s, req * p])
    deadline = time.monotonic() + 30
    while any(rest for _, rest in socks) and time.monotonic() < deadline:
        for item in socks:
            s, rest = item
            if not rest:
                continue
            try:
                k = s.send(rest)
                item[1] = rest[k:]
            except BlockingIOError:
                pass
            except OSError:
                item[1] = b""
        time.sleep(0.01)
    print("sent" if not any(rest for _, rest in socks) else "sent partial", flush=True)
    time.sleep(seconds)


def main():
    mode = sys.argv[1]
    port = int(sys.argv[2])
    if mode == "slowloris":
        slowloris(port, int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 1.0,
                  float(sys.argv[5]) if len(sys.argv) > 5 else 300.0)
    elif mode == "pipeline":
        pipeline(port, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
                 float(sys.argv[6]) if len(sys.argv) > 6 else 300.0,
                 sys.argv[7] if len(sys.argv) > 7 else "/api/v1/models")
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
