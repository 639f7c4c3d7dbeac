--- The job's last words (docs/replicas-and-failures.md, "The job's last words"): the last lines of a
-- replica's job stdout and stderr, and the failure class they show.
--
-- They reach obleth serve two ways:
--   * the job log dir (the cluster default `log_dir`) is mounted on serve's host at the same path:
--     serve reads the end of the files Slurm names for the job (never outside that dir, never
--     through a symbolic link);
--   * the job reports them when it exits: `PUT /api/v1/replica-logs/{nonce}/{stream}` with its own
--     token, an HMAC of the replica's nonce under the admin token (`M.token`), which the provisioner
--     puts in the job's environment. The token is good for that one replica's log and nothing else.
-- Both are bounded (M.MAX_BYTES of each stream, the last M.MAX_LINES lines shown) and redacted (the
-- secrets obleth knows, and anything shaped like a token) before they are kept or answered.
local errors = require "obleth.api.errors"
local params = require "obleth.api.params"
local json = require "obleth.util.json"

local M = {}

--- Lines of each stream answered.
M.MAX_LINES = 40
--- Bytes of the end of each stream read or kept.
M.MAX_BYTES = 16384
--- The largest report body accepted (a job sends its last 16 KiB).
M.MAX_BODY = 65536
M.STREAMS = { stderr = true, stdout = true }

--- The report token of one replica (obleth.job.log_token: the provisioner puts it in the job's
--- environment, this API checks it).
M.token = require("obleth.job").log_token

-- Shapes of secrets whatever obleth knows of them: a JWT, a Hugging Face token, a client key,
-- a bearer header, key=value / key: value for the usual secret names.
local SHAPES = {
  { "eyJ[%w_%-]+%.[%w_%-]+%.[%w_%-]+", "[redacted]" },
  { "hf_[%w]+", "[redacted]" },
  { "obk_%x+", "[redacted]" },
  { "([Bb]earer%s+)[%w%._~%+/%-]+=*", "%1[redacted]" },
}
local NAMES = { "token", "password", "passwd", "secret", "api_key", "apikey", "access_key", "private_key" }

