--- obleth.recipe.resolve — resolving every setting of the launch form with its provenance
-- (recipe.resolve), and building the managed spec from resolved values and a render
-- (recipe.managed_spec).
local schema = require "obleth.recipe.schema"
local templates = require "obleth.recipe.templates"
local validate = require "obleth.recipe.validate"
local render = require "obleth.recipe.render"
local managed_schema = require "obleth.schema.managed"
-- the names this part's code shares with the other parts of obleth.recipe
local M = {}
local _v = schema.value
local RES_RULES, HEALTH_RULES = validate.RES_RULES, validate.HEALTH_RULES
local _check_rule, _check_typed_value = validate.check_rule, validate.check_typed_value
local _render_raw = render.render_raw

---------------------------------------------------------------------------
-- resolving the launch form
---------------------------------------------------------------------------

-- Settings in form order: name, kind of check.
local SETTINGS = {
  { "api_name" }, { "partition" }, { "account" }, { "qos" }, { "time_limit" }, { "nodes" },
  { "gpus_per_node" }, { "gpu_type" }, { "cpus_per_node" }, { "memory_per_node" }, { "constraint" },
  { "exclude" }, { "replicas" }, { "stdout" }, { "stderr" }, { "rollover_margin" },
}
local SETTING_SET = {}
for _, s in ipairs(SETTINGS) do SETTING_SET[s[1]] = true end

