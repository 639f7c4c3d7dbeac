--- `obleth repl`: interactive Lua in the obleth runtime, with `slurm`
--- already connected to the configured cluster, `api` (the Management API,
--- read-only), `plan()` (a dry run of the provisioner's next pass), `policy`
--- (the live policies on live facts, `policy.try(path)` for an edit) and
--- `help()`.
--
-- Meant for poking at a production cluster: calls that change it (submit,
-- cancel) are refused unless the REPL was started with --write, and then each
-- one says what it will do and asks once (--yes answers for scripts). Lines
-- are evaluated as expressions first (results pretty-printed; job, node and
-- partition lists and the dry run as aligned tables), then as statements; an
-- incomplete chunk continues on the next line. Readline history lives in
-- ~/.obleth_history; Tab completes table fields. No secret is ever printed.
local args = require "obleth.util.args"
local pp = require "obleth.repl.pp"
local fmt = require "obleth.util.format"
local tables = require "obleth.util.tables"
local slurm_options = require "obleth.slurm.options"

local M = {}

local spec = {
  write = { kind = "boolean", help = "allow calls that change the cluster (submit, cancel); each one asks first" },
  yes = { kind = "boolean", help = "with --write: answer yes to every write's question (for scripts)" },
  eval = { kind = "string", short = "e", arg = "CODE", help = "evaluate CODE, print its results and exit" },
  help = { kind = "boolean", short = "h", help = "this help" },
}
for k, v in pairs(slurm_options.connection_spec) do spec[k] = v end

local WRITE_CALLS = { submit = true, submit_body = true, cancel = true }

--- Nodes as rows: name, state, CPUs free/total, memory free/total (MiB), GPUs free by type, features.
---@param nodes table[] normalized nodes (obleth.slurm.normalize)
---@return string
function M.nodes_table(nodes)
  local rows = {}
  for _, n in ipairs(nodes) do
    local gpus = {}
    local total = n.gres and n.gres.gpu and n.gres.gpu.by_type or {}
    local free = n.gres_free and n.gres_free.gpu and n.gres_free.gpu.by_type or {}
    for ty, t in pairs(total) do gpus[#gpus + 1] = ("%s %d/%d"):format(ty ~= "" and ty or "gpu", free[ty] or 0, t) end
    table.sort(gpus)
    local feats = {}
    for f in pairs(n.features or {}) do feats[#feats + 1] = f end
    table.sort(feats)
    local cpus = n.cpus and ("%d/%d"):format(n.cpus - (n.alloc_cpus or 0), n.cpus) or "-"
    local mem = n.memory and ("%d/%d"):format(n.memory - (n.alloc_memory or 0), n.memory) or "-"
    rows[#rows + 1] = { n.name, fmt.state_str(n.state), cpus, mem, #gpus > 0 and table.concat(gpus, ", ") or "-",
      table.concat(feats, ","), n.reason or "" }
  end
  return fmt.table({ "NODE", "STATE", "CPUS FREE", "MEMORY FREE (MiB)", "GPUS FREE", "FEATURES", "REASON" }, rows)
end

--- What a write call would do, in words (shown before asking).
---@param conn table the connection
---@param name string "submit"|"submit_body"|"cancel"
---@param a table the call's arguments
---@return string
function M.describe_write(conn, name, a)
  if name == "cancel" then
    local id = a[1]
    local j = math.tointeger(tonumber(id)) and conn:job(math.tointeger(tonumber(id)))
    local what = j and (" (%s, user %s, %s%s)"):format(tostring(j.name), tostring(j.user), fmt.state_str(j.state),
      j.nodes and j.nodes ~= "" and (" on " .. j.nodes) or "") or " (not found in Slurm)"
    return ("cancel job %s%s%s"):format(tostring(id), what, a[2] and (" with signal " .. tostring(a[2])) or "")
  elseif name == "submit" then
    local d = type(a[1]) == "table" and a[1] or {}
    return ("submit batch job %q to partition %s (account %s, qos %s, %s node(s), time limit %s min)"):format(
      tostring(d.name), tostring(d.partition or "default"), tostring(d.account or "default"),
      tostring(d.qos or "default"), tostring(d.nodes or 1), tostring(d.time_limit or "default"))
  end
  local b = type(a[1]) == "table" and a[1] or {}
  local job = type(b.job) == "table" and b.job or {}
  return ("submit a raw request body: job %q to partition %s"):format(tostring(job.name), tostring(job.partition))
end

--- A view of a connection for the REPL: methods work as `slurm.ping()` and
--- `slurm:ping()`; unless allow_write, changing calls raise with a message
--- that says how to allow them; with allow_write, each one is described and
--- `confirm(question)` must answer true, else it returns nil, {code = "declined", message}.
--- Job, node and partition lists print as aligned tables.
function M.guard(conn, allow_write, confirm)
  local proxy
  local display = {
    nodes = M.nodes_table, jobs = fmt.jobs_table,
    partitions = function(ps) return fmt.partitions_table(ps, conn:nodes() or {}) end,
  }
  proxy = setmetatable({}, {
    __index = function(_, k)
      if WRITE_CALLS[k] and not allow_write then
        return function()
          error(("slurm.%s refused: this REPL is read-only; start it with `obleth repl --write` "
            .. "to submit or cancel jobs"):format(k), 2)
        end
      end
      local v = conn[k]
      if type(v) == "function" then
        return function(first, ...)
          local a = table.pack(...)
          if first ~= proxy then a = table.pack(first, ...) end
          if WRITE_CALLS[k] then
            local what = M.describe_write(conn, k, a)
            if not (confirm and confirm(what)) then
              return nil, { code = "declined", message = "not done: " .. what }
            end
          end
          local r = table.pack(v(conn, table.unpack(a, 1, a.n)))
          -- a list the normalizer marked as a JSON array (obleth.util.tables.ARRAY) is a plain list here
          local mt = type(r[1]) == "table" and getmetatable(r[1])
          if display[k] and type(r[1]) == "table" and (mt == nil or mt == tables.ARRAY) then
            setmetatable(r[1], { __repl = display[k] })
          end
          return table.unpack(r, 1, r.n)
        end
      end
      return v
    end,
    __tostring = function()
      return ("slurm connection %s (%s)"):format(conn:version(), allow_write and "writes allowed" or "read-only")
    end,
    -- names for Tab completion (the __index above is a function)
    __fields = (function()
      local f = {}
      local cls = getmetatable(conn) and getmetatable(conn).__index
      if type(cls) == "table" then for k in pairs(cls) do f[k] = true end end
      return f
    end)(),
  })
  return proxy
end

--- Completion candidates for `text` (e.g. "slurm.pa", "string.fo") in env.
function M.complete(env, text)
  local path, sep, prefix = text:match("^(.-)([%.:]?)([%w_]*)$")
  local target = env
  if sep ~= "" then
    for part in path:gmatch("[^%.:]+") do
      local ok, v = pcall(function() return target[part] end)
      if not ok or v == nil then return {} end
      target = v
    end
  end
  local names, seen = {}, {}
  local function add_from(t)
    if type(t) ~= "table" then return end
    for k in pairs(t) do
      if type(k) == "string" and k:sub(1, #prefix) == prefix and not seen[k] and k:sub(1, 1) ~= "_" then
        seen[k] = true
        names[#names + 1] = path .. sep .. k
      end
    end
  end
  local mt = getmetatable(target)
  add_from(type(target) == "table" and target or nil)
  if type(target) ~= "table" or sep ~= "" then
    if type(mt) == "table" and type(mt.__index) == "table" then add_from(mt.__index) end
    if type(mt) == "table" and type(mt.__fields) == "table" then add_from(mt.__fields) end
    if type(target) == "string" then add_from(string) end
  end
  if sep == "" then add_from(_G) end
  table.sort(names)
  return names
end

-- One result as text: a value whose metatable has __repl(v) → string is
-- shown that way (aligned tables), anything else pretty-printed.
local function result_text(v)
  local mt = type(v) == "table" and getmetatable(v)
  if type(mt) == "table" and type(mt.__repl) == "function" then
    local ok, s = pcall(mt.__repl, v)
    if ok then return s end
  end
  return pp.format(v)
end

local function results_text(n, ...)
  local parts = {}
  for i = 1, n do parts[i] = result_text((select(i, ...))) end
  return table.concat(parts, "\t")
end

--- Evaluate one chunk in env. Returns "incomplete" when more lines are needed.
function M.eval(env, src, out)
  local fn, err = load("return " .. src, "=repl", "t", env)
  if not fn then
    fn, err = load(src, "=repl", "t", env)
  end
  if not fn then
    if err:match("<eof>$") then return "incomplete" end
    out("error: " .. err)
    return "error"
  end
  local res = table.pack(xpcall(fn, function(e) return debug.traceback(tostring(e), 2) end))
  if not res[1] then
    local msg = tostring(res[2]):gsub("\nstack traceback:.*$", "")
    out("error: " .. msg)
    return "error"
  end
  if res.n > 1 then out(results_text(res.n - 1, table.unpack(res, 2, res.n))) end
  return "ok"
end

--- The REPL's top-level functions beside the handles, made for one session.
---@param ctx {conn: table|nil, source: string, o: table, admin: table|nil, secrets: table, out: fun(s: string),
---  policy: table, live: table}
---@return table H {plan, help, banner, rows}
function M.handles(ctx)
  local H = {}

  --- A dry run of the provisioner's next pass from live facts (the snapshot of the Management API, one job
  --- listing, the policies in use): each replica's state now and after the pass, and what would be
  --- submitted, cancelled, rolled over or marked lost, with the rule and the facts behind each. Sends
  --- nothing. The answer prints as tables; `.actions` and `.replicas` are its rows.
  ---@return table run {now, replicas = {model, slot, job_id, node, now, next}[], actions = {action, model,
  ---  slot, job_id, rule, facts}[], submits: integer, cancels: integer, policy_error: string|nil}
  function H.plan()
    local f, err = ctx.live.pass(ctx.policy.get("lost").window())
    if not f then error("plan: " .. (type(err) == "table" and tostring(err.message) or tostring(err)), 2) end
    local _, _, perr = require("obleth.provisioner").rules(ctx.policy)
    local run = require("obleth.repl.dryrun").run { now = f.now, snapshot = f.snapshot, jobs = f.jobs,
      job_by_id = f.job_by_id, lost = ctx.policy.get("lost"), rollover = ctx.policy.get("rollover"),
      scale = ctx.policy.get("scale"),
      drain_seconds = tonumber(os.getenv("OBLETH_DRAIN_SECONDS") or "") }
    run.policy_error = perr
    run.state = nil
    return setmetatable(run, { __repl = function(r)
      local text = require("obleth.repl.dryrun").render(r)
      if r.policy_error then text = text .. "\n" .. r.policy_error end
      return text
    end })
  end

  --- Print a list of records as aligned rows of the given fields (dotted paths reach into nested tables).
  ---@param list table[] e.g. a filtered slurm.jobs()
  ---@param ... string field names, e.g. "id", "name", "state.base", "nodes"
  ---@return table list the same list, shown as rows
  function H.rows(list, ...)
    if type(list) ~= "table" then error("rows: give a list of records, then field names", 2) end
    local fields = { ... }
    if #fields == 0 then error('rows: name the fields to show, e.g. rows(list, "id", "name")', 2) end
    local function get(x, path)
      for part in path:gmatch("[^.]+") do
        if type(x) ~= "table" then return nil end
        x = x[math.tointeger(tonumber(part)) or part]
      end
      if type(x) ~= "table" then return x end
      -- one line: an array or a set as its items, anything else flattened
      local items, set = {}, true
      for k, v in pairs(x) do
        if v ~= true then set = false end
        items[#items + 1] = k
      end
      if set then table.sort(items, function(a, b) return tostring(a) < tostring(b) end)
      elseif #x == #items then items = x
      else return (pp.format(x):gsub("%s*\n%s*", " ")) end
      local parts = {}
      for i, v in ipairs(items) do parts[i] = tostring(v) end
      return table.concat(parts, ",")
    end
    local headers = {}
    for i, f in ipairs(fields) do headers[i] = f:upper() end
    return setmetatable(list, { __repl = function(l)
      local out = {}
      for _, x in ipairs(l) do
        local r = {}
        for i, f in ipairs(fields) do r[i] = get(x, f) end
        out[#out + 1] = r
      end
      return fmt.table(headers, out)
    end })
  end

  --- The handles and their functions with one-line docs (no argument), or one handle's or function's
  --- documentation with examples: help("slurm"), help("policy.try"), help("plan").
  ---@param name string|nil
  function H.help(name) ctx.out(require("obleth.repl.help").text(name)) end

  --- Where this REPL is connected: slurmrestd and through what, the cluster, API version and Slurm
  --- release, Slurm user and when the JWT expires, the Management API, the policy directory, and whether
  --- writes are allowed. Never a secret.
  function H.banner() ctx.out(M.banner_text(ctx)) end

  return H
end

--- The banner's text (see H.banner).
---@return string
function M.banner_text(ctx)
  local sys = require "obleth.sys"
  local lines = { ("obleth %s REPL — help() lists what is here"):format(sys.version) }
  local conn = ctx.conn
  if conn then
    local info = conn:info() or {}
    local where = info.url or info.socket or "?"
    local ping = conn:ping() or {}
    local cluster
    local names = {}
    for _, c in ipairs(conn:clusters() or {}) do names[#names + 1] = c.name end
    if #names > 0 then cluster = table.concat(names, ",") end
    lines[#lines + 1] = ("slurmrestd  %s (%s)"):format(where, ctx.source)
    lines[#lines + 1] = ("cluster     %s   API %s   Slurm %s   controller %s"):format(tostring(cluster or "?"),
      conn:version(), tostring(ping.release or "?"), tostring(ping.hostname or "?"))
    local exp = ctx.token and require("obleth.slurm").token_expiry(ctx.token)
    lines[#lines + 1] = ("Slurm user  %s%s"):format(tostring(info.user or "?"),
      exp and ("   JWT expires %s (in %s)"):format(os.date("!%Y-%m-%d %H:%M:%SZ", exp), fmt.duration(exp - os.time())) or "")
  else
    lines[#lines + 1] = "slurmrestd  not connected: " .. slurm_options.error_text(ctx.conn_error)
  end
  lines[#lines + 1] = ctx.admin and ("Management API  %s (api, plan())"):format(ctx.admin.base)
    or "Management API  not set (OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN): no api, no plan()"
  local perrs = ctx.policy.errors()
  local bad = {}
  for name, e in pairs(perrs) do bad[#bad + 1] = ("%s: %s"):format(name, tostring(e.message)) end
  table.sort(bad)
  lines[#lines + 1] = ("policy dir  %s%s"):format(tostring(ctx.policy_dir),
    #bad > 0 and ("   errors (previous version kept): " .. table.concat(bad, "; ")) or "")
  lines[#lines + 1] = ctx.o.write and "writes      ALLOWED: each submit or cancel says what it will do and asks first"
    or "writes      refused (read-only; start with --write to submit or cancel)"
  return table.concat(lines, "\n")
end

function M.main(argv)
  local o, perr = args.parse(argv, spec)
  if not o or o.help then
    io.stderr:write(perr and ("obleth repl: " .. perr .. "\n") or "", "usage: obleth repl [--write [--yes]] [-e CODE]\n",
      args.help(spec), "\n",
      "environment: OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN (api, plan(), the Slurm connection saved in\n",
      "obleth serve), OBLETH_SLURM_URL / _SOCKET / _USER / _TOKEN (a connection of its own), OBLETH_POLICY_DIR\n",
      "(default /etc/obleth/policy.d). In the REPL, help() lists what is there; see docs/repl.md.\n")
    return o and 0 or 2
  end
  local sys = require "obleth.sys"
  local log = require "obleth.log"
  local interactive = o.eval == nil and sys.isatty(0)
  local rl
  if interactive then rl = require "obleth.readline" end
  local function out(s) io.stdout:write(s, "\n") io.stdout:flush() end

  local env = setmetatable({}, { __index = _G })
  env.loop = require "obleth.loop"
  env.http = require "obleth.http"
  env.yaml = require "obleth.yaml"
  env.cjson = require "cjson"
  env.log = log
  env.sys = sys
  env.pp = function(...) print(results_text(select("#", ...), ...)) end
  env.slurm_lib = require "obleth.slurm"

  -- the Management API (the saved connection, api, plan) and the secrets it hands out
  local secrets = {}
  local base, admin_token = os.getenv("OBLETH_ADMIN_BASE_URL"), os.getenv("OBLETH_ADMIN_TOKEN")
  if base == "" or admin_token == "" then base, admin_token = nil, nil end
  local client = base and admin_token and require("obleth.provisioner.client").new(base, admin_token) or nil
  if admin_token then log.add_secret(admin_token) end
  local function remember(snap)
    local st = snap and snap.settings or {}
    if type(st.token) == "string" then secrets[st.token] = true; log.add_secret(st.token) end
    local d = type(st.defaults) == "table" and st.defaults or {}
    if type(d.hf_token) == "string" then secrets[d.hf_token] = true; log.add_secret(d.hf_token) end
  end

  local direct = o.url or o.socket or os.getenv("OBLETH_SLURM_URL") or os.getenv("OBLETH_SLURM_SOCKET")
  local source = direct and ((o.url or o.socket) and "from the command line"
    or (os.getenv("OBLETH_SLURM_URL") and "from OBLETH_SLURM_URL" or "from OBLETH_SLURM_SOCKET"))
    or (client and ("the connection saved in obleth serve at " .. client.base)) or "not configured"
  local conn, cerr = slurm_options.connect(o, require("obleth.provisioner.client").saved_slurm_settings)
  local token
  if conn and not direct and client then
    local snap = client:snapshot()
    remember(snap)
    token = snap and snap.settings and snap.settings.token
  elseif conn then
    local copts = slurm_options.connection_options(o)
    token = copts and copts.token
    if token then secrets[token] = true; log.add_secret(token) end
  end

  local function confirm(what)
    if o.yes then out("write: " .. what .. " (--yes)") return true end
    if not interactive then
      out("write refused: " .. what .. ": no terminal to ask (add --yes to allow writes from a script)")
      return false
    end
    local answer = rl.readline(("%s? [y/N] "):format(what))
    local yes = answer ~= nil and answer:match("^%s*[yY]") ~= nil
    if not yes then out("not done") end
    return yes
  end

  if conn then
    env.slurm = M.guard(conn, o.write, confirm)
  else
    io.stderr:write("obleth repl: not connected to Slurm: ", slurm_options.error_text(cerr), "\n")
    env.slurm = setmetatable({}, { __index = function()
      error("not connected to Slurm: " .. slurm_options.error_text(cerr) .. " (see obleth repl --help)", 2)
    end })
  end

  local policy_set = require "obleth.policy"
  local api
  if client then
    api = require("obleth.repl.api").new(client.base, admin_token, secrets)
  else
    api = setmetatable({}, { __index = function(_, k)
      error(("api.%s: no Management API: set OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN"):format(tostring(k)), 2)
    end })
  end
  env.api = api

  -- live facts, read fresh for every call
  local live = {}
  local NO_API = { code = "no_api", message = "no Management API: set OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN" }
  function live.pass(ends)
    if not client then return nil, NO_API end
    if not conn then return nil, { code = "no_slurm", message = "not connected to Slurm: " .. slurm_options.error_text(cerr) } end
    local snap, err = client:snapshot { ends = ends }
    if not snap then return nil, err end
    remember(snap)
    local st = snap.settings or {}
    -- a renewed JWT reaches the REPL's own connection too (never printed)
    if not direct and type(st.token) == "string" and st.token ~= token then
      token = st.token
      conn:set_token(token)
    end
    local jobs, jerr = conn:jobs()
    if not jobs then return nil, { code = "slurm", message = "listing jobs: " .. tostring(jerr.message) } end
    local by_id, ierr = require("obleth.provisioner").lookup_jobs(conn, snap, jobs)
    if not by_id then return nil, ierr end
    return { now = os.time(), snapshot = snap, jobs = jobs, job_by_id = by_id }
  end
  function live.cluster()
    if not conn then return nil, { code = "no_slurm", message = "not connected to Slurm: " .. slurm_options.error_text(cerr) } end
    local f = {}
    local calls = { { "partitions", function() return conn:partitions() end },
      { "nodes", function() return conn:nodes() end }, { "qos", function() return conn:qos() end },
      { "associations", function() return conn:associations { user = (conn:info() or {}).user } end } }
    for _, c in ipairs(calls) do
      local v, e = c[2]()
      if not v then
        return nil, { code = "slurm", message = ("slurmrestd %s: %s"):format(c[1], tostring(e and e.message)) }
      end
      f[c[1]] = v
    end
    return f
  end
  function live.launches(q)
    if not client then return {} end
    return api.launches(q)
  end
  env.policy = require("obleth.repl.policy").new(policy_set, live)

  local ctx = { conn = conn, conn_error = cerr, source = source, o = o, admin = client, secrets = secrets,
    out = out, policy = policy_set, live = live, token = token,
    policy_dir = os.getenv("OBLETH_POLICY_DIR") or policy_set.DEFAULT_DIR }
  local H = M.handles(ctx)
  env.plan, env.help, env.banner, env.rows = H.plan, H.help, H.banner, H.rows

  if o.eval then
    local r = M.eval(env, o.eval, out)
    return r == "ok" and 0 or 1
  end
  local hist
  if interactive then
    hist = os.getenv("HOME") and (os.getenv("HOME") .. "/.obleth_history")
    if hist then rl.read_history(hist) end
    rl.set_completer(function(text) return M.complete(env, text) end)
    out(M.banner_text(ctx))
  end
  local buf = nil
  local failed = false
  while true do
    local line
    if interactive then
      line = rl.readline(buf and ">> " or "obleth> ")
    else
      line = io.stdin:read("l")
    end
    if line == nil then break end
    if interactive and line:match("%S") then rl.add_history(line) end
    buf = buf and (buf .. "\n" .. line) or line
    if buf:match("%S") then
      local r = M.eval(env, buf, out)
      if r ~= "incomplete" then
        if r == "error" then failed = true end
        buf = nil
      end
    else
      buf = nil
    end
  end
  if buf then out("error: incomplete input at end of file") failed = true end
  if interactive and hist then rl.write_history(hist) end
  if interactive then io.stdout:write("\n") end
  return (not interactive and failed) and 1 or 0
end

return M