--- text with the secrets obleth knows (the log's registered ones) and token-shaped words replaced.
---@param text string
---@param log table|nil obleth.log (its redact)
---@return string
function M.redact(text, log)
  if log and log.redact then text = log.redact(text) end
  for _, s in ipairs(SHAPES) do text = text:gsub(s[1], s[2]) end
  for _, n in ipairs(NAMES) do
    -- NAME=value, NAME: value, "NAME": "value" (any case)
    local pat = n:gsub("%a", function(c) return "[" .. c:lower() .. c:upper() .. "]" end)
    text = text:gsub("(" .. pat .. "[\"']?%s*[=:]%s*[\"']?)[^%s\"',;]+", "%1[redacted]")
  end
  return text
end

--- The last `max` lines of text (oldest first), with control characters other than tab removed.
--- `cut` says text starts mid-stream: its first (partial) line is dropped.
---@return string[] lines, boolean truncated (lines were left out)
function M.lines(text, max, cut)
  max = max or M.MAX_LINES
  local all = {}
  text = text:gsub("\r\n", "\n")
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do all[#all + 1] = (l:gsub("\r", ""):gsub("[%z\1-\8\11-\31\127]", "")) end
  if all[#all] == "" then all[#all] = nil end -- the newline that ends the text
  local first = 1
  if cut and #all > 1 then first = 2 end
  local truncated = cut or false
  if #all - first + 1 > max then first, truncated = #all - max + 1, true end
  local out = json.array()
  for i = first, #all do out[#out + 1] = all[i] end
  return out, truncated
end

--- Slurm's filename pattern with this job's values (obleth.slurm.normalize.expand_path, the one
--- reader of sbatch's filename patterns).
M.expand = require("obleth.slurm.normalize").expand_path

local function _why(message) return nil, { code = "log_unreadable", message = message } end

--- Read the end of path when it is a regular file inside dir (no "..", no symbolic link).
---@return string|nil text, boolean|{code: string, message: string} cut (started mid-file) or why not
function M.read_tail(path, dir)
  local sys = require "obleth.sys"
  if type(dir) ~= "string" or dir == "" then return _why("no job log dir is set (cluster defaults: log_dir)") end
  dir = dir:gsub("/+$", "")
  if path:sub(1, #dir + 1) ~= dir .. "/" or path:find("/%.%.?/") or path:find("/%.%.?$") then
    return _why("outside the job log dir " .. dir)
  end
  local st = sys.stat(path, true)
  if not st then return _why("not readable on this host (is the job log dir mounted here?)") end
  if st.type ~= "file" then return _why("not a regular file") end
  local fh = io.open(path, "rb")
  if not fh then return _why("not readable on this host (permissions)") end
  local size = fh:seek("end")
  local from = size and math.max(0, size - M.MAX_BYTES) or 0
  fh:seek("set", from)
  local text = fh:read(M.MAX_BYTES) or ""
  fh:close()
  return text, from > 0
end

local _v = json.nonnull

-- The paths of a replica's job output: Slurm's (the replica's `slurm`), else the spec's.
local function _paths(app, r)
  local s = type(r.slurm) == "table" and r.slurm or {}
  local out, err = s.stdout, s.stderr
  if (not out or not err) then
    local model = app.store:get_model(r.model_id)
    local spec = app.store:get_spec(r.model_id)
    if model and spec then
      local o, e = require("obleth.job").log_paths(model, spec, app:slurm_settings().defaults)
      out, err = out or o, err or e
    end
  end
  local e = type(r["end"]) == "table" and r["end"] or {}
  local job = { id = _v(r.job_id), user = app:slurm_settings().user, node = _v(r.node) or _v(e.node),
    name = require("obleth.job.tag").name(app.store:instance(), r.model_id, r.slot, r.nonce) }
  return { stdout = M.expand(out, job), stderr = M.expand(err, job), stdout_pattern = out, stderr_pattern = err }
end

--- The log answer of one replica (GET /api/v1/replicas/{id}/log).
---@param app table the API application
---@param r table a replica row (store)
---@param policy fun(name: string): table|nil the policy set's get (obleth.policy)
function M.answer(app, r, policy)
  local defaults = app:slurm_settings().defaults -- also registers the secrets with the log
  local reported = app.store:replica_logs(r.id)
  -- a replica whose submit Slurm refused has no job, so no output anywhere
  local paths = _v(r.job_id) and _paths(app, r) or {}
  local streams = json.array()
  local lines_of = {}
  for _, name in ipairs({ "stderr", "stdout" }) do
    local st = { stream = name, path = paths[name] or _v(paths[name .. "_pattern"]) or json.null,
      lines = json.array(), truncated = false, source = json.null, reported_at = json.null }
    local text, cut
    if paths[name] then
      text, cut = M.read_tail(paths[name], defaults.log_dir)
      if text then st.source = "log_dir" else st.note = cut.message end
    elseif not _v(r.job_id) then
      st.note = "no job was created"
    elseif not paths[name .. "_pattern"] then
      st.note = "Slurm names no file for it"
    end
    local rep = reported[name]
    if not text and rep then
      text, cut, st.source, st.reported_at = rep.tail, #rep.tail >= M.MAX_BYTES, "job", rep.reported_at
      st.note = nil
    end
    if text then
      local clean = M.redact(text, app.log)
      st.lines, st.truncated = M.lines(clean, M.MAX_LINES, cut == true)
      lines_of[name] = st.lines
      -- an ended job's output no longer changes: kept, so "From past runs" can read it later
      if st.source == "log_dir" and not rep and (r.state == "ended" or r.state == "lost") then
        app.store:put_replica_log(r.id, name, clean:sub(-M.MAX_BYTES), st.path ~= json.null and st.path or nil, nil,
          app.now())
      end
    end
    streams[#streams + 1] = st
  end
  local e = type(r["end"]) == "table" and r["end"] or {}
  local facts = { state = _v(e.state), reason = _v(e.reason), exit_code = _v(e.exit_code), signal = _v(e.signal),
    cancel_why = _v(r.cancel_why), replica_state = r.state, stderr = lines_of.stderr, stdout = lines_of.stdout }
  if facts.exit_code == nil and reported.stderr then facts.exit_code = reported.stderr.exit_code end
  local failure = json.null
  if r.state ~= "healthy" then
    local mod = policy and policy("failures") or require("obleth.policy.failures")
    local ok, c = pcall(mod.classify, facts)
    if ok and c then
      failure = c
      failure.doc = "/docs/replicas-and-failures#" .. tostring(c.anchor)
      if failure.node_fault == nil then failure.node_fault = json.null end
    end
  end
  return { replica_id = r.id, model_id = r.model_id, job_id = r.job_id, state = r.state, streams = streams,
    failure = failure, max_lines = M.MAX_LINES }
end

--- Give each job outcome of these launches the last lines of its job's stderr and stdout that obleth
--- keeps (`stderr`, `stdout`: arrays of lines, redacted), for the failures policy.
---@param store table
---@param launches table[] store launches, each with `outcomes` ({replica_id, ...})
function M.attach_to_outcomes(store, launches)
  for _, l in ipairs(launches or {}) do
    for _, o in ipairs(l.outcomes or {}) do
      if math.type(o.replica_id) == "integer" then
        local logs = store:replica_logs(o.replica_id)
        for _, name in ipairs({ "stderr", "stdout" }) do
          if logs[name] then o[name] = (M.lines(logs[name].tail, M.MAX_LINES, #logs[name].tail >= M.MAX_BYTES)) end
        end
      end
    end
  end
  return launches
end

local function _policy(ctx)
  local get = ctx.app.policy
  if type(get) == "function" then return get end
  local ok, p = pcall(require, "obleth.policy")
  if ok then return function(name) return p.get(name) end end
  return nil
end

local function get_log(ctx)
  local id = params.int_param(ctx, "id")
  local r = id and ctx.app.store:get_replica(id)
  if not r then return errors.not_found("replica", ctx.params.id) end
  return 200, M.answer(ctx.app, r, _policy(ctx))
end

-- PUT /api/v1/replica-logs/{nonce}/{stream}: the job's report, with its own token (public route:
-- the admin token and sessions are not asked for, and not enough).
local function put_log(ctx)
  local nonce, stream = ctx.params.nonce, ctx.params.stream
  local h = (ctx.req.headers or {})["authorization"]
  local tok = type(h) == "string" and h:match("^[Bb]earer%s+(%x+)%s*$")
  local r = type(nonce) == "string" and nonce:match("^[%w]+$") and ctx.app.store:replica_by_nonce(nonce)
  -- one answer for a wrong token and an unknown replica: the route tells nothing about which exist
  if not tok or not r or not require("obleth.sys").consteq(tok, M.token(ctx.app._token, nonce)) then
    return errors.fail(401, "unauthorized", "this route needs the replica's own report token (OBLETH_LOG_TOKEN)")
  end
  if not M.STREAMS[stream] then
    return errors.fail(404, "not_found", ("no stream %q (stdout or stderr)"):format(tostring(stream)), "stream")
  end
  local body = ctx.req.body or ""
  if #body > M.MAX_BODY then
    return errors.fail(413, "too_large", ("the report is %d bytes; at most %d"):format(#body, M.MAX_BODY))
  end
  local code = ctx.query.exit_code
  code = type(code) == "string" and code:match("^%d+$") and math.tointeger(tonumber(code)) or nil
  if code and code > 255 then code = nil end
  ctx.app:slurm_settings() -- registers the stored secrets with the log, so redact knows them
  local tail = M.redact(body:sub(-M.MAX_BYTES), ctx.app.log)
  local ok, err = ctx.app.store:put_replica_log(r.id, stream, tail, nil, code, ctx.app.now())
  if not ok then return errors.store(err) end
  ctx.changes = { { "replicas", r.model_id } }
  return 204, ""
end

M.schemas = {
  ReplicaLog = { type = "object", description = "The last lines of a replica's job stdout and stderr and the failure "
      .. "class they show (docs/replicas-and-failures.md)",
    properties = {
      replica_id = { type = "integer" }, model_id = { type = "integer" }, job_id = { type = { "integer", "null" } },
      state = { type = "string" }, max_lines = { type = "integer" },
      streams = { type = "array", items = { type = "object", properties = {
        stream = { type = "string", enum = { "stderr", "stdout" } },
        path = { type = { "string", "null" }, description = "where the whole stream is, on the cluster's filesystem" },
        lines = { type = "array", items = { type = "string" }, description = "the last lines, oldest first, redacted" },
        truncated = { type = "boolean", description = "earlier lines were left out" },
        source = { type = { "string", "null" }, enum = { "log_dir", "job", json.null },
          description = "log_dir: read from the mounted job log dir; job: reported by the job when it exited" },
        reported_at = { type = { "integer", "null" } },
        note = { type = "string", description = "why the lines are not known here" } } } },
      failure = { type = { "object", "null" }, description = "obleth.policy.failures.classify: class, title, "
        .. "node_fault, what (to do), slurm (Slurm's words), engine (the log line that shows it), anchor, doc" },
    } },
}

M.routes = {
  { "GET", "/api/v1/replicas/{id}/log", get_log,
    summary = "The last lines of a replica's job stderr and stdout (bounded, redacted), where the full logs are, "
      .. "and the failure class they show" },
  { "PUT", "/api/v1/replica-logs/{nonce}/{stream}", put_log, public = true, raw_body = true, query = { "exit_code" },
    changes = { "replicas" },
    summary = "A job's own report of its last output lines when it exits (stream stdout or stderr, text/plain, "
      .. "at most 64 KiB); needs the replica's report token (OBLETH_LOG_TOKEN), not the admin token" },
}

return M
