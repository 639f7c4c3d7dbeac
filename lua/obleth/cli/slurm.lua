--- `obleth slurm SUBCOMMAND`: look at and act on a cluster through slurmrestd.
-- Connection from flags, else OBLETH_SLURM_URL / OBLETH_SLURM_SOCKET,
-- OBLETH_SLURM_USER, OBLETH_SLURM_TOKEN (or OBLETH_SLURM_TOKEN_FILE), else the
-- connection saved in obleth serve (OBLETH_ADMIN_BASE_URL, OBLETH_ADMIN_TOKEN).
local args = require "obleth.util.args"
local slurm = require "obleth.slurm"
local options = require "obleth.slurm.options"
local fmt = require "obleth.util.format"
local cjson = require "cjson"
local json = require "obleth.util.json"

local M = {}

M.DEFAULT_TIMEOUT = options.DEFAULT_TIMEOUT
M.connection_spec = options.connection_spec
M.connection_options = options.connection_options

--- Connect from flags, the environment, or else the Management API's saved settings
--- (obleth.slurm.options.connect).
function M.connect(o)
  return options.connect(o, require("obleth.provisioner.client").saved_slurm_settings)
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

M.error_text = options.error_text
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
      local s, serr = require("obleth.provisioner.client").saved_slurm_settings()
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
