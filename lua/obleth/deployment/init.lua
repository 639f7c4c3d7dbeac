--- obleth.deployment — the launch flow's logic: from a recipe (or a Hugging Face
-- choice) and the values the user changed to every setting with its
-- provenance, per-field errors, partition fit, suggestions from past runs,
-- the rendered job script and the exact body sent to slurmrestd.
--
-- Pure functions of data: no store, no network. The Management API route
-- module (obleth.api.deployments) gathers the facts (recipe, cluster defaults,
-- the recipe's launch history, the cluster's partitions / nodes /
-- associations / QoS) and hands them here. Policy modules are passed in (a
-- `policy(name)` getter), so operator overrides apply and specs can give the
-- built-in modules directly.
--
-- Units: time limits in minutes, memory in MiB (0 = the whole node).
local recipe = require "obleth.recipe"
local jobscript = require "obleth.job"
local submit = require "obleth.slurm.submit"
local validate = require "obleth.deployment.input"
local tables = require "obleth.util.tables"

local M = {}

--- What the job's environment shows instead of a secret (the Hugging Face token).
M.MASK = validate.MASK

--- Values the preview cannot know yet: they are fixed per replica by the
--- provisioner (model id once the model exists, the slot, a random nonce, a
--- free port from the cluster defaults' port range).
M.PLACEHOLDER_NONCE = "0000000000000000"
--- The installation id of the job tag when the caller does not know it.
M.PLACEHOLDER_INSTANCE = "00000000"

--- The settings of the form, in form order, as the API names them.
M.SETTINGS = { "api_model_name", "partition", "account", "qos", "time_limit", "nodes", "gpus_per_node",
  "gpu_type", "cpus_per_node", "memory_per_node", "constraint", "exclude", "replicas", "stdout", "stderr",
  "rollover_margin" }
M.HEALTH_KEYS = { "path", "interval", "timeout", "startup_grace", "failure_threshold" }

--- Recipe ids the Hugging Face detection names, mapped to library recipe ids.
M.RECIPE_ALIASES = { ["llama-cpp"] = "llamacpp", ["llama.cpp"] = "llamacpp" }

local _v = require("obleth.util.json").nonnull -- JSON / YAML null read as nil

local _copy = tables.copy

-- recipe.resolve names the API model name `api_name`; the API says `api_model_name`.
local function _api_field(f)
  if f == "api_name" then return "api_model_name" end
  return f
end

local function _resolve_field(f)
  if f == "api_model_name" then return "api_name" end
  return f
end

---------------------------------------------------------------------------
-- inputs
---------------------------------------------------------------------------

--- The user's values in the shape recipe.resolve takes.
---@param values table|nil {partition=, ..., inputs={}, health={}} as sent (dotted keys allowed)
---@param api_model_name string|nil the top-level form value (wins over values.api_model_name)
---@return table user values for recipe.resolve (api_model_name renamed api_name)
function M.user_values(values, api_model_name)
  local out = {}
  for k, v in pairs(values or {}) do
    if type(k) == "string" then out[_resolve_field(k)] = v end
  end
  if _v(api_model_name) ~= nil then out.api_name = api_model_name end
  return out
end

--- A recipe with a Hugging Face choice's prefill applied: input defaults and
--- GPUs per node / GPU type as the choice suggests (they then show with the
--- provenance `recipe`: the choice is part of what was picked).
---@param r table validated recipe
---@param prefill {inputs: table|nil, gpus_per_node: integer|nil, gpu_type: string|nil}
---@return table recipe a modified copy
---@return string[] warnings prefill inputs the recipe does not declare, or values it refuses
---@return table<string, true> applied the fields the choice set ("inputs.x", "gpus_per_node", "gpu_type")
function M.apply_prefill(r, prefill)
  local out, warnings, applied = _copy(r), {}, {}
  out.inputs, out.resources = {}, _copy(r.resources)
  for k, def in pairs(r.inputs or {}) do out.inputs[k] = def end
  local names = {}
  for k in pairs(prefill.inputs or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local v = _v(prefill.inputs[k])
    local def = r.inputs[k]
    if v ~= nil and not def then
      warnings[#warnings + 1] = ("recipe %s has no input %q; the choice's value %q is not used")
        :format(r.id, k, tostring(v))
    elseif v ~= nil then
      local ok, err = recipe.check_input(def, v, "inputs." .. k)
      if ok == nil then
        warnings[#warnings + 1] = err
      else
        local d = _copy(def)
        d.default = ok
        out.inputs[k] = d
        applied["inputs." .. k] = true
      end
    end
  end
  local g = _v(prefill.gpus_per_node)
  if math.type(g) == "integer" or (type(g) == "number" and g == math.floor(g)) then
    out.resources.gpus_per_node = math.tointeger(g)
    applied.gpus_per_node = true
    if _v(prefill.gpu_type) ~= nil and g > 0 then
      out.resources.gpu_type = prefill.gpu_type
      applied.gpu_type = true
    end
  end
  return out, warnings, applied
end

--- Launch history → what obleth.policy.learned takes: {id, account, qos}, newest first.
---@param launches table[] store launches, newest first ({id, settings = {account, qos}})
---@return {id: integer, account: string|nil, qos: string|nil}[]
function M.learned_input(launches)
  local out = {}
  for _, l in ipairs(launches or {}) do
    local s = type(l.settings) == "table" and l.settings or {}
    out[#out + 1] = { id = l.id, account = _v(s.account), qos = _v(s.qos) }
  end
  return out
end

--- Launch history → job outcomes for obleth.policy.suggestions, newest first.
--- Each outcome carries its launch id, that launch's time limit and, when `classify` is given
--- (obleth.policy.failures.classify), its failure class (`failure`: whether it was the node's fault).
---@param launches table[] store launches, newest first, each with `outcomes` (oldest first; an outcome's
---  `stderr` / `stdout`, when given, are the job's last lines, for classify)
---@param classify function|nil
---@return table[]
function M.outcomes(launches, classify)
  local out = {}
  for _, l in ipairs(launches or {}) do
    local s = type(l.settings) == "table" and l.settings or {}
    local os_ = l.outcomes or {}
    for i = #os_, 1, -1 do
      local o = os_[i]
      out[#out + 1] = { launch_id = l.id, job_id = _v(o.job_id), state = _v(o.state), reason = _v(o.reason),
        exit_code = _v(o.exit_code), node = _v(o.node), started_at = _v(o.started_at),
        ended_at = _v(o.ended_at), healthy = o.healthy == true, time_limit = _v(s.time_limit) }
      if classify then
        local x = out[#out]
        -- the job's last lines when obleth has them (obleth.api.replica_logs): a log that shows the
        -- failure is not the node's fault keeps it from counting against the node
        local ok, c = pcall(classify, { state = x.state, reason = x.reason, exit_code = x.exit_code,
          stderr = type(o.stderr) == "table" and o.stderr or nil, stdout = type(o.stdout) == "table" and o.stdout or nil })
        if ok and c then x.failure = c end
      end
    end
  end
  -- newest end first across launches (a launch's replicas can outlive the next launch)
  table.sort(out, function(a, b)
    local ea, eb = a.ended_at or 0, b.ended_at or 0
    if ea ~= eb then return ea > eb end
    return (a.launch_id or 0) > (b.launch_id or 0)
  end)
  return out
end

---------------------------------------------------------------------------
-- facts
---------------------------------------------------------------------------

local function _find_partition(facts, name)
  for _, p in ipairs(facts and facts.partitions or {}) do
    if p.name == name then return p end
  end
  return nil
end

local function _find_qos(facts, name)
  for _, q in ipairs(facts and facts.qos or {}) do
    if q.name == name then return q end
  end
  return nil
end

--- The largest memory (MiB) of a partition's nodes, or nil.
function M.max_node_memory(partition, nodes)
  local by_name, best = {}, nil
  for k, n in pairs(nodes or {}) do by_name[type(k) == "string" and k or n.name] = n end
  for _, name in ipairs(partition and partition.node_list or {}) do
    local n = by_name[name]
    if n and n.memory and (best == nil or n.memory > best) then best = n.memory end
  end
  return best
end

--- The most CPUs of a partition's nodes, or nil.
function M.max_node_cpus(partition, nodes)
  local by_name, best = {}, nil
  for k, n in pairs(nodes or {}) do by_name[type(k) == "string" and k or n.name] = n end
  for _, name in ipairs(partition and partition.node_list or {}) do
    local n = by_name[name]
    if n and n.cpus and (best == nil or n.cpus > best) then best = n.cpus end
  end
  return best
end

local function _finite(x)
  if x == math.huge then return nil end
  return x
end

--- The context obleth.policy.suggestions takes, from resolved values and cluster facts.
---@param values table resolved values (minutes, MiB)
---@param facts table|nil {partitions, nodes, qos}
function M.suggestion_ctx(values, facts)
  local p = _find_partition(facts, values.partition)
  local q = values.qos and _find_qos(facts, values.qos)
  return {
    time_limit = values.time_limit, nodes = values.nodes, memory_per_node = values.memory_per_node,
    exclude = values.exclude,
    partition = p and { name = p.name, max_time = _finite(p.max_time), max_nodes = _finite(p.max_nodes) }
      or (values.partition and { name = values.partition }) or nil,
    qos = q and { name = q.name, max_wall = q.max_wall } or nil,
    max_node_memory = p and M.max_node_memory(p, facts.nodes) or nil,
  }
end

--- Suggestions from past runs (never applied).
---@param policy fun(name: string): table
---@param launches table[] the recipe's launches, newest first
---@param values table resolved values
---@param facts table|nil
---@return table[] {kind, field, value, message, evidence = [...]}
function M.suggestions(policy, launches, values, facts)
  local f = policy("failures")
  return policy("suggestions").suggest(M.outcomes(launches, f and f.classify), M.suggestion_ctx(values, facts))
end

--- The partition-fit request of a replica, from resolved values.
function M.fit_request(values)
  return { nodes = values.nodes, gpus_per_node = values.gpus_per_node, gpu_type = values.gpu_type,
    cpus_per_node = values.cpus_per_node, memory_per_node = values.memory_per_node,
    constraint = values.constraint, exclude = values.exclude, time_limit = values.time_limit }
end

--- The account Slurm uses: the chosen one, else the user's default account.
function M.effective_account(policy, values, facts)
  return values.account or policy("validate").default_account(facts and facts.associations)
end

--- Partition fit for every partition, with the accounts each one offers and
--- whether it takes the Slurm user (AllowGroups), the account (the chosen
--- one, else the user's default account) and QoS.
---@param req table|nil the fit request (default: M.fit_request(values))
---@return table[] fits, string[] names of the partitions offered: available (the user's groups and
---  the account are let in)
function M.partitions(policy, values, facts, req)
  local fits = policy("partition_fit").fit(facts.partitions, facts.nodes, req or M.fit_request(values))
  local val = policy("validate")
  local account = M.effective_account(policy, values, facts)
  local offered = {}
  for i, f in ipairs(fits) do
    local p = facts.partitions[i]
    f.errors = f.errors or {}
    f.accounts = val.accounts_for(p, facts.associations)
    f.default = p.default == true
    f.max_time = _finite(p.max_time)
    f.default_time = p.default_time
    f.takes_account = true
    if account then
      f.takes_account = false
      for _, a in ipairs(f.accounts) do if a == account then f.takes_account = true end end
    end
    f.takes_qos = values.qos == nil or val.partition_takes_qos == nil or val.partition_takes_qos(p, values.qos)
    local takes_user, why = true, nil
    if val.partition_takes_user then takes_user, why = val.partition_takes_user(p, facts.user) end
    f.takes_user = takes_user == true
    f.available = f.takes_user and f.takes_account
    if not f.takes_user then
      f.unavailable_reason = why
    elseif not f.takes_account then
      f.unavailable_reason = ("partition %s does not take account %s%s"):format(p.name, account,
        values.account and "" or " (your default account)")
    end
    f.can_run = f.available and #f.errors == 0
    -- Hidden=YES: Slurm shows it only to those who ask for it; offered only when it is the one chosen
    f.hidden = p.hidden == true
    if f.available and (not f.hidden or p.name == values.partition) then offered[#offered + 1] = p.name end
  end
  return fits, offered
end

--- The cluster's facts behind the settings Slurm (or the cluster) decides when nobody set them, for
--- obleth.recipe.resolve.apply_cluster (which decides what applies, and the provenance): the
--- partition that can run the replica when the current one cannot and exactly one can (unless the
--- user chose it), the chosen partition's DefaultTime and MaxTime, and the only QoS the partition
--- takes that the user holds (when no QoS is chosen). Reads only.
---@return {partition: string|nil, default_time: integer|nil, max_time: integer|nil, qos: string|nil} offers
---@return string[] notes what the cluster changes and why (for `warnings`)
function M.cluster_offers(policy, values, provenance, facts)
  local notes, offers = {}, {}
  local val = policy("validate")
  local partition = values.partition
  if provenance.partition ~= "user" and partition then
    -- a time limit nobody insisted on follows the partition: leave it out of the choice
    local req = M.fit_request(values)
    if provenance.time_limit == "builtin" then req.time_limit = nil end
    local fits = M.partitions(policy, values, facts, req)
    local cur, can = nil, {}
    for _, f in ipairs(fits) do
      if f.partition == partition then cur = f end
      -- a Hidden partition is no choice to make for the user (Slurm shows it only to those who ask)
      if f.can_run and not f.hidden then can[#can + 1] = f end
    end
    if cur and not cur.can_run and #can == 1 then
      local why = cur.unavailable_reason or (cur.errors[1] and cur.errors[1].message) or "it cannot"
      notes[#notes + 1] = ("partition %s cannot run this replica (%s): using %s, the only partition that can")
        :format(cur.partition, why, can[1].partition)
      partition = can[1].partition
      offers.partition = partition
    end
  end
  local part = _find_partition(facts, partition)
  if part then
    offers.default_time, offers.max_time = part.default_time, _finite(part.max_time)
    if values.time_limit_max and offers.max_time then
      notes[#notes + 1] = ("time limit: the longest partition %s allows (MaxTime %d min)"):format(part.name,
        offers.max_time)
    end
    if values.qos == nil and val.preselect_qos then
      offers.qos = val.preselect_qos(part, M.effective_account(policy, values, facts), facts.associations, facts.qos)
    end
  end
  return offers, notes
end

--- The cluster's checks of one replica's Slurm settings, as Slurm will
--- make them: the Slurm user's groups, account, QoS and time limit
--- (policy `validate`.check; an empty account or QoS is the default Slurm
--- fills in), then whether the replica fits a node of the partition
--- (policy `partition_fit`). The one owner of these checks: the preview, the
--- launch and PUT /api/v1/models/{id}/managed all call it.
---@param policy fun(name: string): table
---@param values {partition: string, account: string|nil, qos: string|nil, time_limit: integer|nil,
---  nodes: integer|nil, gpus_per_node: integer|nil, gpu_type: string|nil, cpus_per_node: integer|nil,
---  memory_per_node: integer|nil, constraint: string|nil, exclude: string|nil} minutes, MiB
---@param facts table {partitions, nodes, associations, qos, user, enforce_part_limits}
---@return {field: string, message: string, code: string}[] errors one per field, the first found
---@return table[] fits every partition (M.partitions), string[] offered partitions
---@return string[] warnings what does not stop the job but delays it (fitting nodes down, drained)
function M.cluster_errors(policy, values, facts)
  local errors, seen, warnings = {}, {}, {}
  local function add(e)
    if seen[e.field] then return end
    seen[e.field] = true
    errors[#errors + 1] = { field = e.field, message = e.message, code = e.code }
  end
  local part = _find_partition(facts, values.partition)
  for _, e in ipairs(policy("validate").check({ partition = values.partition, account = values.account,
    qos = values.qos, time_limit = values.time_limit, nodes = values.nodes, cpus_per_node = values.cpus_per_node,
    gpus_per_node = values.gpus_per_node, memory_per_node = values.memory_per_node,
    -- the whole node (0 CPUs / 0 MiB) is the partition's largest node, for the QoS limits
    node_cpus = part and M.max_node_cpus(part, facts.nodes), node_memory = part and M.max_node_memory(part, facts.nodes),
  }, facts)) do add(e) end
  local fits, offered = M.partitions(policy, values, facts)
  -- the partitions (not hidden) that could run this replica, to name when the chosen one cannot
  local could = {}
  for _, f in ipairs(fits) do
    if f.can_run and not f.hidden and f.partition ~= values.partition then could[#could + 1] = f.partition end
  end
  for _, f in ipairs(fits) do
    if f.partition == values.partition then
      for i, e in ipairs(f.errors) do
        if i == 1 and #could > 0 then
          e = { field = e.field, code = e.code, message = ("%s; partition%s that can run it: %s"):format(e.message,
            #could == 1 and "" or "s", table.concat(could, ", ")) }
        end
        add(e)
      end
      if not f.fits and #f.errors == 0 then
        warnings[#warnings + 1] = ("one replica cannot start on partition %s now: %s"):format(f.partition,
          table.concat(f.reasons, "; "))
      end
    end
  end
  return errors, fits, offered, warnings
end

--- The cluster checks of a stored managed spec (PUT /api/v1/models/{id}/managed):
--- the values the provisioner submits — the spec's, else the cluster
--- defaults' partition / account / QoS, else Slurm's default partition.
---@param policy fun(name: string): table
---@param spec table validated managed spec (obleth.deployment.input.managed_spec)
---@param defaults table|nil cluster defaults
---@param facts table as for M.cluster_errors
---@return {field: string, message: string, code: string}[] errors
function M.spec_errors(policy, spec, defaults, facts)
  defaults = defaults or {}
  local values = {}
  for _, k in ipairs({ "partition", "account", "qos", "time_limit", "nodes", "gpus_per_node", "gpu_type",
    "cpus_per_node", "memory_per_node", "constraint", "exclude" }) do values[k] = _v(spec[k]) end
  for _, k in ipairs({ "partition", "account", "qos" }) do
    if values[k] == nil then values[k] = _v(defaults[k]) end
  end
  if (values.gpus_per_node or 0) == 0 then values.gpu_type = nil end
  if values.partition == nil then
    for _, p in ipairs(facts.partitions or {}) do if p.default then values.partition = p.name end end
  end
  if values.partition == nil then
    return { { field = "partition", code = "required",
      message = "no partition: name one, or set a default partition in Cluster defaults" } }
  end
  return (M.cluster_errors(policy, values, facts))
end

---------------------------------------------------------------------------
-- the preview
---------------------------------------------------------------------------

--- The job description the provisioner would build for this spec's first
--- replica (placeholders for what only exists later), and its request body.
---@param spec table validated managed spec (obleth.deployment.input.managed_spec)
---@param o {model: {id: integer|nil, name: string}, defaults: table, api_version: string|nil, bindir: string|nil,
---  exe: string|nil, generation: integer|nil, port: integer|nil, instance: string|nil}
---  instance: the installation id of the job tag (8 hex characters)
---@return string job_script, table|nil body, table|nil err, table desc
function M.request(spec, o)
  local defaults = o.defaults or {}
  local s = _copy(spec)
  s.generation = o.generation or 1
  local port = o.port
  if not port and type(defaults.port_range) == "table" then port = defaults.port_range[1] end
  port = math.tointeger(port) or port -- JSON numbers arrive as floats
  local model = { id = o.model and o.model.id or 0, name = o.model and o.model.name or "",
    instance = o.instance or M.PLACEHOLDER_INSTANCE }
  local desc = jobscript.desc(model, { slot = 1, nonce = o.nonce or M.PLACEHOLDER_NONCE, port = port or 0 }, s,
    defaults, o.bindir, o.exe)
  local secret = _v(defaults.hf_token)
  for k, v in pairs(desc.environment or {}) do
    if (secret and secret ~= "" and v == secret) or k == "HF_TOKEN" then desc.environment[k] = M.MASK end
  end
  local script = jobscript.script(s, defaults)
  if not o.api_version then -- nil or false
    return script, nil, { field = nil, message = "the slurmrestd API version is not known (no connection)" }, desc
  end
  local body, err = submit.body(desc, o.api_version)
  return script, body, err, desc
end

--- Compute the whole preview.
---@param p {recipe: table, values: table|nil, api_model_name: string|nil, defaults: table|nil,
---  launches: table[]|nil, facts: table|nil, api_version: string|nil, policy: fun(name: string): table,
---  model: {id: integer}|nil, bindir: string|nil, exe: string|nil, instance: string|nil}
---  recipe validated; values what the user changed; launches the recipe's history, newest first;
---  facts {partitions, nodes, associations (the user's), qos} normalized, nil when Slurm is unknown
---@return table {ok, values, settings, fields, errors, partitions, partitions_offered, accounts_offered,
---  qos_offered, suggestions, learned, job_script, slurm_request, api_version, spec, warnings}
function M.preview(p)
  local r = p.recipe
  if type(r) ~= "table" then error("launch.preview: recipe must be a validated recipe", 2) end
  local policy = p.policy or error("launch.preview: policy getter required", 2)
  local facts, defaults = p.facts, p.defaults or {}
  local warnings = {}
  for _, w in ipairs(p.warnings or {}) do warnings[#warnings + 1] = w end

  -- learned account / QoS from the recipe's recent launches
  local learned, why = policy("learned").defaults(M.learned_input(p.launches))
  local res = recipe.resolve(r, M.user_values(p.values, p.api_model_name), defaults, learned)
  local values = res.values
  values.api_model_name = values.api_name

  local errors, seen = {}, {}
  local function err(field, message, code)
    field = _api_field(field)
    if seen[field] then return end
    seen[field] = true
    errors[#errors + 1] = { field = field, message = message, code = code }
  end
  for _, e in ipairs(res.errors) do
    err(e.field, e.message, "invalid")
    -- a value that failed its check goes no further (the policies expect checked values)
    local top = tostring(e.field):match("^[^%.%[]+")
    if top and top ~= "inputs" and top ~= "health" then values[top] = nil end
  end
  if values.partition == nil then
    -- neither the recipe, the user nor the cluster defaults name one: Slurm's default partition
    local default
    for _, part in ipairs(facts and facts.partitions or {}) do
      if part.default then default = part.name end
    end
    recipe.apply_cluster(res, { default_partition = default }, r)
    if not values.partition then
      err("partition", "no partition: choose one, or set a default partition in Cluster defaults", "required")
    end
  end
  if values.api_name and not seen.api_model_name then
    local _, merr = validate.model({ name = values.api_name })
    if merr then err("api_model_name", (merr.message:gsub("^name:", "api_model_name:")), "invalid") end
  end

  -- Slurm-side checks: the user's groups, account / QoS / time limit against the partition and the
  -- user's associations (an empty account or QoS is the default Slurm fills in), then whether one
  -- replica fits a node of the partition: each a field error (obleth.policy.validate, .partition_fit)
  local out = { partitions = {}, partitions_offered = {}, accounts_offered = {}, qos_offered = {} }
  if facts then
    if values.partition and not seen.partition then
      local offers, notes = M.cluster_offers(policy, values, res.provenance, facts)
      recipe.apply_cluster(res, offers, r)
      for _, n in ipairs(notes) do warnings[#warnings + 1] = n end
    end
    local cerrs, cwarn
    cerrs, out.partitions, out.partitions_offered, cwarn = M.cluster_errors(policy, values, facts)
    for _, e in ipairs(cerrs) do err(e.field, e.message, e.code) end
    for _, w in ipairs(cwarn) do warnings[#warnings + 1] = w end
    local part = _find_partition(facts, values.partition)
    if part then
      out.accounts_offered = policy("validate").accounts_for(part, facts.associations)
      local account = M.effective_account(policy, values, facts)
      if account and policy("validate").qos_for then
        out.qos_offered = policy("validate").qos_for(part, account, facts.associations, facts.qos)
      end
    end
  else
    warnings[#warnings + 1] = "the Slurm connection is not available: partition, account, QoS and time "
      .. "limit were not checked against the cluster"
  end

  -- render the job script pieces and build the managed spec as the store will keep it
  local spec, job_script, body
  local rendered, rerrs = recipe.render(r, values.inputs, defaults, { api_name = values.api_name,
    id = p.model and p.model.id or nil }, values)
  if not rendered then
    for _, e in ipairs(rerrs.errors) do err(e.field, e.message, "invalid") end
  else
    local raw = recipe.managed_spec(r, values, rendered)
    raw.enabled = true
    local vs, verr = validate.managed_spec(raw)
    if not vs then
      err(verr.field or "spec", verr.message, "invalid")
    else
      spec = vs
      if values.api_name then
        local script, b, berr = M.request(spec, { model = { id = p.model and p.model.id, name = values.api_name },
          defaults = defaults, api_version = p.api_version, bindir = p.bindir, exe = p.exe, instance = p.instance })
        job_script, body = script, b
        if berr then
          if berr.code then err(berr.field or "spec", berr.message, berr.code)
          else warnings[#warnings + 1] = berr.message end
        end
      end
    end
  end

  -- every setting with its value and provenance (null when nothing sets it)
  local settings = {}
  for _, f in ipairs(M.SETTINGS) do
    local rf = _resolve_field(f)
    settings[f] = { value = values[rf], provenance = res.provenance[rf] }
  end
  -- `fields`: every setting the form holds, in form order, also those nobody set (value and
  -- provenance nil), each with its error
  local by_field = {}
  for _, e in ipairs(errors) do by_field[e.field] = by_field[e.field] or { message = e.message, code = e.code } end
  local fields = {}
  local function push(name, value, provenance)
    fields[#fields + 1] = { field = name, value = value, provenance = provenance, error = by_field[name] }
    if name:find(".", 1, true) then settings[name] = { value = value, provenance = provenance } end
  end
  for _, f in ipairs(M.SETTINGS) do
    local rf = _resolve_field(f)
    push(f, values[rf], res.provenance[rf])
  end
  for _, k in ipairs(recipe.AUTOSCALE_KEYS) do
    push("autoscale." .. k, values.autoscale and values.autoscale[k], res.provenance["autoscale." .. k])
  end
  for _, k in ipairs(M.HEALTH_KEYS) do
    push("health." .. k, values.health and values.health[k], res.provenance["health." .. k])
  end
  for _, name in ipairs(r.input_order or {}) do
    push("inputs." .. name, values.inputs and values.inputs[name], res.provenance["inputs." .. name])
  end

  if facts and facts.user then
    local groups
    if facts.user.groups then
      groups = {}
      for g in pairs(facts.user.groups) do groups[#groups + 1] = g end
      table.sort(groups)
    end
    out.slurm_user = { name = facts.user.name, groups = groups, groups_from = facts.user.groups_from,
      groups_error = facts.user.groups_error }
  end
  out.enforce_part_limits = facts and facts.enforce_part_limits or nil
  out.ok = #errors == 0
  out.values = values
  out.settings = settings
  out.fields = fields
  out.errors = errors
  out.suggestions = M.suggestions(policy, p.launches, values, facts)
  out.learned = learned or { reason = why and why.reason, evidence = why and why.evidence }
  out.learned.applied = learned ~= nil and (res.provenance.account == "learned" or res.provenance.qos == "learned")
  out.job_script = job_script
  out.slurm_request = body
  out.api_version = p.api_version or nil
  out.spec = spec
  out.warnings = warnings
  out.placeholders = { model_id = p.model and p.model.id or 0, slot = 1, nonce = M.PLACEHOLDER_NONCE,
    instance = p.instance or M.PLACEHOLDER_INSTANCE,
    note = "the job name, comment and port are fixed per replica when the provisioner submits it" }
  return out
end

---------------------------------------------------------------------------
-- "Also save these settings as a recipe"
---------------------------------------------------------------------------


--- The recipe document to save: the launched recipe's own document with the
--- form's settings written in (resources with account and QoS, replicas or autoscale, job logs,
--- rollover margin, health, input defaults): every value the user changed, that was
--- learned from past launches, or that a Hugging Face choice set (`prefilled`).
--- Values from cluster defaults stay out, so the recipe keeps following them.
---@param doc table the launched recipe's document (as decoded from YAML / JSON)
---@param save {id: string, name: string|nil}
---@param values table resolved values
---@param provenance table<string, string> resolve's provenance (keys "partition", "inputs.x", "health.path")
---@param prefilled table<string, true>|nil fields a Hugging Face choice set (apply_prefill's third result)
---@return table doc a new document
function M.saved_recipe(doc, save, values, provenance, prefilled)
  prefilled = prefilled or {}
  local function keep(f)
    local p = provenance[f]
    return p == "user" or p == "learned" or (prefilled[f] and p == "recipe")
  end
  local out = {}
  for k, v in pairs(doc) do out[k] = v end
  out.id = save.id
  out.name = save.name or save.id
  out.resources = _copy(_v(doc.resources))
  for f in pairs(recipe.RESOURCE_KEYS) do
    if keep(f) then out.resources[f] = values[f] end
  end
  if next(out.resources) == nil then out.resources = nil end
  for f in pairs(recipe.TOP_SETTINGS) do
    if keep(f) then out[f] = values[f] end
  end
  -- autoscale: an autoscaled launch saves its settings (and no fixed count); a fixed one, none
  if values.autoscale then
    local auto = _copy(_v(doc.autoscale))
    for _, k in ipairs(recipe.AUTOSCALE_KEYS) do
      if keep("autoscale." .. k) then auto[k] = values.autoscale[k] end
    end
    out.autoscale = next(auto) ~= nil and auto or nil
    out.replicas = nil
  else
    out.autoscale = nil
  end
  local health = _copy(_v(doc.health))
  for _, k in ipairs(M.HEALTH_KEYS) do
    if keep("health." .. k) then health[k] = values.health[k] end
  end
  if next(health) ~= nil then out.health = health end
  if type(_v(doc.inputs)) == "table" then
    out.inputs = {}
    for name, def in pairs(doc.inputs) do
      local d = _copy(def)
      if keep("inputs." .. name) then d.default = values.inputs[name] end
      out.inputs[name] = d
    end
  end
  return out
end

---------------------------------------------------------------------------
-- "Edit as YAML"
---------------------------------------------------------------------------

local SETTING_SET = {}
for _, s in ipairs(M.SETTINGS) do SETTING_SET[s] = true end
local HEALTH_SET = {}
for _, k in ipairs(M.HEALTH_KEYS) do HEALTH_SET[k] = true end
local AUTOSCALE_SET = {}
for _, k in ipairs(recipe.AUTOSCALE_KEYS) do AUTOSCALE_SET[k] = true end

--- Diagnostics listed at most in one answer (the first by line); the rest are counted.
M.MAX_DIAGNOSTICS = 50

--- Keep the first M.MAX_DIAGNOSTICS of diags by line then column (in place), and add one
-- {message = "N more problems not listed"} for the rest. Lines are bucketed, so 80,000
-- diagnostics cost one pass, not a sort.
---@param diags table[] {line|nil, column|nil, field, message}
---@return table[] diags
function M.cap_diagnostics(diags)
  local max = M.MAX_DIAGNOSTICS
  if #diags > max then
    local by_line, top = {}, 0
    for _, d in ipairs(diags) do
      local l = math.tointeger(d.line) or 0
      if l < 0 then l = 0 end
      if l > top then top = l end
      local b = by_line[l]
      if not b then b = {}; by_line[l] = b end
      b[#b + 1] = d
    end
    local kept, l = {}, 0
    while #kept < max and l <= top do
      for _, d in ipairs(by_line[l] or {}) do kept[#kept + 1] = d end
      l = l + 1
    end
    local rest = #diags - max
    for i = #diags, 1, -1 do diags[i] = nil end
    table.sort(kept, function(a, b)
      if (a.line or 0) ~= (b.line or 0) then return (a.line or 0) < (b.line or 0) end
      return (a.column or 0) < (b.column or 0)
    end)
    for i = 1, max do diags[i] = kept[i] end
    diags[max + 1] = { message = ("%d more problems not listed"):format(rest) }
    return diags
  end
  table.sort(diags, function(a, b)
    if (a.line or 0) ~= (b.line or 0) then return (a.line or 0) < (b.line or 0) end
    return (a.column or 0) < (b.column or 0)
  end)
  return diags
end

--- Read the form's settings from a decoded YAML document.
---@param doc any decoded YAML
---@param pos table|nil positions from obleth.yaml decode{positions=true}
---@param r table|nil the recipe (to know its inputs); nil: inputs are not checked
---@return table|nil values for M.preview / recipe.resolve (api_model_name kept as is)
---@return table[] diagnostics {line, column, field, message} (structure: unknown key, wrong type),
---  at most MAX_DIAGNOSTICS of them and one counting the rest (see cap_diagnostics)
function M.yaml_values(doc, pos, r)
  local diags = {}
  local function at(tbl, key)
    local p = pos and tbl and pos[tbl] and pos[tbl][key]
    if p then return p.line, p.column end
    return nil, nil
  end
  local function diag(tbl, key, field, message)
    local line, column = at(tbl, key)
    diags[#diags + 1] = { line = line, column = column, field = field, message = message }
  end
  if _v(doc) == nil then return {}, diags end
  if type(doc) ~= "table" or (#doc > 0) then
    diags[1] = { line = 1, column = 1, message = "the settings must be a mapping of setting: value" }
    return nil, diags
  end
  local values = {}
  for k, v in pairs(doc) do
    if type(k) ~= "string" then
      diag(doc, k, tostring(k), ("unknown key %s"):format(tostring(k)))
    elseif k == "inputs" or k == "health" or k == "autoscale" then
      if _v(v) ~= nil and (type(v) ~= "table" or #v > 0) then
        diag(doc, k, k, ("%s must be a mapping of name: value"):format(k))
      elseif _v(v) ~= nil then
        values[k] = {}
        for k2, v2 in pairs(v) do
          local known = type(k2) == "string" and (k == "health" and HEALTH_SET[k2]
            or (k == "autoscale" and AUTOSCALE_SET[k2])
            or (k == "inputs" and (r == nil or (r.inputs and r.inputs[k2]))))
          if not known then
            local hint = k == "health" and " (path, interval, timeout, startup_grace, failure_threshold)"
              or k == "autoscale" and (" (%s)"):format(table.concat(recipe.AUTOSCALE_KEYS, ", "))
              or (r and (" (recipe %s has no such input)"):format(r.id) or "")
            diag(v, k2, k .. "." .. tostring(k2), ("unknown key %s.%s%s"):format(k, tostring(k2), hint))
          elseif type(v2) == "table" then
            diag(v, k2, k .. "." .. k2, ("%s.%s must be a single value, not a list or mapping"):format(k, k2))
          else
            values[k][k2] = v2
          end
        end
      end
    elseif not SETTING_SET[k] then
      diag(doc, k, k, ("unknown key %s"):format(k))
    elseif type(v) == "table" then
      diag(doc, k, k, ("%s must be a single value, not a list or mapping"):format(k))
    else
      values[k] = v
    end
  end
  if r == nil then values.inputs = nil end
  return values, M.cap_diagnostics(diags)
end

--- Where a field's key is in the YAML document: line, column (nil when absent).
function M.yaml_position(doc, pos, field)
  if not pos or type(doc) ~= "table" then return nil end
  local ns, key = field:match("^(%a+)%.(.+)$")
  local p
  if ns and type(doc[ns]) == "table" then
    p = pos[doc[ns]] and pos[doc[ns]][key]
    if not p then p = pos[doc] and pos[doc][ns] end
  else
    p = pos[doc] and pos[doc][field]
  end
  if p then return p.line, p.column end
  return nil
end

return M
