"""Stand-in for `python3 -m sglang.launch_server` (spec/engines/README.md): SGLang's flags
(flags/sglang-launch_server.txt, argparse's errors), its model and GPU checks, the NCCL port it
binds (--nccl-port, else the HTTP port plus a random offset, as PortArgs does), and the readiness
of the releases whose /health answers 200 as soon as the HTTP server is up, before the warm-up
request has run: only /health_generate (and generation) wait for the warm-up."""
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import standin as S  # noqa: E402


def main():
    opts, pos = S.parse(sys.argv[1:], S.flag_entries("sglang-launch_server"), "argparse", "launch_server.py")
    if pos:
        S.die("usage: launch_server.py [options]\nlaunch_server.py: error: unrecognized arguments: %s"
              % " ".join(pos), 2)
    model = opts.get("--model-path")
    if not model:
        S.die("usage: launch_server.py [options]\nlaunch_server.py: error: the following arguments are "
              "required: --model-path/--model", 2)
    port = S.need_int(opts, "--port", "launch_server.py") or 30000
    host = opts.get("--host") or "127.0.0.1"
    tp = S.need_int(opts, "--tp-size", "launch_server.py") or 1
    nccl = S.need_int(opts, "--nccl-port", "launch_server.py")
    token = S.hf_token_state()
    rec = S.record("sglang", model=model, tp=tp, port=port, nccl_port=nccl, served=opts.get("--served-model-name"),
                   token=token[0], token_len=token[1])
    if model.startswith("/"):
        err = S.open_path(os.path.join(model, "config.json"), "model")
        if err:
            S.die("OSError: %s" % err)
    else:
        home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
        if not S.container_sees(home):
            S.die("OSError: [Errno 30] Read-only file system: '%s'" % home)
        os.makedirs(os.path.join(home, "hub", "models--" + model.replace("/", "--")), exist_ok=True)
    gpus = S.visible_gpus()
    if not gpus:
        S.die("RuntimeError: No CUDA GPUs are available")
    if tp > len(gpus):
        S.die("AssertionError: tp_size (%d) is larger than the number of visible GPUs (%d)" % (tp, len(gpus)))
    if nccl is None:
        nccl = port + random.randint(100, 1000)
    ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        ns.bind(("127.0.0.1", nccl))
        ns.listen(8)
    except OSError:
        S.die("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
              "address. port: %d, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use" % nccl)
    if S.port_in_use(host, port):
        S.die("ERROR: [Errno 98] error while attempting to bind on address ('%s', %d): address already in use"
              % (host, port))
    name = opts.get("--served-model-name") or model
    eng = S.Engine("sglang", name, health_paths=("/health_generate",), early_ok=("/health",))
    eng.serve(host, port)
    sys.stderr.write("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)\n" % (host, port))
    time.sleep(S.load_seconds())
    sys.stderr.write("[standin] Load weight end.\n")
    time.sleep(S.load_seconds())  # the warm-up request
    eng.ready = True
    S.update(rec, ready=time.time(), nccl_port=nccl)
    sys.stderr.write("The server is fired up and ready to roll!\n")
    S.forever()


main()
