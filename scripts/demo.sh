#!/usr/bin/env bash
# The main job on the built-in default: a local Slurm cluster from the
# project's harness, pinged through slurmrestd with a freshly minted JWT.
set -euo pipefail
cd "$(dirname "$0")/.."
spec/cluster/up.sh
set -a; . build/cluster/env; set +a
build/obleth lua -e '
  local http = require("obleth.http")
  local cjson = require("cjson")
  local url = os.getenv("OBLETH_SLURM_URL") .. "/slurm/v0.0.38/ping"
  local r, err = http.request{url = url, headers = {
    ["X-SLURM-USER-NAME"] = os.getenv("OBLETH_SLURM_USER"),
    ["X-SLURM-USER-TOKEN"] = os.getenv("OBLETH_SLURM_TOKEN")}}
  if not r then io.stderr:write("slurmrestd unreachable: ", err.message, "\n") return 1 end
  local doc = cjson.decode(r.body)
  local p = doc.pings and doc.pings[1] or {}
  print(("slurmrestd %s: HTTP %d, controller %s %s, Slurm %s"):format(url, r.status,
    tostring(p.hostname), tostring(p.ping), doc.meta and doc.meta.Slurm and doc.meta.Slurm.release or "?"))
  return r.status == 200 and 0 or 1'
