--- `obleth smoke-engine`: run the smoke-test inference engine
--- (obleth.testing) as a process, the way a Slurm job runs a real one.
---
--- Exit status: 0 on SIGTERM/SIGINT or after --exit-after in ok mode;
--- 1 for --mode exit (after --exit-after) and for a port that cannot be bound;
--- 2 for bad arguments; 3 for --mode crash-on-start; 98 for a port that
--- cannot be bound under --fail-port-in-use.
--
-- Errors: a leaf parser (docs/errors.md): `parse` and `_convert` return nil, "message" for a bad
-- command line, and `main` prints it with the usage. spec/unit/error_shape_spec.lua holds this list.
local M = {}

local loop = require("obleth.loop")
local http = require("obleth.http")
local log = require("obleth.log")
local sys = require("obleth.sys")
local smoke = require("obleth.testing")

M.EXIT_USAGE = 2
M.EXIT_CRASH = 3
M.EXIT_PORT_IN_USE = 98

M.usage = [[
usage: obleth smoke-engine --port N [--host 0.0.0.0] [--model NAME]
         [--startup-delay SECONDS] [--mode MODE] [--exit-after SECONDS]
         [--tokens N] [--token-delay SECONDS] [--fail-port-in-use]

A tiny OpenAI-shaped engine (GET /health, GET /v1/models,
POST /v1/chat/completions, /v1/completions, /v1/embeddings) for end-to-end checks.

  --port N               port to listen on, 0..65535 (0 = any free port); default $OBLETH_PORT
  --host ADDR            numeric IPv4/IPv6 address to bind (default 0.0.0.0)
  --model NAME           served model name; default $OBLETH_API_MODEL_NAME, else obleth-smoke
  --startup-delay S      /health answers 503 for S seconds after start (default 0)
  --mode MODE            ok | never-healthy | flaky-health | exit | crash-on-start (default ok)
  --exit-after S         exit after S seconds: status 0 in ok mode, 1 in exit mode
  --tokens N             pieces a streamed answer is cut into (default 5)
  --token-delay S        seconds between streamed pieces (default 0.05)
  --fail-port-in-use     exit 98 (not 1) when the port cannot be bound

The replica label (X-Obleth-Replica header, prefix of answers) is $OBLETH_REPLICA_ID,
else HOSTNAME:PORT.
]]

local MODES = { ok = true, ["never-healthy"] = true, ["flaky-health"] = true, exit = true,
  ["crash-on-start"] = true }

-- flag -> {key, kind}; kind: "port" | "host" | "string" | "seconds" | "count" | "mode" | "switch"
local FLAGS = {
  ["--port"] = { "port", "port" },
  ["--host"] = { "host", "host" },
  ["--model"] = { "model", "string" },
  ["--startup-delay"] = { "startup_delay", "seconds" },
  ["--mode"] = { "mode", "mode" },
  ["--exit-after"] = { "exit_after", "seconds" },
  ["--tokens"] = { "tokens", "count" },
  ["--token-delay"] = { "token_delay", "seconds" },
  ["--fail-port-in-use"] = { "fail_port_in_use", "switch" },
}

