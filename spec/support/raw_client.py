#!/usr/bin/env python3
"""Send the bytes of stdin to 127.0.0.1:PORT as they are, then print what comes back.

Reads until the server closes the connection; if it stays open for SECONDS (default 3)
after the last byte came, prints "<<open>>" at the end instead. Used by the specs
that check how obleth's HTTP server treats malformed requests (spec/host/http_framing_spec.lua).
"""
import socket
import sys

port = int(sys.argv[1])
wait = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
data = sys.stdin.buffer.read()
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(data)
s.settimeout(wait)
out = b""
closed = False
try:
    while True:
        b = s.recv(65536)
        if not b:
            closed = True
            break
        out += b
except socket.timeout:
    pass
except ConnectionResetError:
    closed = True
sys.stdout.buffer.write(out)
if not closed:
    sys.stdout.buffer.write(b"\n<<open>>")
