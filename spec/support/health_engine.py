#!/usr/bin/env python3
"""A stand-in for many engines' /health on one port (spec/host/provisioner_checks_spec.lua).

It answers every request with `200 {}` on kept-alive HTTP/1.1 connections (as vLLM, SGLang and
llama.cpp's servers do) and counts what a prober did to it: connections opened, the most open at
once, requests answered. The listen backlog is asyncio's default (100), like a small engine's.

    python3 spec/support/health_engine.py     prints the port it listens on (127.0.0.1)

GET /counts answers {"connections", "max_open", "requests"} (and is not counted); the counts reset
after each read.
"""
import asyncio
import json
import sys

state = {"connections": 0, "open": 0, "max_open": 0, "requests": 0}


async def serve(reader, writer):
    state["connections"] += 1
    state["open"] += 1
    state["max_open"] = max(state["max_open"], state["open"])
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            length = 0
            for h in head.split(b"\r\n")[1:]:
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if " /counts " in line:
                body = json.dumps({k: state[k] for k in ("connections", "max_open", "requests")}).encode()
                state.update(connections=0, max_open=state["open"], requests=0)
            else:
                state["requests"] += 1
                body = b"{}"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        state["open"] -= 1
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
