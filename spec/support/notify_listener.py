#!/usr/bin/env python3
"""Listen on a unix datagram socket as systemd's NOTIFY_SOCKET does.

    notify_listener.py SOCKET_PATH OUT_FILE

Prints "ready" on stdout once bound, then appends one line per datagram to
OUT_FILE: "<CLOCK_MONOTONIC seconds> <message with newlines as |>". Runs until
SIGTERM; removes the socket on exit.
"""
import os
import signal
import socket
import sys
import time

path, out = sys.argv[1], sys.argv[2]
try:
    os.unlink(path)
except FileNotFoundError:
    pass
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
os.chmod(path, 0o666)


def stop(*_):
    try:
        os.unlink(path)
    finally:
        sys.exit(0)


signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
with open(out, "a", buffering=1) as fh:
    while True:
        data = sock.recv(4096)
        fh.write("%.3f %s\n" % (time.monotonic(), data.decode("utf-8", "replace").strip().replace("\n", "|")))