-- autoscale's settings (obleth.schema.managed.autoscale: names, bounds), in its order; the form's only
-- source for them is the user (no recipe or cluster default sets them): none given is a fixed count
local AUTOSCALE = {}
for _, f in ipairs(managed_schema.autoscale.fields) do AUTOSCALE[#AUTOSCALE + 1] = { f[1], f[2] } end
M.AUTOSCALE_KEYS = {}
local AUTOSCALE_SET = {}
for i, f in ipairs(AUTOSCALE) do M.AUTOSCALE_KEYS[i], AUTOSCALE_SET[f[1]] = f[1], true end

local function _flatten_user(user)
  -- {inputs={a=1}, health={path=..}, ["inputs.b"]=2, partition=...} -> flat "inputs.a", "health.path", ...
  local flat = {}
  for k, v in pairs(user or {}) do
    if (k == "inputs" or k == "health" or k == "autoscale") and type(v) == "table" then
      for k2, v2 in pairs(v) do flat[k .. "." .. tostring(k2)] = v2 end
    else
      flat[k] = v
    end
  end
  return flat
end

-- A setting's value that is refused: the one error shape, on the setting's field.
local function _invalid(field, message) return nil, { code = "invalid", field = field, message = message } end

local function _check_text(v, field, allow_newline)
  if type(v) ~= "string" or v == "" then return _invalid(field, field .. " must be a non-empty string") end
  if v:find("\0", 1, true) or (not allow_newline and v:find("[\n\r]")) then
    return _invalid(field, field .. " must not contain control characters")
  end
  return v
end

-- The checked value of one setting, or nil, {code = "invalid", field = name, message}.
local function _check_setting(name, v)
  if name == "api_name" then
    local s, err = _check_text(v, "api_name")
    if not s then return nil, err end
    if #s > schema.API_NAME_MAX or not s:match(schema.API_NAME_PATTERN) then
      return _invalid(name, "api_name must be " .. schema.API_NAME_RULE)
    end
    return s
  end
  local ok, msg = _check_rule(RES_RULES[name], v, name) -- a leaf check: its message, wrapped here
  if ok == nil then return _invalid(name, msg) end
  return ok
end

-- The resolved settings in form order: {field, value, provenance} for each one that has a provenance.
local function _fields(recipe, values, provenance)
  local fields = {}
  local function push(f)
    if provenance[f] then
      local ns, key = f:match("^(%a+)%.(.+)$")
      local v = ns and (values[ns] or {})[key] or values[f]
      fields[#fields + 1] = { field = f, value = v, provenance = provenance[f] }
    end
  end
  for _, s in ipairs(SETTINGS) do push(s[1]) end
  for _, k in ipairs({ "path", "interval", "timeout", "startup_grace", "failure_threshold" }) do push("health." .. k) end
  for _, k in ipairs(M.AUTOSCALE_KEYS) do push("autoscale." .. k) end
  for _, name in ipairs(recipe.input_order) do push("inputs." .. name) end
  return fields
end

--- Resolve every setting of the launch form: value and provenance.
-- Precedence, lowest first: obleth's built-in fallback (schema.SPEC_DEFAULTS,
-- provenance `builtin`), cluster defaults (`cluster_default`), the recipe, learned
-- account/QoS (`learned`), the user's values (`user`). An input default that
-- refers to `{{ defaults.* }}` is marked `cluster_default`. What the cluster decides once its facts
-- are known is the last layer, M.apply_cluster.
---@param recipe table validated recipe
---@param user_values table|nil what the user changed: {partition=, account=, ..., inputs={name=v},
---  health={path=, ...}} (dotted keys "inputs.x" / "health.path" work too); strings are coerced
---@param cluster_defaults table|nil {partition, account, qos, log_dir, model_cache_dir, ...}
---@param learned table|nil {account=, qos=, evidence=} from obleth.policy.learned
---@return {values: table, provenance: table<string, string>, fields: table[], errors: table[], ok: boolean}
---  values: {api_name, partition, account, qos, time_limit (minutes), nodes, gpus_per_node, gpu_type,
---  cpus_per_node, memory_per_node (MiB), constraint, exclude, replicas, stdout, stderr, rollover_margin,
---  health={...}, inputs={...}}; provenance and fields are keyed "partition", "inputs.x", "health.path";
---  errors: {field=, message=}
function M.resolve(recipe, user_values, cluster_defaults, learned)
  if type(recipe) ~= "table" then error("recipe.resolve: recipe must be a validated recipe", 2) end
  local defaults = cluster_defaults or {}
  local user = _flatten_user(user_values)
  local values, provenance, errors = { inputs = {}, health = {}, autoscale = {} }, {}, {}
  local function err(field, message) errors[#errors + 1] = { field = field, message = message } end
  local function set(field, v, source)
    local ns, key = field:match("^(%a+)%.(.+)$")
    if ns then values[ns][key] = v else values[field] = v end
    provenance[field] = source
  end

  -- unknown user keys
  for k in pairs(user) do
    local ns, key = tostring(k):match("^(%a+)%.(.+)$")
    local known = SETTING_SET[k] or (ns == "inputs" and recipe.inputs[key]) or (ns == "health" and HEALTH_RULES[key])
      or (ns == "autoscale" and AUTOSCALE_SET[key])
    if not known then err(tostring(k), ("unknown setting %q"):format(tostring(k))) end
  end

  -- plain settings
  local cd = {
    partition = _v(defaults.partition), account = _v(defaults.account), qos = _v(defaults.qos),
  }
  local log_dir = _v(defaults.log_dir)
  if type(log_dir) == "string" and log_dir ~= "" then
    cd.stdout = log_dir:gsub("/+$", "") .. "/%x-%j.out"
    cd.stderr = log_dir:gsub("/+$", "") .. "/%x-%j.err"
  end
  for _, s in ipairs(SETTINGS) do
    local name = s[1]
    local v, source = schema.SPEC_DEFAULTS[name], schema.SPEC_DEFAULTS[name] ~= nil and "builtin" or nil
    if name == "api_name" then v, source = recipe.id, "recipe" end
    if cd[name] ~= nil then v, source = cd[name], "cluster_default" end
    local rv = recipe.resources[name]
    if schema.TOP_SETTINGS[name] then rv = recipe[name] end
    if rv ~= nil then v, source = rv, "recipe" end
    if learned and (name == "account" or name == "qos") and _v(learned[name]) ~= nil then
      v, source = learned[name], "learned"
    end
    local uv = _v(user[name])
    if uv ~= nil and uv ~= "" then v, source = uv, "user" end
    if v ~= nil then
      local ok, e = _check_setting(name, v)
      if ok == nil then err(e.field, e.message) else v = ok end
      set(name, v, source)
    end
  end
  if values.time_limit == validate.TIME_MAX then
    -- the longest the partition allows: its MaxTime once the partition is known
    -- (M.apply_cluster), a day until then
    values.time_limit, values.time_limit_max = validate.TIME_MAX_FALLBACK, true
  end
  if values.api_name == nil then err("api_name", "api_name is required") end
  if values.gpu_type ~= nil and (values.gpus_per_node or 0) == 0 then
    err("gpu_type", "a GPU type needs at least one GPU per node")
  end

  -- autoscale: the recipe's `autoscale:` (a saved recipe keeps the launch's), the user's values over it;
  -- any of them makes the replicas follow the load (the spec's `autoscale`, its defaults filled by
  -- obleth.deployment.input), and then there is no fixed count. A fixed count the user gives (replicas)
  -- with no autoscale value of theirs replaces the recipe's autoscale.
  local user_auto, user_fixed = false, provenance.replicas == "user"
  for _, a in ipairs(AUTOSCALE) do
    local uv = _v(user["autoscale." .. a[1]])
    if uv ~= nil and uv ~= "" then user_auto = true end
  end
  for _, a in ipairs(AUTOSCALE) do
    local k, rule = a[1], a[2]
    local field = "autoscale." .. k
    local rv = recipe.autoscale and recipe.autoscale[k]
    if rv ~= nil and (user_auto or not user_fixed) then set(field, rv, "recipe") end
    local uv = _v(user[field])
    if uv ~= nil and uv ~= "" then
      local n = math.tointeger(tonumber(uv))
      if n == nil then err(field, field .. " must be a whole number")
      elseif (rule.min and n < rule.min) or (rule.max and n > rule.max) then
        err(field, ("%s must be between %d and %d"):format(field, rule.min, rule.max))
      else set(field, n, "user") end
    end
  end
  if next(values.autoscale) == nil then
    values.autoscale = nil
  else
    if user_fixed then
      err("replicas", "replicas or autoscale, not both: clear the replicas to let them follow the load")
    end
    values.replicas, provenance.replicas = nil, nil
  end

  -- health
  for k in pairs(HEALTH_RULES) do
    local v, source = recipe.health[k], "recipe"
    local uv = _v(user["health." .. k])
    if uv ~= nil and uv ~= "" then
      local ok, e = _check_rule(HEALTH_RULES[k], uv, "health." .. k)
      if ok == nil then err("health." .. k, e) else v, source = ok, "user" end
    end
    set("health." .. k, v, source)
  end

  -- inputs
  for _, name in ipairs(recipe.input_order) do
    local def = recipe.inputs[name]
    local field = "inputs." .. name
    local v, source = nil, nil
    if def.default ~= nil then
      v, source = def.default, "recipe"
      if type(v) == "string" and v:find("{{", 1, true) then
        local rendered = _render_raw({ defaults = defaults }, v, field)
        v, source = rendered, "cluster_default"
        local blank = false
        for _, p in ipairs(templates.parse_template(def.default) or {}) do
          if p.kind == "ref" and _v(defaults[p.name]) == nil then blank = true end
        end
        if blank then v = nil end -- a default built on a missing cluster default is no default
      end
    end
    local uv = _v(user[field])
    if uv == "" and not def.required then
      -- a field the user cleared: unset, also when a default (or a Hugging Face choice) filled it
      v, source = nil, "user"
    elseif uv ~= nil and not (uv == "" and def.type ~= "string") then
      v, source = uv, "user"
    end
    if v ~= nil then
      local ok, e = _check_typed_value(def, v, field)
      if ok == nil then err(field, e) else v = ok end
      set(field, v, source)
    elseif def.required then
      err(field, field .. " is required" .. (def.description and (": " .. def.description) or ""))
    end
  end

  -- rules across inputs
  local function set_input(n)
    local v = values.inputs and values.inputs[n]
    return v ~= nil and v ~= "" and v ~= false
  end
  for _, group in ipairs(recipe.one_of or {}) do
    local any = false
    for _, n in ipairs(group) do if set_input(n) then any = true end end
    if not any then
      local names = {}
      for i, n in ipairs(group) do names[i] = "inputs." .. n end
      err("inputs." .. group[1], ("give one of %s"):format(table.concat(names, ", ")))
    end
  end
  for name, needs in pairs(recipe.requires or {}) do
    if set_input(name) then
      for _, n in ipairs(needs) do
        if not set_input(n) then err("inputs." .. n, ("inputs.%s is required with inputs.%s"):format(n, name)) end
      end
    end
  end

  return { values = values, provenance = provenance, fields = _fields(recipe, values, provenance), errors = errors,
    ok = #errors == 0 }
end

--- The last layer of M.resolve's precedence, once the cluster's facts are known: what Slurm (or the
--- cluster) decides when nobody set the field. The one place besides M.resolve that sets a
--- provenance; the facts come from obleth.deployment.cluster_offers, which only reads.
--- - default_partition: Slurm's default partition, when nothing named one (`cluster_default`);
--- - partition: the only partition that can run the replica when the current one cannot, unless the
---   user chose it (`cluster_default`);
--- - default_time / max_time (minutes, the partition's DefaultTime / finite MaxTime): `time_limit: max`
---   takes MaxTime (its provenance stays); obleth's built-in time limit gives way to DefaultTime (when
---   within MaxTime), else is capped at MaxTime (`cluster_default`);
--- - qos: the only QoS the partition takes that the user holds, when no QoS is chosen (`cluster_default`).
---@param res table M.resolve's answer: values, provenance and fields are updated in place
---@param offers {default_partition: string|nil, partition: string|nil, default_time: integer|nil,
---  max_time: integer|nil, qos: string|nil}
---@param recipe table the validated recipe res was resolved from
---@return table res
function M.apply_cluster(res, offers, recipe)
  local values, prov = res.values, res.provenance
  local function set(field, v) values[field], prov[field] = v, "cluster_default" end
  if offers.default_partition and values.partition == nil then set("partition", offers.default_partition) end
  if offers.partition and prov.partition ~= "user" then set("partition", offers.partition) end
  local dt, mt = offers.default_time, offers.max_time
  if values.time_limit_max then
    if mt then values.time_limit = mt end
  elseif prov.time_limit == "builtin" then
    if dt and (mt == nil or dt <= mt) then set("time_limit", dt)
    elseif mt and values.time_limit and values.time_limit > mt then set("time_limit", mt) end
  end
  if offers.qos and values.qos == nil then set("qos", offers.qos) end
  res.fields = _fields(recipe, values, prov)
  return res
end

--- Build the managed spec (docs/managed-spec.md) from resolved values and a render.
---@param recipe table validated recipe
---@param values table `resolve(...).values`
---@param rendered table `render(...)`
---@return table spec (without enabled/generation)
function M.managed_spec(recipe, values, rendered)
  local spec = {
    replicas = values.replicas, partition = values.partition, account = values.account, qos = values.qos,
    time_limit = values.time_limit, nodes = values.nodes, gpus_per_node = values.gpus_per_node,
    gpu_type = values.gpu_type, cpus_per_node = values.cpus_per_node, memory_per_node = values.memory_per_node,
    constraint = values.constraint, exclude = values.exclude, stdout = values.stdout, stderr = values.stderr,
    health = {}, recipe_id = recipe.id, inputs = {}, rollover_margin = values.rollover_margin,
    script_body = rendered.script_body, launch_command = rendered.launch_command, image = rendered.image,
    preamble = rendered.preamble or {}, environment = rendered.environment or {},
  }
  for k, v in pairs(values.health or {}) do spec.health[k] = v end
  for k, v in pairs(values.inputs or {}) do spec.inputs[k] = v end
  if values.autoscale then
    spec.autoscale, spec.replicas = {}, nil
    for k, v in pairs(values.autoscale) do spec.autoscale[k] = v end
  end
  return spec
end

---------------------------------------------------------------------------
-- loading YAML (host only: needs obleth.yaml)
---------------------------------------------------------------------------

return M
