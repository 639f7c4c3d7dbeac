--- Normalizer for slurmrestd responses, every API version obleth knows (v0.0.38 to v0.0.46;
-- the list is `obleth.slurm.rest.known_versions`).
--
-- Every function takes a response already decoded by cjson (cjson.null, a
-- userdata, is read as nil) and the API version string ("v0.0.38"...), and
-- returns one shape whatever the version. Pure functions, no I/O.
--
-- Numbers. slurmrestd writes "no value"/"unlimited" in several ways:
--   * NV objects {set, infinite, number} (v0.0.39+): infinite=true -> math.huge
--     (checked first: Slurm sends {set=false, infinite=true} for unlimited);
--     set=false -> nil; otherwise number.
--   * raw sentinels: NO_VAL 4294967294 (uint32), NO_VAL16 65534, NO_VAL64
--     18446744073709551614 and -2 mean "unknown" -> nil; INFINITE 4294967295
--     (and -1 where v0.0.38 prints limits signed) means unlimited -> math.huge
--     only for limits (time_limit, max_time, max_nodes); for plain counters
--     (cpus, memory) it is nil.
--   * null: nil, except a job `time_limit` of null, which v0.0.38 prints for
--     UNLIMITED (a job always has a resolved limit: slurmctld copies the
--     partition's, which is INFINITE when the partition has none).
-- Times are epoch seconds; 0 means "not happened" and becomes nil.
-- Time limits are minutes. Memory is MiB.
local hostlist = require "obleth.util.hostlist"
local gres = require "obleth.slurm.gres"
local tables = require "obleth.util.tables"
local cjson = require "cjson"

local M = {}

local HUGE = math.huge
local NO_VAL = 4294967294
local INFINITE = 4294967295

---------------------------------------------------------------------------
-- primitive readers
---------------------------------------------------------------------------

local _v = require("obleth.util.json").nonnull

local function _str(x)
  -- (a null is userdata: not a string) the readers below run for dozens of fields per job, so
  -- they test types inline rather than call _v first
  if type(x) ~= "string" or x == "" then return nil end
  return x
end

local function _int(n)
  return math.tointeger(n) or n
end

--- Read a count: NV, number or nil; unknown sentinels and negatives give nil.
---@param x any
---@return number|nil
function M.count(x)
  if type(x) == "table" then
    if x.infinite == true then return nil end
    if x.set == false then return nil end
    x = x.number
  end
  if type(x) ~= "number" then return nil end -- a null (userdata) too
  if x < 0 or x >= NO_VAL then return nil end
  if x == 65534 then return nil end
  return _int(x)
end

--- Read a limit: like `count` but unlimited (infinite NV, 4294967295, -1) is math.huge.
---@param x any
---@param null_is_unlimited boolean|nil treat null/absent as unlimited
---@return number|nil
function M.limit(x, null_is_unlimited)
  local t = type(x)
  if x == nil or t == "userdata" then return null_is_unlimited and HUGE or nil end
  if t == "table" then
    if x.infinite == true then return HUGE end
    if x.set == false then return nil end
    x = x.number
  end
  if type(x) ~= "number" then return nil end
  if x == INFINITE or x == -1 or x == 65535 then return HUGE end
  if x < 0 or x == NO_VAL or x >= 18446744073709551614 or x == 65534 then return nil end
  return _int(x)
end

--- Read an epoch time: NV or number; 0, unset and sentinels give nil.
---@param x any
---@return integer|nil seconds since the epoch
function M.time(x)
  local n = M.count(x)
  if n == nil or n == 0 then return nil end
  return n
end

local function _vnum(version)
  local n = type(version) == "string" and tonumber(version:match("^v?0%.0%.(%d+)$"))
  if not n then error("unknown slurmrestd API version: " .. tostring(version), 3) end
  return n
end

local function _set_of(x)
  x = _v(x)
  local set = {}
  if type(x) == "string" then
    for item in x:gmatch("[^,]+") do
      item = item:match("^%s*(.-)%s*$")
      if item ~= "" then set[item] = true end
    end
  elseif type(x) == "table" then
    for _, item in ipairs(x) do
      if type(item) == "string" and item ~= "" then set[item] = true end
    end
  end
  return set
end

local function _array_of(x)
  x = _v(x)
  local out = tables.array()
  if type(x) == "string" then
    for item in x:gmatch("[^,]+") do out[#out + 1] = item end
  elseif type(x) == "table" then
    for _, item in ipairs(x) do out[#out + 1] = item end
  end
  return out
end

-- Access-list of a partition: nil means "no restriction" ("" or "ALL").
local function _acl(x)
  x = _v(x)
  if x == nil or x == "" or x == "ALL" then return nil end
  local s = _set_of(x)
  if s.ALL or next(s) == nil then return nil end
  return s
end

---------------------------------------------------------------------------
-- states
---------------------------------------------------------------------------

-- Suffixes sinfo-style node state strings may carry.
local NODE_SUFFIX = {
  ["*"] = "NOT_RESPONDING", ["~"] = "POWERED_DOWN", ["#"] = "POWERING_UP",
  ["%"] = "POWERING_DOWN", ["!"] = "POWER_DOWN", ["$"] = "MAINTENANCE",
  ["@"] = "REBOOT_REQUESTED", ["^"] = "REBOOT_ISSUED", ["-"] = "PLANNED",
}

-- Base job states; job_state strings that name a flag (v0.0.38/39 print
-- job_state_string(), which returns e.g. "COMPLETING" or "REQUEUED" when that
-- flag is set) are kept as the base and also set as a flag.
local JOB_FLAG_NAMES = {
  COMPLETING = true, CONFIGURING = true, REQUEUED = true, RESIZING = true,
  STAGE_OUT = true, SIGNALING = true, STOPPED = true, REQUEUE_FED = true,
  REQUEUE_HOLD = true, SPECIAL_EXIT = true, REVOKED = true, UPDATE_DB = true,
  RECONFIG_FAIL = true, POWER_UP_NODE = true, LAUNCH_FAILED = true,
}

--- Normalize a state value: a string ("IDLE", "idle", "MIXED+DRAIN", "idle*"),
-- or a list (["IDLE","DRAIN"]), plus an optional separate flag list.
---@param state any
---@param extra_flags any optional list of flag names (v0.0.38 `state_flags`)
---@param kind "node"|"job"|nil
---@return {base: string|nil, flags: table<string, boolean>}
function M.state(state, extra_flags, kind)
  state = _v(state)
  local out = { flags = {} }
  local words = {}
  if type(state) == "string" then
    for w in state:gmatch("[^+]+") do words[#words + 1] = w end
  elseif type(state) == "table" then
    for _, w in ipairs(state) do
      if type(w) == "string" then words[#words + 1] = w end
    end
  end
  for i, w in ipairs(words) do
    w = w:upper()
    if kind ~= "job" then
      local last = w:sub(-1)
      while NODE_SUFFIX[last] and #w > 1 do
        out.flags[NODE_SUFFIX[last]] = true
        w = w:sub(1, -2)
        last = w:sub(-1)
      end
    end
    if i == 1 then out.base = w else out.flags[w] = true end
    if kind == "job" and i == 1 and JOB_FLAG_NAMES[w] then out.flags[w] = true end
  end
  if kind == "node" then
    if out.base == "DRAINED" or out.base == "DRAINING" then out.flags.DRAIN = true end
    if out.base == "COMPLETING" then out.flags.COMPLETING = true end
  end
  if type(_v(extra_flags)) == "table" then
    for _, f in ipairs(extra_flags) do
      if type(f) == "string" then out.flags[f:upper()] = true end
    end
  end
  return out
end

--- Flags that stop a node from counting as idle, whatever its base state.
M.NOT_IDLE_FLAGS = {
  DRAIN = true, DRAINING = true, DRAINED = true, DOWN = true, NOT_RESPONDING = true,
  POWERED_DOWN = true, POWERING_DOWN = true, POWERING_UP = true, POWER_DOWN = true,
  FAIL = true, FAILING = true, MAINTENANCE = true, RESERVED = true,
  REBOOT_REQUESTED = true, REBOOT_ISSUED = true, PLANNED = true, COMPLETING = true,
  INVALID_REG = true, POWER_DRAIN = true, BLOCKED = true,
  -- v0.0.45: POWER_DOWN_ASAP (power down once its jobs end, takes none: POWER_DRAIN) and
  -- POWER_DOWN_FORCE (being powered down now, its jobs killed)
  POWER_DOWN_ASAP = true, POWER_DOWN_FORCE = true,
}

--- States and flags of a node whose GPUs are not free to a new job (gpus_free = 0).
M.NO_GPUS_FLAGS = {
  DRAIN = true, DRAINING = true, DRAINED = true, DOWN = true, NOT_RESPONDING = true,
  POWERED_DOWN = true, POWERING_DOWN = true, POWER_DOWN = true, FAIL = true, INVALID_REG = true,
  POWER_DRAIN = true, POWER_DOWN_ASAP = true, POWER_DOWN_FORCE = true,
}

--- True when a normalized node state is plain IDLE without any blocking flag.
---@param st {base: string|nil, flags: table<string, boolean>}
---@return boolean
function M.is_idle(st)
  if not st or st.base ~= "IDLE" then return false end
  for f in pairs(st.flags) do
    if M.NOT_IDLE_FLAGS[f] then return false end
  end
  return true
end

---------------------------------------------------------------------------
-- errors
---------------------------------------------------------------------------

--- Error entries of a response.
-- v0.0.38 writes {error_code, error}; later {error_number, error, description, source};
-- a v0.0.38 parse failure mixes both.
---@param doc table|nil decoded response
---@return {slurm_code: integer|nil, message: string|nil, description: string|nil, source: string|nil}[]
function M.errors(doc)
  local out = {}
  local errs = type(doc) == "table" and _v(doc.errors)
  if type(errs) ~= "table" then return out end
  for _, e in ipairs(errs) do
    if type(e) == "table" then
      local code = _v(e.error_number)
      if type(code) ~= "number" then code = _v(e.error_code) end
      out[#out + 1] = {
        slurm_code = type(code) == "number" and _int(code) or nil,
        message = _str(e.error),
        description = _str(e.description),
        source = _str(e.source),
      }
    elseif type(e) == "string" then
      out[#out + 1] = { message = e }
    end
  end
  return out
end

--- Warning entries (v0.0.39+): {description, source}.
---@param doc table|nil
---@return {message: string|nil, source: string|nil}[]
function M.warnings(doc)
  local out = {}
  local ws = type(doc) == "table" and _v(doc.warnings)
  if type(ws) ~= "table" then return out end
  for _, w in ipairs(ws) do
    if type(w) == "table" then
      out[#out + 1] = { message = _str(w.description), source = _str(w.source) }
    end
  end
  return out
end

---------------------------------------------------------------------------
-- jobs
---------------------------------------------------------------------------

--- Decode a job exit code.
-- v0.0.38/v0.0.39 job info: the raw wait(2) status (exit 1 -> 256; low 7 bits
-- = terminating signal; 4294967294 = none yet). v0.0.39 accounting (early) and
-- v0.0.40+: {status, return_code, signal={id|signal_id, name}}.
---@param x any
---@return {code: integer, signal: integer|nil}|nil
function M.exit_code(x)
  x = _v(x)
  if type(x) == "number" then
    x = math.tointeger(x) -- a wait status is whole; anything else says nothing
    if not x or x < 0 or x >= NO_VAL then return nil end
    local sig = x & 0x7f
    local code = (x >> 8) & 0xff
    return { code = code, signal = sig ~= 0 and sig or nil }
  elseif type(x) == "table" then
    local status = _v(x.status)
    if type(status) == "table" then status = status[1] end
    if status == "PENDING" or status == "INVALID" then return nil end
    local code = M.count(x.return_code) or 0
    local sig
    local s = _v(x.signal)
    if type(s) == "table" then sig = M.count(s.id) or M.count(s.signal_id) end
    if sig == 0 then sig = nil end
    return { code = code, signal = sig }
  end
  return nil
end

-- GPUs of a TRES / GRES string: total, the GPU model(s) as one stable string ("h100", or
-- "h100,h200" for a job holding two models, sorted), and the count per model (nil when untyped).
-- Parsed strings, kept: a listing of thousands of jobs repeats a few TRES strings and node lists, so
-- each is parsed once (pure functions of the string; at most CACHE_MAX of each, then started afresh).
-- Only read here: what is handed out of the module is a copy.
local CACHE_MAX = 4096
local _gres_cache, _gres_n = {}, 0
local function _gres_parse(s)
  if type(s) ~= "string" then return gres.parse(s) end
  local g = _gres_cache[s]
  if g then return g end
  g = gres.parse(s)
  if _gres_n >= CACHE_MAX then _gres_cache, _gres_n = {}, 0 end
  _gres_cache[s], _gres_n = g, _gres_n + 1
  return g
end

local function _gpu_request(tres)
  local g = _gres_parse(tres).gpu
  if not g then return nil, nil, nil end
  local types = {}
  for t, n in pairs(g.by_type) do
    if t ~= gres.UNTYPED and n > 0 then types[#types + 1] = t end
  end
  if #types == 0 then return g.total, nil, nil end
  table.sort(types)
  local by = {}
  for _, t in ipairs(types) do by[t] = g.by_type[t] end
  return g.total, table.concat(types, ","), by
end

-- The names of a hostlist, taken from the answer's budget (`budget` nil: a fresh one).
-- Over budget, or malformed: no names, and `truncated` when it was the budget.
local _hosts_cache, _hosts_n = {}, 0
local function _node_list(expr, budget)
  budget = budget or { left = hostlist.ANSWER_HOSTS }
  local hit = type(expr) == "string" and _hosts_cache[expr]
  if hit and #hit <= budget.left then
    budget.left = budget.left - #hit
    local copy = tables.array()
    for i, n in ipairs(hit) do copy[i] = n end
    return copy
  end
  local l, err = hostlist.expand(expr, budget)
  if l then
    if type(expr) == "string" and #l <= 64 then -- a short list: worth keeping
      if _hosts_n >= CACHE_MAX then _hosts_cache, _hosts_n = {}, 0 end
      local keep = {}
      for i, n in ipairs(l) do keep[i] = n end
      _hosts_cache[expr], _hosts_n = keep, _hosts_n + 1
    end
    return tables.array(l)
  end
  return tables.array(), err and err:find("too large", 1, true) ~= nil or nil
end

--- Slurm's filename pattern (sbatch's "filename pattern") with this job's values: %j and %A the job
--- id, %x the job name, %u the user, %N the (first) node, %% a percent sign, each with an optional
--- zero-padding width (%4j); nil when it has another one or a value is not known (the file cannot be
--- named from here).
---@param pattern string|nil
---@param job {id: integer|nil, name: string|nil, user: string|nil, node: string|nil}
---@return string|nil
function M.expand_path(pattern, job)
  if type(pattern) ~= "string" or pattern == "" then return nil end
  local values = { j = job.id, A = job.id, x = job.name, u = job.user, N = job.node }
  local unknown = false
  local out = pattern:gsub("%%(%d*)(.)", function(width, c)
    if c == "%" then return "%" end
    local v = values[c]
    if v == nil then unknown = true return nil end
    local s = tostring(v)
    local w = tonumber(width)
    if w and #s < w and c ~= "x" and c ~= "u" and c ~= "N" then s = ("0"):rep(w - #s) .. s end
    return s
  end)
  if unknown then return nil end
  return out
end

local function _job_common(out, budget)
  -- 0 minutes never reaches a real job (sbatch --time=0 becomes INFINITE);
  -- accounting rows of jobs that never ran carry it as "unknown".
  if out.time_limit == 0 then out.time_limit = nil end
  local nodes = out.node_count
  out.gpus_per_node, out.gpu_type, out.gpus_by_type = _gpu_request(out.tres_per_node)
  -- --gpus-per-node N on n nodes: N x n for the job
  if out.gpus_per_node and nodes then
    out.gpus = out.gpus or out.gpus_per_node * nodes
    if out.gpus_by_type then
      local job = {}
      for t, n in pairs(out.gpus_by_type) do job[t] = n * nodes end
      out.gpus_by_type = job
    end
  end
  if out.tres_per_job then
    local n, t, by = _gpu_request(out.tres_per_job)
    out.gpus = n or out.gpus
    out.gpu_type = out.gpu_type or t
    out.gpus_by_type = out.gpus_by_type or by
    -- --gpus N on one node (a finished job has no gres_detail left): all N on that node
    if n and nodes == 1 then out.gpus_per_node = out.gpus_per_node or n end
  end
  -- --gpus-per-socket / --gpus-per-task: per node = per socket x sockets per node (1 when
  -- unset); per job = per task x tasks
  local ps, pst = _gpu_request(out.tres_per_socket)
  local pt, ptt = _gpu_request(out.tres_per_task)
  out.gpus_per_socket, out.gpus_per_task = ps, pt
  if ps then out.gpus_per_node = out.gpus_per_node or ps * (out.sockets_per_node or 1) end
  if ps and nodes then out.gpus = out.gpus or out.gpus_per_node * nodes end
  if pt and out.tasks then out.gpus = out.gpus or pt * out.tasks end
  if pt and out.tasks and (nodes or 1) == 1 then out.gpus_per_node = out.gpus_per_node or pt * out.tasks end
  out.gpu_type = out.gpu_type or pst or ptt
  -- a job that runs: what each node was given (gres_detail, one entry per node) is the truth
  if out.gres_detail then
    local total, most, by, any = 0, 0, {}, false
    for _, d in ipairs(out.gres_detail) do
      local n, _, dby = _gpu_request(d)
      if n then
        total = total + n
        if n > most then most = n end
        for t, c in pairs(dby or {}) do by[t] = (by[t] or 0) + c; any = true end
      end
    end
    if total > 0 then
      out.gpus_per_node, out.gpus = most, total
      if any then
        local types = {}
        for t in pairs(by) do types[#types + 1] = t end
        table.sort(types)
        out.gpu_type, out.gpus_by_type = table.concat(types, ","), by
      end
    end
  end
  out.node_list, out.node_list_truncated = _node_list(out.nodes, budget)
  -- log paths: v0.0.43+ send the expanded path beside the pattern; older versions only the pattern,
  -- expanded here when every value it names is known (else it stays the pattern)
  if out.stdout_pattern or out.stderr_pattern then
    local vals = { id = out.id, name = out.name, user = out.user, node = out.batch_host or out.node_list[1] }
    if out.stdout == out.stdout_pattern then out.stdout = M.expand_path(out.stdout_pattern, vals) or out.stdout end
    if out.stderr == out.stderr_pattern then out.stderr = M.expand_path(out.stderr_pattern, vals) or out.stderr end
  end
  out.estimated = out.state.base == "PENDING" or nil
  if out.state.base == "PENDING" then out.exit_code = nil end
  return out
end

--- Normalize one slurmctld job record (an element of `jobs[]`).
-- Shape: {id, name, comment, user, account, partition, qos,
--   state={base, flags}, reason (nil for "None"), nodes (hostlist), node_list,
--   submit_time, start_time, end_time (epoch s; for PENDING jobs start/end are
--   Slurm's estimates and `estimated` is true), time_limit (minutes, math.huge
--   for UNLIMITED), exit_code ({code, signal}; nil while pending),
--   tres_per_node, tres_per_job, tres_per_socket, tres_per_task (raw), gpus_per_node,
--   gpus (per job: tres_per_job, or per node x nodes, per socket x sockets x nodes, per task x
--   tasks), gpus_per_socket, gpus_per_task, gpu_type (the model, or the sorted models joined by
--   "," for a job holding several: "h100,h200"), gpus_by_type ({model = count} per job; nil when
--   untyped) (for a job with gres_detail, the GPUs each node was given win), cpus,
--   sockets_per_node, tasks, node_count, gres_detail (per node), memory_per_node (MiB),
--   memory_per_cpu (MiB), batch_host, working_directory, stdout, stderr (the paths: v0.0.43+'s
--   stdout_expanded / stderr_expanded when sent, else standard_output expanded here from the job's id,
--   name, user and node when it is a pattern), stdout_pattern, stderr_pattern (standard_output /
--   standard_error as sent: the pattern on v0.0.38-39 and v0.0.43+, already expanded on v0.0.40-42)}
---@param j table
---@param version string
---@param budget {left: integer}|nil hostlist names left for the whole answer (`jobs` shares
---  one); over it, node_list is {} and node_list_truncated is true
---@return table
function M.job_record(j, version, budget)
  _vnum(version)
  local out = {
    id = M.count(j.job_id),
    name = _str(j.name),
    comment = _str(j.comment),
    user = _str(j.user_name),
    account = _str(j.account),
    partition = _str(j.partition),
    qos = _str(j.qos),
    state = M.state(j.job_state, nil, "job"),
    reason = _str(j.state_reason),
    description = _str(j.state_description),
    nodes = _str(j.nodes),
    submit_time = M.time(j.submit_time),
    start_time = M.time(j.start_time),
    end_time = M.time(j.end_time),
    time_limit = M.limit(j.time_limit, true),
    exit_code = M.exit_code(j.exit_code),
    tres_per_node = _str(j.tres_per_node),
    tres_per_job = _str(j.tres_per_job),
    tres_per_socket = _str(j.tres_per_socket),
    tres_per_task = _str(j.tres_per_task),
    sockets_per_node = M.count(j.sockets_per_node),
    tasks = M.count(j.tasks),
    node_count = M.count(j.node_count),
    gres_detail = _array_of(j.gres_detail),
    cpus = M.count(j.cpus),
    memory_per_node = M.count(j.memory_per_node),
    memory_per_cpu = M.count(j.memory_per_cpu),
    batch_host = _str(j.batch_host),
    working_directory = _str(j.current_working_directory),
    -- v0.0.43+ send the pattern (%x-%j.out) and, beside it, the path it expands to
    stdout = _str(j.stdout_expanded) or _str(j.standard_output),
    stderr = _str(j.stderr_expanded) or _str(j.standard_error),
    stdout_pattern = _str(j.standard_output),
    stderr_pattern = _str(j.standard_error),
  }
  if out.reason == "None" then out.reason = nil end
  return _job_common(out, budget)
end

-- The records of doc[key]: its entries that are objects (anything else is no record).
local function _list(doc, key)
  local l = type(doc) == "table" and _v(doc[key])
  if type(l) ~= "table" then return {} end
  local out = {}
  for _, x in ipairs(l) do
    if type(x) == "table" then out[#out + 1] = x end
  end
  return out
end

--- All jobs of a `GET /slurm/vX/jobs` response.
---@param doc table
---@param version string
---@param keep (fun(raw: table): boolean)|nil when given, only the records it keeps (it sees Slurm's raw
---  record) are normalized and returned: the provisioner keeps its own jobs, so a cluster's thousands
---  of other jobs cost a name comparison each
---@return table[] jobs in the shape of `job_record`
function M.jobs(doc, version, keep)
  local out = tables.array()
  local budget = { left = hostlist.ANSWER_HOSTS }
  for _, j in ipairs(_list(doc, "jobs")) do
    if not keep or keep(j) then out[#out + 1] = M.job_record(j, version, budget) end
  end
  return out
end

--- The jobs of a listing read as one keyed hash and span per job (obleth.jsonscan.element_hashes),
--- with a cache of normalized jobs by that hash: a job whose text is the same as in the last call
--- costs a table lookup, no string, no decode and no normalization (docs/performance.md). The cache
--- keeps a 16-byte hash per job, not its text (about 2 KB a job in a real listing). Only the jobs
--- `keep` keeps are decoded and cached; `prefilter(text)` false skips a job without decoding it.
--- The records are shared between calls: callers must not write into them.
---@param listing {text: string, hashes: string[], firsts: integer[], lasts: integer[]} the listing's
---  JSON text and, per job, its hash and where its text is (text:sub(firsts[i], lasts[i]))
---@param version string
---@param keep (fun(raw: table): boolean, boolean|nil)|nil true to normalize the job; its second value
---  true when that answer depends on the job's text alone (only then is the record cached)
---@param prefilter (fun(text: string): boolean)|nil false: `keep` would refuse the job
---@param cache table the caller's, the same table each call ({version, map}, filled here)
---@return table[] jobs as M.jobs
function M.jobs_cached(listing, version, keep, prefilter, cache)
  local old = cache.version == version and cache.map or {}
  local new = {}
  local out = tables.array()
  local budget = { left = hostlist.ANSWER_HOSTS }
  local raw, firsts, lasts = listing.text, listing.firsts, listing.lasts
  for i, h in ipairs(listing.hashes) do
    local rec = old[h] or new[h]
    if rec then
      -- the same text: the same record, while the answer's budget of host names allows it
      local n = rec.node_list and #rec.node_list or 0
      if n > budget.left then
        rec = nil
      else
        budget.left = budget.left - n
        out[#out + 1], new[h] = rec, rec
      end
    end
    if not rec then
      local text = raw:sub(firsts[i], lasts[i])
      if not prefilter or prefilter(text) then
        local j = cjson.decode(text)
        local kept, fixed = true, true
        if keep and type(j) == "table" then kept, fixed = keep(j) end
        if type(j) == "table" and kept then
          rec = M.job_record(j, version, budget)
          out[#out + 1] = rec
          -- cached only when keeping it depends on its text alone (not on what the store records)
          if fixed then new[h] = rec end
        end
      end
    end
  end
  cache.version, cache.map = version, new
  return out
end

local function _first(list, doc, what)
  if list[1] then return list[1] end
  local errs = M.errors(doc)
  local e = errs[1] or {}
  return nil, { code = "not_found", slurm_code = e.slurm_code, message = e.message or (what .. " not found"),
    description = e.description }
end

--- The job of a `GET /slurm/vX/job/{id}` response.
---@param doc table
---@param version string
---@return table|nil job
---@return table|nil err {code="not_found", slurm_code, message} when the job is gone (MinJobAge)
function M.job(doc, version)
  return _first(M.jobs(doc, version), doc, "job")
end

--- Normalize one accounting job record (`/slurmdb/vX/job/{id}`, `/jobs`).
-- Same shape as `job_record`; fields the database does not keep
-- (tres_per_node, batch_host) are nil; `gpus` is the total GPU count the job
-- was allocated (or requested, before it ran) across all its nodes.
---@param j table
---@param version string
---@param budget {left: integer}|nil as for `job_record`
---@return table
function M.db_job_record(j, version, budget)
  local v = _vnum(version)
  local t = type(_v(j.time)) == "table" and j.time or {}
  local st = type(_v(j.state)) == "table" and j.state or {}
  local comment = _v(j.comment)
  if type(comment) == "table" then comment = comment.job end
  local req = type(_v(j.required)) == "table" and j.required or {}
  local nodes = _str(j.nodes)
  if nodes == "None assigned" then nodes = nil end
  local user = _v(j.user)
  if type(user) == "table" then user = user.name end
  local out = {
    id = M.count(j.job_id),
    name = _str(j.name),
    comment = _str(comment),
    user = _str(user),
    account = _str(j.account),
    partition = _str(j.partition),
    qos = _str(j.qos),
    state = M.state(st.current, nil, "job"),
    reason = _str(st.reason),
    nodes = nodes,
    submit_time = M.time(t.submission),
    start_time = M.time(t.start),
    end_time = M.time(t["end"]),
    time_limit = M.limit(t.limit, v == 38),
    exit_code = M.exit_code(j.exit_code),
    cpus = M.count(req.CPUs),
    memory_per_node = M.count(req.memory_per_node) or M.count(req.memory),
    memory_per_cpu = M.count(req.memory_per_cpu),
    working_directory = _str(j.working_directory),
    stdout = _str(j.stdout_expanded) or _str(j.stdout),
    stderr = _str(j.stderr_expanded) or _str(j.stderr),
  }
  if out.reason == "None" then out.reason = nil end
  local tres = type(_v(j.tres)) == "table" and j.tres or {}
  for _, key in ipairs({ "allocated", "requested" }) do
    for _, r in ipairs(type(_v(tres[key])) == "table" and tres[key] or {}) do
      if type(r) == "table" and r.type == "gres" and type(r.name) == "string" and r.name:match("^gpu") then
        out.gpus = (out.gpus or 0) + (M.count(r.count) or 0)
      end
    end
    if out.gpus then break end
  end
  return _job_common(out, budget)
end

--- All jobs of a `GET /slurmdb/vX/jobs` response.
---@param doc table
---@param version string
---@return table[]
function M.db_jobs(doc, version)
  local out = tables.array()
  local budget = { left = hostlist.ANSWER_HOSTS }
  for _, j in ipairs(_list(doc, "jobs")) do out[#out + 1] = M.db_job_record(j, version, budget) end
  return out
end

--- The job of a `GET /slurmdb/vX/job/{id}` response, in the `job_record` shape.
---@param doc table
---@param version string
---@return table|nil job
---@return table|nil err {code="not_found", ...}
function M.db_job(doc, version)
  return _first(M.db_jobs(doc, version), doc, "job")
end

---------------------------------------------------------------------------
-- nodes
---------------------------------------------------------------------------

--- Normalize one node record.
-- Shape: {name, address, hostname, state={base, flags}, idle, reason,
--   cpus, alloc_cpus, memory (real_memory, MiB), alloc_memory (MiB),
--   free_memory (MiB, nil when unknown: -2, NO_VAL, unset), features (set),
--   active_features (set), partitions (array), gres, gres_used, gres_free
--   (parsed by obleth.slurm.gres), gpus (configured total), gpus_free (0 on a node in one
--   of NO_GPUS_FLAGS: drained, down, powered down, ...)}
---@param n table
---@param version string
---@return table
function M.node_record(n, version)
  _vnum(version)
  local st = M.state(n.state, n.state_flags, "node")
  local g = gres.parse(_str(n.gres))
  local gu = gres.parse(_str(n.gres_used))
  local free = gres.free(g, gu)
  local out = {
    name = _str(n.name),
    address = _str(n.address),
    hostname = _str(n.hostname),
    state = st,
    idle = M.is_idle(st),
    reason = _str(n.reason),
    cpus = M.count(n.cpus),
    alloc_cpus = M.count(n.alloc_cpus),
    memory = M.count(n.real_memory),
    alloc_memory = M.count(n.alloc_memory),
    free_memory = M.count(_v(n.free_mem) or _v(n.free_memory)),
    features = _set_of(n.features),
    active_features = _set_of(n.active_features),
    partitions = _array_of(n.partitions),
    gres = g,
    gres_used = gu,
    gres_free = free,
    gpus = g.gpu and g.gpu.total or 0,
    gpus_free = free.gpu and free.gpu.total or 0,
  }
  -- a node Slurm will not schedule on gives no GPU, whatever gres_used says
  for f in pairs(M.NO_GPUS_FLAGS) do
    if st.base == f or st.flags[f] then out.gpus_free = 0 end
  end
  return out
end

--- All nodes of a `GET /slurm/vX/nodes` (or `/node/{name}`) response.
---@param doc table
---@param version string
---@return table[]
function M.nodes(doc, version)
  local out = tables.array()
  for _, n in ipairs(_list(doc, "nodes")) do out[#out + 1] = M.node_record(n, version) end
  return out
end

---------------------------------------------------------------------------
-- partitions
---------------------------------------------------------------------------

--- Normalize one partition record.
-- Shape: {name, nodes (hostlist), node_list, default (bool on v0.0.38 and v0.0.45+; nil on
--   v0.0.39-44, whose data_parser skips partition flags), hidden (Hidden=YES: bool on v0.0.38 and
--   v0.0.45+; on v0.0.40-44 `partitions` tells it from the listing), flags (set of Slurm's flag
--   names, upper case; {} where not sent), state ("UP", ...; nil on v0.0.39, which does not
--   report it), max_time (minutes, math.huge when unlimited), default_time (minutes|nil),
--   max_nodes (math.huge when unlimited), allowed_accounts, denied_accounts, allowed_qos,
--   denied_qos, allowed_groups (AllowGroups) (sets; nil = no restriction), qos (the partition's
--   own QoS, QOS=, whose limits apply to every job there; nil when none), priority_tier,
--   exclusive ("NO", "NODE", "USER", "TOPO"; v0.0.45+), oversubscribe ("NO", "YES:n", "FORCE:n";
--   v0.0.45+), total_cpus, total_nodes,
--   node_list_truncated (true when the answer's hostlist budget ran out: node_list is then {})}
---@param p table
---@param version string
---@param budget {left: integer}|nil as for `job_record`
---@return table
function M.partition_record(p, version, budget)
  local v = _vnum(version)
  local out
  if v == 38 or type(_v(p.nodes)) == "string" then
    local flags = {}
    for f in pairs(_set_of(p.flags)) do flags[f:upper()] = true end
    out = {
      name = _str(p.name),
      nodes = _str(p.nodes),
      default = flags.DEFAULT == true,
      hidden = flags.HIDDEN == true,
      flags = flags,
      state = _str(p.state) and p.state:upper(),
      max_time = M.limit(p.max_time_limit, true),
      default_time = M.limit(p.default_time_limit),
      max_nodes = M.limit(p.maximum_nodes_per_job, true),
      allowed_accounts = _acl(p.allowed_accounts),
      denied_accounts = _acl(p.denied_accounts),
      allowed_qos = _acl(p.allowed_qos),
      denied_qos = _acl(p.denied_qos),
      allowed_groups = _acl(p.allowed_groups),
      qos = _str(p.qos),
      priority_tier = M.count(p.priority_tier),
      total_cpus = M.count(p.total_cpus),
      total_nodes = M.count(p.total_nodes),
    }
  else
    local nodes = type(_v(p.nodes)) == "table" and p.nodes or {}
    local acc = type(_v(p.accounts)) == "table" and p.accounts or {}
    local qos = type(_v(p.qos)) == "table" and p.qos or {}
    local max = type(_v(p.maximums)) == "table" and p.maximums or {}
    local def = type(_v(p.defaults)) == "table" and p.defaults or {}
    local part = type(_v(p.partition)) == "table" and p.partition or {}
    local cpus = type(_v(p.cpus)) == "table" and p.cpus or {}
    local groups = type(_v(p.groups)) == "table" and p.groups or {}
    local prio = type(_v(p.priority)) == "table" and p.priority or {}
    local state = _v(part.state)
    if type(state) == "table" then state = state[1] end
    -- v0.0.45 dumps the partition flags again (PARSER_FLAG_ARRAY(PARTITION_FLAGS)); v0.0.39-44 skip them
    local sent = type(_v(p.flags)) == "table"
    local flags = {}
    for f in pairs(_set_of(p.flags)) do flags[f:upper()] = true end
    local default, hidden
    if sent then default, hidden = flags.DEFAULT == true, flags.HIDDEN == true end
    out = {
      name = _str(p.name),
      nodes = _str(nodes.configured),
      default = default,
      hidden = hidden,
      flags = flags,
      state = _str(state),
      max_time = M.limit(max.time, true),
      default_time = M.limit(def.time),
      max_nodes = M.limit(max.nodes, true),
      allowed_accounts = _acl(acc.allowed),
      denied_accounts = _acl(acc.deny),
      allowed_qos = _acl(qos.allowed),
      denied_qos = _acl(qos.deny),
      allowed_groups = _acl(groups.allowed),
      qos = _str(qos.assigned),
      priority_tier = M.count(prio.tier),
      exclusive = _str(part.exclusive),
      oversubscribe = _str(part.oversubscribe),
      total_cpus = M.count(cpus.total),
      total_nodes = M.count(nodes.total),
    }
  end
  out.node_list, out.node_list_truncated = _node_list(out.nodes, budget)
  return out
end

--- All partitions of a `GET /slurm/vX/partitions` response.
---@param doc table
---@param version string
---@return table[]
function M.partitions(doc, version)
  local out = tables.array()
  local budget = { left = hostlist.ANSWER_HOSTS }
  for _, p in ipairs(_list(doc, "partitions")) do out[#out + 1] = M.partition_record(p, version, budget) end
  return out
end

--- Tell hidden partitions on versions that do not send partition flags (v0.0.39-44): `all` is
-- the `?flags=ALL` listing, `plain` the listing without it, which leaves out the partitions
-- that are Hidden and those whose AllowGroups the user is not in. Each partition of `all` gets
-- `listed` (in the plain listing); one left out that has no AllowGroups is `hidden`; one left
-- out that has AllowGroups may be either, and keeps `hidden` nil (unknown). Returns `all`.
---@param all table[] normalized partitions (`?flags=ALL`)
---@param plain table[] normalized partitions (no flags)
---@return table[] all
function M.mark_listed(all, plain)
  local seen = {}
  for _, p in ipairs(plain) do if p.name then seen[p.name] = true end end
  for _, p in ipairs(all) do
    p.listed = seen[p.name] == true
    if p.hidden == nil then
      if p.listed then p.hidden = false elseif not p.allowed_groups then p.hidden = true end
    end
  end
  return all
end

---------------------------------------------------------------------------
-- cancel
---------------------------------------------------------------------------

--- The jobs a `DELETE /slurm/vX/job/{id}` answer says were not signalled: its `status[]`
-- entries (v0.0.40+, `PARSER_ARRAY(KILL_JOBS_RESP_JOB)`: `error.{string, code, message}`,
-- `job_id`) whose error code is not 0. Slurm answers HTTP 200 with these (2002 for another
-- user's job, 2017 for an unknown one); an empty or absent list is success.
---@param doc table|nil
---@return {slurm_code: integer|nil, message: string|nil, job_id: integer|nil}[]
function M.cancel_failures(doc)
  local out = {}
  local st = type(doc) == "table" and _v(doc.status)
  if type(st) ~= "table" then return out end
  for _, e in ipairs(st) do
    local er = type(e) == "table" and _v(e.error)
    if type(er) == "table" then
      local code = M.count(er.code)
      local msg = _str(er.message) or _str(er.string)
      if (code and code ~= 0) or (not code and msg and msg ~= "No error") then
        local word = _str(er.string)
        if word and msg and word ~= msg then msg = word .. ": " .. msg end
        out[#out + 1] = { slurm_code = code, message = msg or word, job_id = M.count(e.job_id) }
      end
    end
  end
  return out
end

---------------------------------------------------------------------------
-- accounting: accounts, associations, QoS
---------------------------------------------------------------------------

--- Accounts of `GET /slurmdb/vX/accounts`: {name, description, organization}.
---@param doc table
---@param version string
---@return table[]
function M.accounts(doc, version)
  _vnum(version)
  local out = tables.array()
  for _, a in ipairs(_list(doc, "accounts")) do
    out[#out + 1] = { name = _str(a.name), description = _str(a.description),
      organization = _str(a.organization) }
  end
  return out
end

--- Clusters of `GET /slurmdb/vX/clusters`: {name, nodes (hostlist string), controller = {host, port}|nil}.
function M.clusters(doc, version)
  _vnum(version)
  local out = {}
  for _, c in ipairs(_list(doc, "clusters")) do
    local ctl = type(_v(c.controller)) == "table" and c.controller or nil
    out[#out + 1] = { name = _str(c.name), nodes = _str(c.nodes),
      controller = ctl and { host = _str(ctl.host), port = M.count(ctl.port) } or nil }
  end
  return out
end

--- Associations of `GET /slurmdb/vX/associations`:
-- {account, user (nil for the account's own row), partition|nil, qos (set),
--  default_qos|nil, is_default (bool)}.
---@param doc table
---@param version string
---@return table[]
function M.associations(doc, version)
  _vnum(version)
  local out = tables.array()
  for _, a in ipairs(_list(doc, "associations")) do
    local def = type(_v(a.default)) == "table" and a.default or {}
    local isdef = _v(a.is_default)
    out[#out + 1] = {
      account = _str(a.account),
      user = _str(a.user),
      partition = _str(a.partition),
      qos = _set_of(a.qos),
      default_qos = _str(def.qos),
      is_default = isdef == true or isdef == 1,
    }
  end
  return out
end

-- A TRES list ([{type, name, count}], `limits.max.tres.per.*`) as {["cpu"] = n, ["node"] = n,
-- ["mem"] = MiB, ["gres/gpu"] = n, ["gres/gpu:h100"] = n}; nil when it sets nothing.
local function _tres_map(list)
  list = _v(list)
  if type(list) ~= "table" then return nil end
  local out, any = {}, false
  for _, t in ipairs(list) do
    local ty, name = type(t) == "table" and _str(t.type), type(t) == "table" and _str(t.name)
    local n = ty and M.count(t.count)
    if ty and n then
      out[name and (ty .. "/" .. name) or ty] = n
      any = true
    end
  end
  return any and out or nil
end

--- QoS of `GET /slurmdb/vX/qos` (key "QOS" on v0.0.38, "qos" later):
-- {name, max_wall (minutes per job; nil = no limit), priority, max_tres_per_job,
--  max_tres_per_node, max_tres_per_user (MaxTRESPerJob / PerNode / PerUser: {cpu, node, mem (MiB),
--  ["gres/gpu"], ["gres/gpu:TYPE"]} counts; nil = no limit)}.
---@param doc table
---@param version string
---@return table[]
function M.qos(doc, version)
  _vnum(version)
  local list = _list(doc, "qos")
  if #list == 0 then list = _list(doc, "QOS") end
  local out = tables.array()
  for _, q in ipairs(list) do
    local wall
    local l = _v(q.limits)
    local mx = type(l) == "table" and _v(l.max)
    local wc = type(mx) == "table" and _v(mx.wall_clock)
    local per = type(wc) == "table" and _v(wc.per)
    if type(per) == "table" then
      wall = M.limit(per.job)
      if wall == HUGE then wall = nil end
    end
    local tres = type(mx) == "table" and _v(mx.tres)
    local tper = type(tres) == "table" and _v(tres.per)
    if type(tper) ~= "table" then tper = {} end
    out[#out + 1] = { name = _str(q.name), max_wall = wall, priority = M.count(q.priority),
      max_tres_per_job = _tres_map(tper.job), max_tres_per_node = _tres_map(tper.node),
      max_tres_per_user = _tres_map(tper.user) }
  end
  return out
end

---------------------------------------------------------------------------
-- configuration (v0.0.45+)
---------------------------------------------------------------------------

--- A few settings of `GET /slurm/vX/conf` (v0.0.45+: `slurm_conf`, PARSER_ARRAY(SLURM_CONF)):
-- {enforce_part_limits = "NO"|"ANY"|"ALL"|nil, cluster = name|nil, min_job_age = seconds|nil}.
---@param doc table
---@param version string
---@return table
function M.conf(doc, version)
  _vnum(version)
  local c = type(doc) == "table" and _v(doc.slurm_conf)
  if type(c) ~= "table" then c = {} end
  local epl = _v(c.EnforcePartLimits)
  if type(epl) == "table" then epl = epl[1] end
  epl = _str(epl)
  if epl then epl = epl:upper() end
  if epl == "YES" then epl = "ALL" end -- slurm.conf's older spelling
  if epl ~= "NO" and epl ~= "ANY" and epl ~= "ALL" then epl = nil end
  return { enforce_part_limits = epl, cluster = _str(c.ClusterName), min_job_age = M.count(c.MinJobAge) }
end

---------------------------------------------------------------------------
-- ping, diag
---------------------------------------------------------------------------

local function _meta_release(doc)
  local meta = type(doc) == "table" and _v(doc.meta)
  if type(meta) ~= "table" then return nil end
  local s = _v(meta.slurm) or _v(meta.Slurm)
  if type(s) ~= "table" then return nil end
  return _str(s.release)
end

-- Ping status words (v0.0.45's `status`, slurm_strerror of the ping RPC) that say slurmctld refused
-- the credentials rather than did not answer: SLURM_PROTOCOL_AUTHENTICATION_ERROR (1007),
-- ESLURM_AUTH_CRED_INVALID and the other auth errnos.
local function _auth_words(s)
  s = s and s:lower()
  return s ~= nil and (s:find("authentication", 1, true) ~= nil or s:find("credential", 1, true) ~= nil
    or s:find("jwt", 1, true) ~= nil) or false
end

--- Ping (`GET /slurm/vX/ping`).
-- ok is true only when the primary controller answered and the response has no errors:
--   v0.0.38-44: `ping`/`pinged` is "UP" and `responding` (v0.0.42+) is not false;
--   v0.0.45+:   `responding` is true (`pinged` and `mode` are gone; `status` is the ping RPC's
--               outcome in words, "No error" when it answered).
-- A rejected JWT still gives HTTP 200: pinged "DOWN" / responding false on every version, which
-- only v0.0.45's `status` tells apart from a dead controller (`auth_rejected`); Conn:ping asks
-- once more on the older ones.
---@param doc table
---@param version string
---@return {ok: boolean, version: string, release: string|nil, hostname: string|nil,
---  mode: string|nil, primary: boolean|nil, status: string|nil, auth_rejected: true|nil, latency: number|nil}
function M.ping(doc, version)
  _vnum(version)
  local pings = _list(doc, "pings")
  local p = pings[1] or {}
  for _, q in ipairs(pings) do
    if q.mode == "primary" or q.primary == true then p = q break end
  end
  local pinged = _str(p.pinged) or _str(p.ping)
  local responding = _v(p.responding)
  local status = _str(p.status)
  local answered
  if pinged ~= nil then
    answered = pinged:upper() == "UP" and responding ~= false
  else
    answered = responding == true
  end
  local primary = _v(p.primary)
  local mode = _str(p.mode)
  if not mode and type(primary) == "boolean" then mode = primary and "primary" or "backup" end
  return {
    ok = answered and #M.errors(doc) == 0,
    version = version,
    release = _meta_release(doc),
    hostname = _str(p.hostname),
    mode = mode,
    primary = type(primary) == "boolean" and primary or nil,
    status = status,
    auth_rejected = (not answered and _auth_words(status)) or nil,
    latency = M.count(p.latency),
  }
end

--- A few fields of `GET /slurm/vX/diag`: {jobs_submitted, jobs_started,
-- jobs_completed, jobs_canceled, jobs_failed, jobs_pending, jobs_running,
-- server_thread_count, agent_queue_size, schedule_cycle_last (us),
-- schedule_queue_length, bf_active, req_time (epoch s)}.
---@param doc table
---@param version string
---@return table
function M.diag(doc, version)
  _vnum(version)
  local s = type(doc) == "table" and _v(doc.statistics) or {}
  if type(s) ~= "table" then s = {} end
  local out = {}
  for _, k in ipairs({ "jobs_submitted", "jobs_started", "jobs_completed", "jobs_canceled",
    "jobs_failed", "jobs_pending", "jobs_running", "server_thread_count", "agent_queue_size",
    "schedule_cycle_last", "schedule_queue_length" }) do
    out[k] = M.count(s[k])
  end
  out.bf_active = _v(s.bf_active) == true
  out.req_time = M.time(s.req_time)
  return out
end

---------------------------------------------------------------------------
-- submit
---------------------------------------------------------------------------

--- Interpret a `POST /slurm/vX/job/submit` response.
-- A job id means success even when errors[] is not empty: v0.0.38 accepts a
-- job the partition will never run (error 2015 "Requested partition
-- configuration not available now") — those entries come back as warnings.
---@param doc table|nil decoded body (nil when it was not JSON)
---@param version string
---@param http_status integer|nil
---@return integer|nil job_id
---@return table warnings_or_err on success: array of {slurm_code, message}; on
---  failure: {code="refused"|"http", slurm_code, message, description, errors, http_status}
function M.submit_response(doc, version, http_status)
  _vnum(version)
  local job_id
  if type(doc) == "table" then
    job_id = M.count(doc.job_id)
    local r = _v(doc.result)
    if not job_id and type(r) == "table" then job_id = M.count(r.job_id) end
  end
  local errs = M.errors(doc)
  if job_id and job_id > 0 then
    local warnings = {}
    for _, e in ipairs(errs) do
      warnings[#warnings + 1] = { slurm_code = e.slurm_code, message = e.message or e.description }
    end
    for _, w in ipairs(M.warnings(doc)) do
      warnings[#warnings + 1] = { message = w.message }
    end
    local umsg = type(doc) == "table" and _str(doc.job_submit_user_msg)
    if umsg then warnings[#warnings + 1] = { message = umsg } end
    return job_id, warnings
  end
  -- pick the most specific error: one of Slurm's own numbers (slurm_errno.h: 1000 and up) over generic ones
  local main = errs[1]
  for _, e in ipairs(errs) do
    if e.slurm_code and e.slurm_code >= 1000 and (not main or not main.slurm_code or main.slurm_code < 1000) then
      main = e
    end
  end
  if not main then
    local msg = "no job id in submit response"
    if http_status then msg = msg .. " (HTTP " .. http_status .. ")" end
    return nil, { code = "http", http_status = http_status, errors = errs, message = msg }
  end
  local key
  for _, e in ipairs(errs) do
    local k = e.description and e.description:match('^Disabled key: "([^"]+)"')
    if k then key = k end
  end
  return nil, { code = "refused", slurm_code = main.slurm_code, message = main.message,
    description = main.description, errors = errs, http_status = http_status, key = key }
end

return M
