"""Shared parts of the stand-in engines (spec/engines/README.md).

Each stand-in (bin/vllm, bin/llama-server, bin/ollama, bin/ray, bin/apptainer, and the Python
module sglang.launch_server under py/) parses exactly the flags of its engine's command line
(flags/*.txt, each noting the engine version and source file it was read from), refuses any
other flag the way the engine does, and behaves like the engine where a recipe depends on it:
when it listens, when /health turns 200, what it needs from the environment.

Every stand-in process writes a record into $OBLETH_STANDIN_DIR (when set): <engine>-<pid>.json
with its argv, host, Slurm job and step, what it checked. Specs read those records to see which
processes ran and whether any is still alive after the job ended.
"""
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))


def flags(name):
    """The flag list of an engine: {flag: kind}, kind "switch" | "value" | "optional"
    (a value that may be left out)."""
    out = {}
    with open(os.path.join(HERE, "flags", name + ".txt"), encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            kind = parts[1] if len(parts) > 1 else "value"
            for f in parts[0].split(","):
                out[f] = kind
    return out


def record(engine, **fields):
    """Write (or update) this process's record; returns the record dict."""
    d = os.environ.get("OBLETH_STANDIN_DIR")
    rec = {
        "engine": engine, "pid": os.getpid(), "argv": sys.argv, "host": os.environ.get("SLURMD_NODENAME"),
        "job": os.environ.get("SLURM_JOB_ID"), "step": os.environ.get("SLURM_STEP_ID"),
        "in_container": os.environ.get("OBLETH_STANDIN_CONTAINER") is not None,
        "started": time.time(),
    }
    rec.update(fields)
    if d:
        path = os.path.join(d, "%s-%d.json" % (engine, os.getpid()))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(rec, fh)
        os.replace(tmp, path)
    return rec


def update(rec, **fields):
    rec.update(fields)
    return record(rec["engine"], **{k: v for k, v in rec.items() if k not in ("engine",)})


def die(msg, code=1):
    sys.stderr.write(msg.rstrip("\n") + "\n")
    sys.stderr.flush()
    sys.exit(code)


def visible_gpus():
    """GPU indices the process may use: CUDA_VISIBLE_DEVICES as Slurm sets it, none in a container
    started without --nv."""
    if os.environ.get("OBLETH_STANDIN_CONTAINER") is not None and os.environ.get("OBLETH_STANDIN_NV") != "1":
        return []
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    if v is None or v.strip() == "" or v.strip() == "-1":
        return []
    return [x for x in v.split(",") if x != ""]


def container_sees(path):
    """True when `path` is visible where the process runs: always on the host; inside a stand-in
    container only under the paths apptainer binds (its defaults plus --bind)."""
    roots = os.environ.get("OBLETH_STANDIN_CONTAINER")
    if roots is None:
        return True
    p = os.path.realpath(path)
    for r in roots.split(":"):
        if r and (p == r or p.startswith(r.rstrip("/") + "/")):
            return True
    return False


def open_path(path, what):
    """Check a path the engine reads: present and, in a container, bound. Returns an error message or
    None."""
    if not container_sees(path):
        return "%s: %s: No such file or directory (not bound into the container)" % (what, path)
    if not os.path.exists(path):
        return "%s: %s: No such file or directory" % (what, path)
    return None


def hf_token_state(reads_path=True):
    """How the Hugging Face token reaches the engine: ("file", n) when HF_TOKEN_PATH names a file
    the process can read (in a container: one that is bound) and the engine reads it (huggingface_hub
    does; llama.cpp reads only HF_TOKEN: reads_path=False), ("env", n) for HF_TOKEN, else
    ("none", 0). The token itself is never printed."""
    p = os.environ.get("HF_TOKEN_PATH") if reads_path else None
    if p:
        if not container_sees(p):
            return ("unbound", 0)
        try:
            with open(p, encoding="utf-8") as fh:
                return ("file", len(fh.read().strip()))
        except OSError:
            return ("unreadable", 0)
    if os.environ.get("HF_TOKEN"):
        return ("env", len(os.environ["HF_TOKEN"]))
    return ("none", 0)


def port_in_use(host, port):
    """Whether a server could not listen on host:port: bound the way Go's net.Listen and uvicorn
    bind (SO_REUSEADDR), so connections left in TIME_WAIT do not count, a listener does."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        return False
    except OSError:
        return True
    finally:
        s.close()


class Engine:
    """An OpenAI-shaped HTTP engine: /health (or health_paths) 503 until `ready`, /v1/models,
    /v1/chat/completions (also streamed), /v1/completions."""

    def __init__(self, name, model, health_paths=("/health",), early_ok=()):
        self.name = name
        self.model = model
        self.models = lambda: [self.model]  # the names requests may use
        self.ready = False
        self.health_paths = health_paths
        self.early_ok = early_ok  # paths that answer 200 before the engine is ready
        self.extra = {}  # path -> function(handler) for GET
        self.extra_post = {}  # path -> function(handler, decoded body) for POST

    def serve(self, host, port):
        eng = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def _send(self, status, body, ctype="application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path in eng.extra:
                    return eng.extra[path](self)
                if path in eng.early_ok:
                    return self._send(200, b"", "text/plain")
                if path in eng.health_paths:
                    return self._send(200 if eng.ready else 503, b"", "text/plain")
                if path == "/v1/models":
                    if not eng.ready:
                        return self._send(503, {"error": {"message": "loading"}})
                    return self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "owned_by": eng.name} for m in eng.models()]})
                return self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    req = json.loads(raw or b"{}")
                except ValueError:
                    return self._send(400, {"error": {"message": "invalid JSON"}})
                path = self.path.split("?", 1)[0]
                if path in eng.extra_post:
                    return eng.extra_post[path](self, req)
                if path not in ("/v1/chat/completions", "/v1/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                if not eng.ready:
                    return self._send(503, {"error": {"message": "the model is still loading"}})
                if req.get("model") is not None and req.get("model") not in eng.models():
                    return self._send(404, {"error": {"message": "The model `%s` does not exist." % req.get("model")}})
                words = ["stand-in", "answer", "from", eng.name]
                chat = path == "/v1/chat/completions"
                if req.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for w in words:
                        delta = {"delta": {"content": w + " "}} if chat else {"text": w + " "}
                        ev = ("data: %s\n\n" % json.dumps({"object": "chat.completion.chunk", "model": eng.model,
                                                           "choices": [dict(index=0, **delta)]})).encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                        self.wfile.flush()
                    end = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
                    return None
                text = " ".join(words)
                choice = {"index": 0, "finish_reason": "stop"}
                if chat:
                    choice["message"] = {"role": "assistant", "content": text}
                else:
                    choice["text"] = text
                return self._send(200, {"object": "chat.completion" if chat else "text_completion",
                                        "model": eng.model, "choices": [choice]})

        srv = ThreadingHTTPServer((host, port), H)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv


def load_seconds():
    """How long the stand-in takes to load its model (OBLETH_STANDIN_LOAD_SECONDS, default 1)."""
    try:
        return float(os.environ.get("OBLETH_STANDIN_LOAD_SECONDS", "1"))
    except ValueError:
        return 1.0


def forever():
    while True:
        time.sleep(3600)


def _table(entries):
    """{name: (key, kind)} from flags(): key is the entry's first name."""
    out = {}
    for names, kind in entries:
        for n in names:
            out[n] = (names[0], kind)
    return out


def flag_entries(name, sub=None):
    """The entries of flags/<name>.txt as (names, kind); with `sub`, the lines of that subcommand
    (first word) and of "*"."""
    out = []
    with open(os.path.join(HERE, "flags", name + ".txt"), encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if sub is not None:
                if parts[0] not in (sub, "*"):
                    continue
                parts = parts[1:]
                if not parts:
                    continue
            kind = parts[1] if len(parts) > 1 else "value"
            out.append((parts[0].split(","), kind))
    return out


def parse(argv, entries, style, prog):
    """Parse argv like the engine's own parser would. Returns (opts, positionals): opts maps an
    entry's first name to its value (True for a switch, a list for multi). An unknown flag or a
    missing value exits with the engine's message and status (style: argparse, llama, cobra,
    click)."""
    table = _table(entries)
    opts, pos, unknown = {}, [], []
    i = 0

    def missing(flag):
        if style == "argparse":
            die("usage: %s [options]\n%s: error: argument %s: expected one argument" % (prog, prog, flag), 2)
        if style == "llama":
            die("error while handling argument \"%s\": expected value for argument" % flag, 1)
        if style == "click":
            die("Error: Option '%s' requires an argument." % flag, 2)
        die("Error: flag needs an argument: %s" % flag, 1)

    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--" and style != "llama":
            pos.extend(argv[i:])
            break
        if not a.startswith("-") or a == "-" or _is_number(a):
            pos.append(a)
            continue
        name, inline = a, None
        if "=" in a and style != "llama":
            name, inline = a.split("=", 1)
        neg = False
        hit = table.get(name)
        if hit is None and name.startswith("--no-") and style == "argparse":
            h2 = table.get("--" + name[5:])
            if h2 and h2[1] == "bool":
                hit, neg = h2, True
        if hit is None:
            unknown.append(a)
            if style != "argparse":
                break
            continue
        key, kind = hit
        if kind in ("switch", "bool"):
            opts[key] = not neg
        elif kind == "optional":
            if inline is not None:
                opts[key] = inline
            elif i < len(argv) and not argv[i].startswith("-"):
                opts[key] = argv[i]
                i += 1
            else:
                opts[key] = True
        elif kind == "multi":
            vals = [inline] if inline is not None else []
            while i < len(argv) and (not argv[i].startswith("-") or _is_number(argv[i])):
                vals.append(argv[i])
                i += 1
            if not vals:
                missing(name)
            opts[key] = vals
        else:
            if inline is not None:
                opts[key] = inline
            elif i < len(argv) and (not argv[i].startswith("-") or _is_number(argv[i]) or style == "llama"):
                opts[key] = argv[i]
                i += 1
            else:
                missing(name)
    if unknown:
        u = unknown[0]
        if style == "argparse":
            die("usage: %s [options]\n%s: error: unrecognized arguments: %s" % (prog, prog, " ".join(unknown)), 2)
        if style == "llama":
            die("error: invalid argument: %s" % u, 1)
        if style == "click":
            die("Usage: %s [OPTIONS]\nTry '%s --help' for help.\n\nError: No such option: %s" % (prog, prog, u.split("=")[0]), 2)
        if u.startswith("--"):
            die("Error: unknown flag: %s" % u.split("=")[0], 255 if prog.startswith("apptainer") else 1)
        die("Error: unknown shorthand flag: '%s' in %s" % (u[1:2], u), 255 if prog.startswith("apptainer") else 1)
    return opts, pos


def _is_number(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def need_int(opts, key, prog, style="argparse"):
    v = opts.get(key)
    if v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        if style == "llama":
            die("error while handling argument \"%s\": stoi" % key, 1)
        die("%s: error: argument %s: invalid int value: '%s'" % (prog, key, v), 2)
