"""The stand-in Ray cluster (bin/ray): a head that keeps the list of joined nodes, reached over TCP
at its GCS address (node-ip:port). One JSON line per request; a joined node keeps its connection
open for as long as it is part of the cluster."""
import json
import os
import socket


def get_ip():
    """vLLM's get_ip(): VLLM_HOST_IP, else the address of the interface that routes outward."""
    ip = os.environ.get("VLLM_HOST_IP")
    if ip:
        return ip
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("8.8.8.8", 80))
        return s.getsockname()[0]
    except OSError:
        return "0.0.0.0"
    finally:
        s.close()


def temp_dir(opts=None):
    return (opts or {}).get("--temp-dir") or os.environ.get("RAY_TMPDIR") or "/tmp/ray"


def find_cluster(address=None, tmp=None):
    """host:port of the cluster to use: an address, RAY_ADDRESS, or the temp dir's
    ray_current_cluster (what ray.init() / ray status do)."""
    a = address or os.environ.get("RAY_ADDRESS")
    if a and a != "auto":
        return a
    try:
        with open(os.path.join(tmp or temp_dir(), "ray_current_cluster"), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def request(address, msg, keep=False):
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall((json.dumps(msg) + "\n").encode())
    f = s.makefile("r")
    line = f.readline()
    if not line:
        s.close()
        raise ConnectionError("the Ray head closed the connection")
    answer = json.loads(line)
    if keep:
        return answer, s, f
    s.close()
    return answer


def status(address):
    return request(address, {"op": "status"})
