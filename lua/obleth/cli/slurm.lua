--- `obleth slurm SUBCOMMAND`: look at and act on a cluster through slurmrestd.
-- Connection from flags, else OBLETH_SLURM_URL / OBLETH_SLURM_SOCKET,
-- OBLETH_SLURM_USER, OBLETH_SLURM_TOKEN (or OBLETH_SLURM_TOKEN_FILE), else the
-- connection saved in obleth serve (OBLETH_ADMIN_BASE_URL, OBLETH_ADMIN_TOKEN).
local args = require "obleth.cli.args"
local slurm = require "obleth.slurm"
local fmt = require "obleth.util.format"
local cjson = require "cjson"
local json = require "obleth.util.json"

local M = {}

--- Seconds per request when --timeout is not given. More than slurmrestd's own wait for a
--- slurmctld that does not answer (about 10 s on 26.05, then HTTP 502), so a stopped controller
--- is reported as such (slurmrestd's 502) and not as slurmrestd not answering in time.
M.DEFAULT_TIMEOUT = 20

M.connection_spec = {
  url = { kind = "string", help = "slurmrestd base URL (env OBLETH_SLURM_URL)" },
  socket = { kind = "string", help = "slurmrestd unix socket (env OBLETH_SLURM_SOCKET)" },
  user = { kind = "string", help = "user the JWT belongs to (env OBLETH_SLURM_USER)" },
  token_file = { kind = "string", help = "read the JWT from this file (env OBLETH_SLURM_TOKEN_FILE)" },
  api_version = { kind = "string", arg = "vX", help = "API version, default: the newest both sides know" },
  ca_file = { kind = "string", help = "CA bundle for https" },
  insecure = { kind = "boolean", help = "turn TLS verification off" },
  timeout = { kind = "number", help = "seconds per request (default 20: longer than slurmrestd waits for slurmctld)" },
}

--- Connection options from parsed flags and the environment. The token is
--- taken from OBLETH_SLURM_TOKEN or a token file, never from a flag (it would
--- show in the process list).
function M.connection_options(o)
  local token
  local tf = o.token_file or os.getenv("OBLETH_SLURM_TOKEN_FILE")
  if tf then
    local fh, err = io.open(tf)
    if not fh then
      return nil, { code = "token_file", message = "cannot read the token file: " .. err }
    end
    token = fh:read("a"):gsub("%s+$", "")
    fh:close()
  else
    token = os.getenv("OBLETH_SLURM_TOKEN")
  end
  local url = o.url or (not o.socket and os.getenv("OBLETH_SLURM_URL")) or nil
  local socket = o.socket or (not url and os.getenv("OBLETH_SLURM_SOCKET")) or nil
  if not url and not socket then
    return nil, { code = "not_configured", message = "no slurmrestd given: pass --url or --socket, set "
      .. "OBLETH_SLURM_URL, or set OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN to use the connection saved in "
      .. "obleth serve" }
  end
  return {
    url = url, socket = socket, token = token,
    user = o.user or os.getenv("OBLETH_SLURM_USER"),
    version = o.api_version or os.getenv("OBLETH_SLURM_API_VERSION") or "auto",
    ca_file = o.ca_file, verify = not o.insecure, timeout = o.timeout or M.DEFAULT_TIMEOUT,
  }
end

-- The Slurm settings saved in obleth serve (OBLETH_ADMIN_BASE_URL + OBLETH_ADMIN_TOKEN), their token
-- registered as a secret; false when those variables are not set; nil, err when the API did not answer.
local function _saved_settings()
  local base, admin = os.getenv("OBLETH_ADMIN_BASE_URL"), os.getenv("OBLETH_ADMIN_TOKEN")
  if not (base and admin) then return false end
  local snap, err = require("obleth.provisioner.client").new(base, admin):snapshot()
  if not snap then return nil, err end
  local s = snap.settings or {}
  if type(s.token) == "string" then require("obleth.log").add_secret(s.token) end
  return s
end

--- Connect from flags, the environment, or else the Management API's saved
--- settings (OBLETH_ADMIN_BASE_URL + OBLETH_ADMIN_TOKEN).
---@return table|nil conn, table|nil err {code, message, field?}: the Management API client's or
---  obleth.slurm's codes, "not_configured" or "token_file"
function M.connect(o)
  local copts
  local s = false
  if not (o.url or o.socket or os.getenv("OBLETH_SLURM_URL") or os.getenv("OBLETH_SLURM_SOCKET")) then
    local err
    s, err = _saved_settings()
    if s == nil then return nil, err end
  end
  if s then
    if not (s.url or s.socket) then
      return nil, { code = "not_configured", message = "the Management API has no Slurm connection saved" }
    end
    copts = { url = s.url, socket = s.socket, user = s.user, token = s.token, version = s.api_version or "auto",
      verify = s.verify ~= false, ca_file = s.ca_file, timeout = o.timeout or s.timeout or M.DEFAULT_TIMEOUT }
  else
    local e
    copts, e = M.connection_options(o)
    if not copts then return nil, e end
  end
  return slurm.connect(copts)
end

local function spec_with(extra)
  local s = { json = { kind = "boolean", help = "print JSON for scripts" },
    help = { kind = "boolean", short = "h", help = "this help" } }
  for k, v in pairs(M.connection_spec) do s[k] = v end
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

local submit_spec = {
  name = { kind = "string", help = "job name" }, comment = { kind = "string", help = "job comment" },
  partition = { kind = "string", short = "p", help = "partition" },
  account = { kind = "string", short = "A", help = "account" }, qos = { kind = "string", short = "q", help = "QoS" },
  time = { kind = "string", short = "t", help = "time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS" },
  nodes = { kind = "integer", short = "N", help = "nodes" },
  gpus = { kind = "integer", help = "GPUs per node" }, gpu_type = { kind = "string", help = "GPU type (e.g. a100)" },
  cpus = { kind = "integer", help = "CPUs per node" }, mem = { kind = "integer", help = "memory per node, MiB (0 = all)" },
  constraint = { kind = "string", short = "C", help = "features the nodes must have" },
  exclude = { kind = "string", short = "x", help = "nodes to avoid (hostlist)" },
  script = { kind = "string", help = "batch script file" }, wrap = { kind = "string", help = "command to run" },
  output = { kind = "string", short = "o", help = "stdout path" }, error = { kind = "string", short = "e", help = "stderr path" },
  chdir = { kind = "string", short = "D", help = "working directory" },
  env = { kind = "list", arg = "K=V", help = "environment variable (repeatable)" },
}

local usage = [[
usage: obleth slurm <ping|partitions|nodes|jobs|job ID|submit|cancel ID|token-expiry> [options]
]]

local function die(msg, code)
  io.stderr:write("obleth slurm: ", msg, "\n")
  return code or 1
end

--- One line for an error: "code: message (field F)".
---@param err table|string {code, message, field?}
---@return string
function M.error_text(err)
  if type(err) ~= "table" then return tostring(err) end
  local s = ("%s: %s"):format(err.code or "error", err.message or "?")
  if err.field then s = s .. (" (field %s)"):format(err.field) end
  return s
end
local errmsg = M.error_text

local function emit(o, value, table_fn)
  if o.json then
    io.stdout:write(json.encode(fmt.jsonable(value)), "\n") -- empty lists as [], integers as integers
  else
    io.stdout:write(table_fn(value), "\n")
  end
end

local sub = {}

function sub.ping(conn, o)
  local r, err = conn:ping()
  if not r then return die(errmsg(err)) end
  local token = os.getenv("OBLETH_SLURM_TOKEN")
  local exp = token and slurm.token_expiry(token)
  r.token_expires = exp
  emit(o, r, function(x)
    local lines = {
      ("controller  %s (%s)"):format(x.hostname or "?", x.ok and "UP" or "NOT RESPONDING"),
      ("API         %s   Slurm %s"):format(x.version, x.release or "?"),
      ("latency     %.1f ms"):format((x.rtt or 0) * 1000),
    }
    if exp then lines[#lines + 1] = ("JWT         expires %s (in %s)"):format(os.date("!%Y-%m-%d %H:%M:%SZ", exp),
      fmt.duration(exp - os.time())) end
    return table.concat(lines, "\n")
  end)
  return r.ok and 0 or 1
end

function sub.partitions(conn, o)
  local parts, err = conn:partitions()
  if not parts then return die(errmsg(err)) end
  local nodes = conn:nodes() or {}
  emit(o, parts, function(ps) return fmt.partitions_table(ps, nodes) end)
  return 0
end

function sub.nodes(conn, o)
  local nodes, err = conn:nodes()
  if not nodes then return die(errmsg(err)) end
  emit(o, nodes, fmt.nodes_table)
  return 0
end

function sub.jobs(conn, o)
  local jobs, err = conn:jobs()
  if not jobs then return die(errmsg(err)) end
  emit(o, jobs, fmt.jobs_table)
  return 0
end

function sub.job(conn, o)
  local id = math.tointeger(tonumber(o[2]))
  if not id or id <= 0 then return die("job: give a job id (a positive whole number)", 2) end
  local j, err = conn:job(id)
  if not j then return die(errmsg(err)) end
  emit(o, j, function(x) return fmt.kv(x) end)
  return 0
end

function sub.cancel(conn, o)
  local id = math.tointeger(tonumber(o[2]))
  if not id or id <= 0 then return die("cancel: give a job id (a positive whole number)", 2) end
  local ok, err = conn:cancel(id, o.signal)
  if not ok then return die(errmsg(err)) end
  if not o.json then io.stdout:write(("cancelled job %d\n"):format(id))
  else io.stdout:write(cjson.encode({ cancelled = id }), "\n") end
  return 0
end

function sub.submit(conn, o)
  local timefmt = require "obleth.util.timefmt"
  local script
  if o.script then
    local fh, e = io.open(o.script)
    if not fh then return die("cannot read --script: " .. e, 2) end
    script = fh:read("a")
    fh:close()
  elseif o.wrap and o.wrap:match("%S") then
    script = "#!/bin/sh\nexec " .. o.wrap .. "\n"
  else
    return die("submit: give --script FILE or --wrap COMMAND", 2)
  end
  local tl
  if o.time then
    local m, e = timefmt.parse_minutes(o.time)
    if not m then return die("--time: " .. e, 2) end
    tl = m
  end
  local env = {}
  for _, kv in ipairs(o.env or {}) do
    local k, v = kv:match("^([%a_][%w_]*)=(.*)$")
    if not k then return die(("--env %q: expected NAME=value"):format(kv), 2) end
    env[k] = v
  end
  local desc = {
    name = o.name or "obleth-cli", comment = o.comment, partition = o.partition, account = o.account,
    qos = o.qos, time_limit = tl, nodes = o.nodes, gpus_per_node = o.gpus, gpu_type = o.gpu_type,
    cpus_per_node = o.cpus, memory_per_node = o.mem, constraint = o.constraint, exclude = o.exclude,
    script = script, stdout = o.output, stderr = o.error, working_directory = o.chdir or "/tmp",
    environment = next(env) and env or nil,
  }
  local id, res = conn:submit(desc)
  if not id then return die(errmsg(res)) end
  if o.json then
    io.stdout:write(json.encode({ job_id = id, warnings = json.array(fmt.jsonable(res)) }), "\n") -- none: []
  else
    io.stdout:write(("submitted job %d\n"):format(id))
    for _, w in ipairs(res) do io.stdout:write("warning: ", tostring(w.message), "\n") end
  end
  return 0
end

--- Entry point.
function M.main(argv)
  local cmd = argv[1]
  local extra = cmd == "submit" and submit_spec or (cmd == "cancel" and { signal = { kind = "string" } }) or nil
  local spec = spec_with(extra)
  local o, perr = args.parse(argv, spec)
  if not o then return die(perr .. "\n" .. usage, 2) end
  if not cmd or o.help then
    io.stdout:write(usage, "\noptions:\n", args.help(spec), "\n")
    return cmd and 0 or 2
  end
  if cmd == "token-expiry" then
    local token = o[2] or os.getenv("OBLETH_SLURM_TOKEN")
    if not token then -- the token saved in obleth serve, as `connect` uses it
      local s, serr = _saved_settings()
      if s == nil then return die("token-expiry: " .. tostring(serr.message)) end
      if s then
        token = type(s.token) == "string" and s.token or nil
        if not token then
          return die("token-expiry: obleth serve has no static Slurm token saved (token_source "
            .. tostring(s.token_source or "static") .. ")")
        end
      end
    end
    if not token then
      return die("token-expiry: give a token, set OBLETH_SLURM_TOKEN, or set OBLETH_ADMIN_BASE_URL and "
        .. "OBLETH_ADMIN_TOKEN to read the one saved in obleth serve", 2)
    end
    local exp, e = slurm.token_expiry(token)
    if not exp then return die("token-expiry: " .. errmsg(e)) end
    if o.json then print(cjson.encode({ exp = exp, seconds_left = exp - os.time() }))
    else print(("%s (in %s)"):format(os.date("!%Y-%m-%d %H:%M:%SZ", exp), fmt.duration(exp - os.time()))) end
    return 0
  end
  if not sub[cmd] then return die(("unknown subcommand '%s'\n%s"):format(cmd, usage), 2) end
  local conn, err = M.connect(o)
  if not conn then return die(errmsg(err)) end
  return sub[cmd](conn, o)
end

return M
