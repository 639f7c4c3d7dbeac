--- `obleth-provisioner` (or `obleth provisioner`): the provisioner daemon.
-- Needs only OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN; everything else
-- comes from the Management API each pass.
local args = require "obleth.util.args"
local log = require "obleth.log"

local M = {}

--- Where jobs send their last output lines (OBLETH_JOB_REPORT_URL, default the admin base URL;
--- "off" or "" = nowhere), and the key their per-replica tokens derive from.
---@return {url: string, key: string}|nil
function M.log_report(url, base, token)
  if url == "off" or url == "" then return nil end
  url = url or base
  if not url or not url:match("^https?://") then return nil end
  return { url = (url:gsub("/+$", "")), key = token }
end

local spec = {
  interval = { kind = "number", help = "seconds between passes (env OBLETH_PASS_INTERVAL, default 5)" },
  once = { kind = "boolean", help = "run one pass and exit (status 0 when it succeeded)" },
  help = { kind = "boolean", short = "h", help = "this help" },
}

function M.main(argv)
  local o, err = args.parse(argv, spec)
  if not o or o.help then
    io.stderr:write(err and ("obleth-provisioner: " .. err .. "\n") or "",
      "usage: obleth-provisioner [--interval SECONDS] [--once]\n", args.help(spec), "\n",
      "environment: OBLETH_ADMIN_BASE_URL, OBLETH_ADMIN_TOKEN or OBLETH_ADMIN_TOKEN_FILE (required),\n",
      "  OBLETH_PASS_INTERVAL,\n",
      "  OBLETH_PROVISIONER_NAME (the lease holder's name), OBLETH_LEASE_TTL (seconds, default 3 intervals,\n",
      "  at least 15), OBLETH_BACKOFF_MAX (longest wait between passes while Slurm is down, default 60),\n",
      "  OBLETH_HEALTH_CONCURRENCY (health checks in flight at once, 1-4096, default 64),\n",
      "  OBLETH_JOB_REPORT_URL (the Management API as compute nodes reach it, where jobs send their last\n",
      "  output lines when they exit; default OBLETH_ADMIN_BASE_URL, \"off\": jobs report nothing)\n")
    return o and 0 or 2
  end
  local base = os.getenv("OBLETH_ADMIN_BASE_URL")
  -- OBLETH_ADMIN_TOKEN, or OBLETH_ADMIN_TOKEN_FILE (a Compose / Kubernetes secret), read as serve reads it
  local token = require("obleth.cli.serve").admin_token()
  if not base or base == "" or not token then
    io.stderr:write("obleth-provisioner: set OBLETH_ADMIN_BASE_URL (e.g. http://127.0.0.1:8080) and ",
      "OBLETH_ADMIN_TOKEN (the admin token obleth serve was started with) or OBLETH_ADMIN_TOKEN_FILE; ",
      "under systemd put them in /etc/obleth/provisioner.env\n")
    return 2
  end
  log.add_secret(token)
  local interval = o.interval or tonumber(os.getenv("OBLETH_PASS_INTERVAL") or "") or 5
  if interval <= 0 then
    io.stderr:write("obleth-provisioner: --interval must be > 0\n")
    return 2
  end
  local lease_ttl = tonumber(os.getenv("OBLETH_LEASE_TTL") or "")
  if lease_ttl and (lease_ttl < 2 * interval or lease_ttl > 3600) then
    io.stderr:write(("obleth-provisioner: OBLETH_LEASE_TTL=%s: the lease must last at least two pass intervals "
      .. "(%g s) and at most 3600 s\n"):format(os.getenv("OBLETH_LEASE_TTL"), 2 * interval))
    return 2
  end
  local conc_env = os.getenv("OBLETH_HEALTH_CONCURRENCY")
  local concurrency = conc_env and conc_env ~= "" and math.tointeger(tonumber(conc_env)) or nil
  if conc_env and conc_env ~= "" and not (concurrency and concurrency >= 1 and concurrency <= 4096) then
    io.stderr:write(("obleth-provisioner: OBLETH_HEALTH_CONCURRENCY=%s: a whole number of health checks in flight "
      .. "at once, 1 to 4096\n"):format(conc_env))
    return 2
  end
  -- test-only crash points (make chaos) and faults (the integration specs): obleth.provisioner.chaos,
  -- inert unless OBLETH_CHAOS or OBLETH_FAULT is set
  local armed, cerr = require("obleth.provisioner.chaos").configure(os.getenv("OBLETH_CHAOS"), os.getenv("OBLETH_FAULT"))
  if not armed then
    io.stderr:write("obleth-provisioner: ", cerr.message, "\n")
    return 2
  end
  local ok_policy, policy = pcall(require, "obleth.policy")
  local daemon = require("obleth.provisioner").new {
    api = require("obleth.provisioner.client").new(base, token),
    interval = interval,
    drain_seconds = tonumber(os.getenv("OBLETH_DRAIN_SECONDS") or ""),
    holder = os.getenv("OBLETH_PROVISIONER_NAME"),
    lease_ttl = lease_ttl,
    backoff_max = tonumber(os.getenv("OBLETH_BACKOFF_MAX") or ""),
    check_concurrency = concurrency,
    policy = ok_policy and policy or nil,
    log_report = M.log_report(os.getenv("OBLETH_JOB_REPORT_URL"), base, token),
  }
  if o.once then
    local rep, perr = daemon:pass()
    if daemon.lease then daemon.api:release(daemon.lease.generation) end
    if not rep then
      io.stderr:write("obleth-provisioner: pass failed: ", tostring(perr and perr.message), "\n")
      return 1
    end
    return 0
  end
  return daemon:run()
end

return M
