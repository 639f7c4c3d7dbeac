-- Runs one pass's health checks (obleth.provisioner.check_all) against N stand-in replicas that all
-- answer on one port, and prints what came back as JSON:
--   obleth lua spec/support/health_probe.lua PORT N LIMIT
--   → {"checks": N, "failed": F, "errors": {"<message>": count, ...}}
-- LIMIT is the number of checks in flight at once (N: every check at once, as the prober did before
-- it was bounded). Run by spec/host/provisioner_checks_spec.lua in a process with a small file limit.
local cjson = require "cjson"
local daemon = require "obleth.provisioner"

local port, n, limit = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3])
local due = {}
for i = 1, n do
  due[i] = { row = { nonce = ("%016x"):format(i) }, url = ("http://127.0.0.1:%d/health?replica=%d"):format(port, i),
    timeout = 5 }
end
local results = daemon.check_all(due, limit)
local failed, errors, got = 0, {}, 0
for _, r in pairs(results) do
  got = got + 1
  if not r.ok then
    failed = failed + 1
    local e = tostring(r.error):gsub("%d+", "N")
    errors[e] = (errors[e] or 0) + 1
  end
end
print(cjson.encode { checks = got, failed = failed, errors = errors })