--- True for a numeric IPv4 address (dotted quad, each 0..255).
local function _is_ipv4(s)
  local parts = { s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$") }
  if #parts ~= 4 then return false end
  for _, p in ipairs(parts) do
    if #p > 3 or tonumber(p) > 255 then return false end
  end
  return true
end

--- True for a plausible numeric IPv6 address (hex groups, at most one "::").
local function _is_ipv6(s)
  if not s:find(":", 1, true) or s:find("[^%x:]") then return false end
  local _, doubles = s:gsub("::", "")
  if doubles > 1 or s:find(":::", 1, true) then return false end
  local groups = 0
  for g in s:gmatch("[^:]+") do
    if #g > 4 then return false end
    groups = groups + 1
  end
  return doubles == 1 and groups <= 7 or groups == 8
end

local function _convert(kind, flag, v)
  if kind == "port" then
    local n = tonumber(v)
    if not v:match("^%d+$") or not n or n > 65535 then
      return nil, ("%s: '%s' is not a port (an integer 0..65535)"):format(flag, v)
    end
    return math.tointeger(n)
  elseif kind == "host" then
    if not (_is_ipv4(v) or _is_ipv6(v)) then
      return nil, ("%s: '%s' is not a numeric IPv4 or IPv6 address (e.g. 0.0.0.0, 127.0.0.1, ::)"):format(flag, v)
    end
    return v
  elseif kind == "seconds" then
    local n = tonumber(v)
    if not n or n < 0 or n ~= n or n == math.huge then
      return nil, ("%s: '%s' is not a number of seconds >= 0"):format(flag, v)
    end
    return n
  elseif kind == "count" then
    local n = v:match("^%d+$") and math.tointeger(tonumber(v))
    if not n or n < 1 or n > 100000 then
      return nil, ("%s: '%s' is not an integer from 1 to 100000"):format(flag, v)
    end
    return n
  elseif kind == "mode" then
    if not MODES[v] then
      return nil, ("%s: unknown mode '%s' (ok, never-healthy, flaky-health, exit, crash-on-start)"):format(flag, v)
    end
    return v
  elseif v == "" then
    return nil, ("%s: must not be empty"):format(flag)
  end
  return v
end

--- Parse arguments, with defaults from the environment.
---@param args string[]
---@param env fun(name: string): string|nil  (default os.getenv)
---@return table|nil opts {port, host, model, startup_delay, mode, exit_after, tokens, token_delay,
---                        fail_port_in_use, replica_id, help}
---@return string|nil err a message for the user
function M.parse(args, env)
  env = env or os.getenv
  local opts = {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-h" or a == "--help" then
      opts.help = true
      return opts
    end
    local flag, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    flag = flag or a
    local spec = FLAGS[flag]
    if not spec then
      return nil, ("unknown argument '%s'"):format(a)
    end
    local key, kind = spec[1], spec[2]
    if kind == "switch" then
      if inline then return nil, ("%s takes no value"):format(flag) end
      opts[key] = true
    else
      local v = inline
      if not v then
        i = i + 1
        v = args[i]
        if v == nil then return nil, ("%s needs a value"):format(flag) end
      end
      local val, err = _convert(kind, flag, v)
      if val == nil then return nil, err end
      opts[key] = val
    end
    i = i + 1
  end
  if opts.port == nil then
    local p = env("OBLETH_PORT")
    if p == nil or p == "" then
      return nil, "no port: pass --port N or set OBLETH_PORT"
    end
    local val, err = _convert("port", "OBLETH_PORT", p)
    if val == nil then return nil, err end
    opts.port = val
  end
  if opts.model == nil then
    local m = env("OBLETH_API_MODEL_NAME")
    opts.model = (m ~= nil and m ~= "") and m or smoke.DEFAULT_MODEL
  end
  local rid = env("OBLETH_REPLICA_ID")
  opts.replica_id = (rid ~= nil and rid ~= "") and rid or nil
  opts.host = opts.host or "0.0.0.0"
  opts.mode = opts.mode or "ok"
  if opts.mode == "exit" and opts.exit_after == nil then
    return nil, "--mode exit needs --exit-after SECONDS"
  end
  return opts
end

local function _fail_usage(msg)
  io.stderr:write("obleth smoke-engine: ", msg, "\n\n", M.usage)
  return M.EXIT_USAGE
end

--- Entry point: `obleth smoke-engine ARGS`.
---@param args string[]
---@return integer exit status
function M.main(args)
  local opts, err = M.parse(args or {})
  if not opts then return _fail_usage(err) end
  if opts.help then
    io.stdout:write(M.usage)
    return 0
  end

  if opts.mode == "crash-on-start" then
    -- like an engine that fails to load its model: before binding the port
    log.error("smoke_engine_crash", { model = opts.model, reason = "crash-on-start mode" })
    io.stderr:write(("obleth smoke-engine: failed to load model '%s' (crash-on-start mode)\n"):format(opts.model))
    return M.EXIT_CRASH
  end

  local engine = smoke.new{
    model = opts.model,
    mode = (opts.mode == "exit") and "ok" or opts.mode,
    startup_delay = opts.startup_delay,
    tokens = opts.tokens,
    token_delay = opts.token_delay,
    replica = opts.replica_id,
  }
  local server, berr = http.server{ host = opts.host, port = opts.port, handler = engine:handler() }
  if not server then
    -- the host was validated as a numeric address, so a failed bind is
    -- almost always a port someone else holds
    local code = opts.fail_port_in_use and M.EXIT_PORT_IN_USE or 1
    log.error("smoke_engine_bind_failed", { host = opts.host, port = opts.port, error = berr, exit = code })
    io.stderr:write(("obleth smoke-engine: cannot bind %s:%d: address already in use? (%s)\n"):format(
      opts.host, opts.port, tostring(berr)))
    return code
  end
  local port = server:port()
  if not opts.replica_id then engine:set_replica(("%s:%d"):format(sys.hostname(), port)) end

  local function stop(code, event, fields)
    log.info(event, fields)
    loop.stop(code)
  end
  local handles = {}
  for _, sig in ipairs({ "TERM", "INT" }) do
    handles[#handles + 1] = loop.on_signal(sig, function(name)
      stop(0, "smoke_engine_signal", { signal = name, exit = 0 })
    end)
  end
  if opts.exit_after then
    local code = opts.mode == "exit" and 1 or 0
    handles[#handles + 1] = loop.after(opts.exit_after, function()
      stop(code, "smoke_engine_exit_after", { seconds = opts.exit_after, exit = code })
    end)
  end

  log.info("smoke_engine_started", {
    host = opts.host, port = port, model = opts.model, mode = opts.mode, replica = engine.replica,
    startup_delay = opts.startup_delay or 0, pid = sys.getpid(),
  })
  io.stdout:write(("obleth smoke-engine listening on %s:%d model=%s replica=%s\n"):format(
    opts.host, port, opts.model, engine.replica))
  io.stdout:flush()

  local code = loop.run()
  for _, h in ipairs(handles) do h:cancel() end
  server:close()
  return code
end

return M
