--- Build `POST /slurm/vX/job/submit` bodies from one job description, and
-- read Slurm's refusals and pending reasons back onto that description.
--
-- The description (`desc`) has one shape for every API version:
--   { name, comment, partition, account, qos,
--     time_limit         = minutes (integer),
--     nodes              = integer | {min, max},
--     gpus_per_node      = integer, gpu_type = string|nil ("a100"),
--     cpus_per_node      = integer (0 = all the CPUs of each node: the nodes are the job's alone),
--     memory_per_node    = MiB (0 = all the memory of each node),
--     constraint         = feature expression ("a100&ib"),
--     exclude            = hostlist string or array of names,
--     environment        = { K = V },
--     script, stdout, stderr, working_directory, requeue = boolean }
-- Pure functions, no I/O.
local hostlist = require "obleth.util.hostlist"

local M = {}

--- PATH sent when the description's environment has none: slurmrestd
-- v0.0.38 refuses an empty environment, and a batch script without PATH
-- cannot find anything.
M.DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

-- every version obleth knows (obleth.slurm.versions, the one list)
local VERSIONS = require("obleth.slurm.versions").known

local DESC_FIELDS = {
  name = true, comment = true, partition = true, account = true, qos = true,
  time_limit = true, nodes = true, gpus_per_node = true, gpu_type = true,
  cpus_per_node = true, memory_per_node = true, constraint = true, exclude = true,
  environment = true, script = true, stdout = true, stderr = true,
  working_directory = true, requeue = true,
}

local function _vnum(version)
  return type(version) == "string" and tonumber(version:match("^v0%.0%.(%d+)$"))
end

--- How each description field is sent, per API version.
-- `M.capabilities[version][field]` is `{property=, shape=}` or `false` when
-- that version cannot express the field. Sources: v0.0.38 rows were checked
-- on a live 22.05 cluster (shared/cases/slurmrestd/COMPAT.md); v0.0.40-42
-- match request bodies that a 24.11 cluster accepted (`*_request.json`);
-- v0.0.39 and v0.0.43-46 follow PARSER_ARRAY(JOB_DESC_MSG) and
-- PARSER_ARRAY(JOB_SUBMIT_REQ) in src/plugins/data_parser/v0.0.4x/parsers.c.
M.capabilities = {}
for _, v in ipairs(VERSIONS) do
  local n = _vnum(v)
  local old = n == 38
  local nv = n >= 40
  M.capabilities[v] = {
    script = { property = n >= 41 and "job.script" or "script",
      shape = n >= 41 and "string inside job (top-level script deprecated)" or "top-level string" },
    name = { property = "job.name", shape = "string" },
    comment = { property = "job.comment", shape = "string" },
    partition = { property = "job.partition", shape = "string" },
    account = { property = "job.account", shape = "string" },
    qos = { property = "job.qos", shape = "string" },
    time_limit = { property = "job.time_limit",
      shape = nv and "NV {set=true, infinite=false, number=minutes}" or "integer minutes" },
    nodes = { property = "job.nodes", shape = "count range string \"min-max\"" },
    gpus_per_node = old and { property = "job.gpus_per_node", shape = 'string "N" or "type:N"' }
      or { property = "job.tres_per_node", shape = 'string "gres/gpu:N" or "gres/gpu:type:N"' },
    gpu_type = old and { property = "job.gpus_per_node", shape = "type prefix of gpus_per_node" }
      or { property = "job.tres_per_node", shape = "type inside tres_per_node" },
    cpus_per_node = { property = "job.minimum_cpus_per_node",
      shape = old and 'integer; 0 = whole node: job.exclusive = "exclusive" (the --exclusive option, checked live on 22.05)'
        or 'integer; 0 = whole node: job.shared = ["none"] (what --exclusive sets: JOB_SHARED_NONE)' },
    memory_per_node = { property = "job.memory_per_node",
      shape = nv and "NV {set=true, infinite=false, number=MiB}" or "integer MiB" },
    constraint = { property = "job.constraints", shape = "string" },
    exclude = old and { property = "job.exclude_nodes", shape = "hostlist string" }
      or { property = "job.excluded_nodes", shape = "array of host names" },
    environment = old and { property = "job.environment", shape = "object {K=V}, never empty" }
      or { property = "job.environment", shape = 'array ["K=V"]' },
    stdout = { property = "job.standard_output", shape = "string" },
    stderr = { property = "job.standard_error", shape = "string" },
    working_directory = { property = "job.current_working_directory",
      shape = old and "string (defaults to /tmp)" or "string, required" },
    requeue = { property = "job.requeue", shape = old
      and "true only: slurmrestd 22.05 reads any value as true, so false is left out and JobRequeue applies"
      or "boolean" },
  }
end

local function _err(code, field, message)
  return { code = code, field = field, message = message }
end

local function _nv(n)
  return { set = true, infinite = false, number = n }
end

local function _is_int(x)
  return math.type(x) == "integer" or (type(x) == "number" and x == math.floor(x) and x >= 0)
end

--- Build the request body for `POST /slurm/<version>/job/submit`.
---@param desc table job description (see module header)
---@param version string API version, one of obleth.slurm.versions.known
---@return table|nil body to encode as JSON
---@return table|nil err {code="unsupported"|"invalid"|"required", field, message}
function M.body(desc, version)
  if type(desc) ~= "table" then error("submit.body: desc must be a table", 2) end
  local caps = M.capabilities[version]
  if not caps then
    return nil, _err("unsupported", "version", "unsupported slurmrestd API version " .. tostring(version))
  end
  for k, v in pairs(desc) do
    if not DESC_FIELDS[k] then error("submit.body: unknown desc field " .. tostring(k), 2) end
    if v ~= nil and caps[k] == false then
      return nil, _err("unsupported", k, k .. " cannot be expressed on " .. version)
    end
  end
  local n = _vnum(version)
  if type(desc.script) ~= "string" or desc.script == "" then
    return nil, _err("required", "script", "a batch script is required")
  end
  local job = {}
  for _, k in ipairs({ "name", "comment", "partition", "account", "qos" }) do
    if desc[k] ~= nil then
      if type(desc[k]) ~= "string" then return nil, _err("invalid", k, k .. " must be a string") end
      job[k] = desc[k]
    end
  end
  if desc.time_limit ~= nil then
    if not _is_int(desc.time_limit) or desc.time_limit <= 0 then
      return nil, _err("invalid", "time_limit", "time_limit must be a positive number of minutes")
    end
    job.time_limit = n >= 40 and _nv(math.tointeger(desc.time_limit)) or math.tointeger(desc.time_limit)
  end
  if desc.nodes ~= nil then
    local lo, hi
    if type(desc.nodes) == "table" then
      lo, hi = desc.nodes.min or desc.nodes[1], desc.nodes.max or desc.nodes[2]
    else
      lo, hi = desc.nodes, desc.nodes
    end
    if not _is_int(lo) or not _is_int(hi) or lo < 1 or hi < lo then
      return nil, _err("invalid", "nodes", "nodes must be a count or {min, max} with 1 <= min <= max")
    end
    -- a string, "N" or "min-max", on every version: slurmrestd v0.0.38 (22.05) takes the
    -- [min, max] array without a word and runs the job on one node
    lo, hi = math.tointeger(lo), math.tointeger(hi)
    job.nodes = lo == hi and tostring(lo) or ("%d-%d"):format(lo, hi)
  end
  if desc.gpu_type ~= nil and (desc.gpus_per_node == nil or desc.gpus_per_node == 0) then
    return nil, _err("invalid", "gpu_type", "gpu_type needs gpus_per_node")
  end
  if desc.gpus_per_node ~= nil and desc.gpus_per_node ~= 0 then
    if not _is_int(desc.gpus_per_node) or desc.gpus_per_node < 0 then
      return nil, _err("invalid", "gpus_per_node", "gpus_per_node must be a count")
    end
    local count = tostring(math.tointeger(desc.gpus_per_node))
    local spec = desc.gpu_type and (desc.gpu_type .. ":" .. count) or count
    if n == 38 then job.gpus_per_node = spec else job.tres_per_node = "gres/gpu:" .. spec end
  end
  if desc.cpus_per_node ~= nil then
    if not _is_int(desc.cpus_per_node) or desc.cpus_per_node < 0 then
      return nil, _err("invalid", "cpus_per_node", "cpus_per_node must be a count (0 = whole node)")
    end
    if desc.cpus_per_node == 0 then -- every CPU of each node: the nodes are the job's alone
      if n == 38 then job.exclusive = "exclusive" else job.shared = { "none" } end
    else
      job.minimum_cpus_per_node = math.tointeger(desc.cpus_per_node)
    end
  end
  if desc.memory_per_node ~= nil then
    if not _is_int(desc.memory_per_node) then
      return nil, _err("invalid", "memory_per_node", "memory_per_node must be MiB (0 = whole node)")
    end
    local mib = math.tointeger(desc.memory_per_node)
    job.memory_per_node = n >= 40 and _nv(mib) or mib
  end
  if desc.constraint ~= nil then job.constraints = desc.constraint end
  if desc.exclude ~= nil then
    local names = desc.exclude
    if type(names) == "string" then
      local err
      names, err = hostlist.expand(names)
      if not names then return nil, _err("invalid", "exclude", err) end
    end
    if #names > 0 then
      if n == 38 then job.exclude_nodes = hostlist.compress(names) else job.excluded_nodes = names end
    end
  end
  local env = {}
  for k, v in pairs(desc.environment or {}) do env[k] = tostring(v) end
  if env.PATH == nil then env.PATH = M.DEFAULT_PATH end
  if n == 38 then
    job.environment = env
  else
    local keys = {}
    for k in pairs(env) do keys[#keys + 1] = k end
    table.sort(keys)
    local arr = {}
    for _, k in ipairs(keys) do arr[#arr + 1] = k .. "=" .. env[k] end
    job.environment = arr
  end
  if desc.stdout ~= nil then job.standard_output = desc.stdout end
  if desc.stderr ~= nil then job.standard_error = desc.stderr end
  if desc.working_directory ~= nil then
    job.current_working_directory = desc.working_directory
  elseif n == 38 then
    job.current_working_directory = "/tmp"
  else
    return nil, _err("required", "working_directory",
      "slurmrestd " .. version .. " needs current_working_directory (mandatory from Slurm 23.11)")
  end
  -- slurmrestd 22.05 (v0.0.38) records Requeue=1 for any value of "requeue",
  -- false included (seen on the harness cluster): there, false is left out so
  -- the cluster's JobRequeue applies
  if desc.requeue ~= nil and (n ~= 38 or desc.requeue) then
    job.requeue = desc.requeue and true or false
  end
  if n >= 41 then
    job.script = desc.script
    return { job = job }
  end
  return { script = desc.script, job = job }
end

--- Map a Slurm submit refusal to the description field it is about.
-- 2014 "Requested node configuration is not available" is ambiguous: too many
-- GPUs (or CPUs/memory) per node, or every node excluded. With `desc` the
-- guess follows what was asked: only `exclude` set -> "exclude"; otherwise
-- "gpus_per_node" when GPUs were asked, else "nodes"; the second return value
-- lists every candidate.
---@param slurm_code integer|nil Slurm error number (error_code / error_number)
---@param message string|nil Slurm error text
---@param desc table|nil the description that was submitted
---@return string|nil field
---@return string[]|nil candidates when ambiguous
function M.refusal_field(slurm_code, message, desc)
  local msg = (message or ""):lower()
  if slurm_code == 2045 or msg:find("invalid account", 1, true) then return "account" end
  if slurm_code == 2066 or msg:find("invalid qos", 1, true) then return "qos" end
  if slurm_code == 2000 or msg:find("invalid partition", 1, true) then return "partition" end
  -- ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP: 22.05 refuses an AllowGroups partition at submit
  if slurm_code == 2003 or msg:find("group not permitted", 1, true) then return "partition" end
  if msg:find("time limit", 1, true) then return "time_limit" end
  if msg:find("invalid feature", 1, true) or msg:find("invalid constraint", 1, true) then
    return "constraint"
  end
  if msg:find("node count specification invalid", 1, true) then return "nodes" end
  if msg:find("memory required", 1, true) then return "memory_per_node" end
  if slurm_code == 2014 or msg:find("requested node configuration is not available", 1, true) then
    local cands = {}
    local gpus = desc and desc.gpus_per_node and desc.gpus_per_node > 0
    local excl = desc and desc.exclude and (type(desc.exclude) ~= "table" or #desc.exclude > 0)
      and desc.exclude ~= ""
    if gpus then cands[#cands + 1] = "gpus_per_node" end
    if excl then cands[#cands + 1] = "exclude" end
    if desc and desc.memory_per_node and desc.memory_per_node > 0 then
      cands[#cands + 1] = "memory_per_node"
    end
    if desc and desc.cpus_per_node then cands[#cands + 1] = "cpus_per_node" end
    if not desc then cands = { "gpus_per_node", "exclude" } end
    if excl and not gpus then return "exclude", cands end
    if gpus then return "gpus_per_node", cands end
    return cands[1] or "nodes", cands
  end
  return nil
end

--- Pending reasons after which a job will never start without someone
-- changing the job or the configuration (squeue(1) JOB REASON CODES and
-- slurm.h job_state_reason): the job asks for something its partition, QoS or
-- association forbids. Reasons that can clear by themselves (Resources,
-- Priority, ReqNodeNotAvail - nodes may come back -, PartitionDown, held jobs,
-- usage/active-job limits) are not in this set.
M.NEVER_START_REASONS = {
  AccountNotAllowed = true, QOSNotAllowed = true, -- partition AllowAccounts / DenyQos
  PartitionConfig = true, PartitionTimeLimit = true, PartitionNodeLimit = true,
  InvalidAccount = true, InvalidQOS = true, BadConstraints = true,
  DependencyNeverSatisfied = true,
  QOSMaxWallDurationPerJobLimit = true, AssocMaxWallDurationPerJobLimit = true,
  QOSMaxCpuPerJobLimit = true, QOSMaxNodePerJobLimit = true, QOSMaxMemoryPerJob = true,
  QOSMaxGRESPerJob = true, QOSMinCpuNotSatisfied = true, QOSMinMemory = true,
  QOSMinNode = true, QOSMinGRES = true,
  AssocMaxCpuPerJobLimit = true, AssocMaxNodePerJobLimit = true,
  AssocMaxMemPerJob = true, AssocMaxGRESPerJob = true,
}

--- True when a pending reason means the job will never start as it is.
---@param reason string|nil `state_reason` as reported (nil/"None" -> false)
---@return boolean
function M.never_starts(reason)
  return type(reason) == "string" and M.NEVER_START_REASONS[reason] == true
end

return M
