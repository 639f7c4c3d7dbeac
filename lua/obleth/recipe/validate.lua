--- obleth.recipe.validate — validating a decoded recipe (recipe.validate) and one typed input
-- value (recipe.check_input).
--
-- Errors: leaf parsers (docs/errors.md): `_check_typed_value` (public as `check_input`) and
-- `_check_rule` check one typed value and return nil, "message"; `validate` collects those as
-- {field, message} errors, and check_input's callers wrap them into {code, message, field}.
-- spec/unit/error_shape_spec.lua holds this list.
local shell = require "obleth.util.shell"
local timefmt = require "obleth.util.timefmt"
local schema = require "obleth.recipe.schema"
local wire = require "obleth.schema"
local managed = require "obleth.schema.managed"
local templates = require "obleth.recipe.templates"
-- the names this part's code shares with the other parts of obleth.recipe
local M = {}
local TOP_KEYS, INPUT_KEYS = schema.TOP_KEYS, schema.INPUT_KEYS
local _v, _is_int, _int, _is_array, _text = schema.value, schema.is_int, schema.int, schema.is_array, schema.text
local _check_ref, _check_script_context = templates.check_ref, templates.check_script_context
local _parse_argv_element = templates.parse_argv_element
local contexts = require "obleth.recipe.contexts"

---------------------------------------------------------------------------
-- validation
---------------------------------------------------------------------------

local function _collector(positions)
  local errors = {}
  local function add(tbl, key, field, message)
    local p = positions and tbl ~= nil and positions[tbl] and positions[tbl][key]
    errors[#errors + 1] = { field = field, message = message, line = p and p.line or nil,
      column = p and p.column or nil }
  end
  return errors, add
end

local function _check_typed_value(def, v, field)
  -- Returns the coerced value or nil, message. `v` is never nil here.
  local t = def.type
  if t == "string" or t == "path" then
    if type(v) == "number" then v = _text(v) end
    if type(v) ~= "string" then return nil, field .. " must be a string" end
    if v:find("\0", 1, true) then return nil, field .. " must not contain a NUL byte" end
    if t == "path" then
      if v:find("\n", 1, true) then return nil, field .. " must not contain a newline" end
      if v:sub(1, 1) ~= "/" then return nil, field .. " must be an absolute path (starting with /)" end
    end
    if def.pattern and #v > schema.MAX_PATTERN_VALUE then
      return nil, ("%s is longer than %d characters"):format(field, schema.MAX_PATTERN_VALUE)
    end
    if def.pattern and not v:find("^" .. def.pattern:gsub("^%^", ""):gsub("%$$", "") .. "$") then
      return nil, ("%s does not match the pattern %s"):format(field, def.pattern)
    end
    return v
  elseif t == "integer" or t == "number" then
    if type(v) == "string" then
      local n = tonumber((v:match("^%s*(.-)%s*$")))
      if n == nil then return nil, ("%s must be a%s, got %q"):format(field, t == "integer" and "n integer" or " number", v) end
      v = n
    end
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
      return nil, field .. " must be a finite number"
    end
    if t == "integer" then
      if not _is_int(v) then return nil, field .. " must be a whole number" end
      v = _int(v)
    end
    if def.min ~= nil and v < def.min then return nil, ("%s must be at least %s"):format(field, _text(def.min)) end
    if def.max ~= nil and v > def.max then return nil, ("%s must be at most %s"):format(field, _text(def.max)) end
    return v
  elseif t == "boolean" then
    if v == "true" then v = true elseif v == "false" then v = false end
    if type(v) ~= "boolean" then return nil, field .. " must be true or false" end
    return v
  elseif t == "enum" then
    v = type(v) == "number" and _text(v) or v
    for _, x in ipairs(def.values or {}) do
      if x == v then return v end
    end
    return nil, ("%s must be one of: %s"):format(field, table.concat(def.values or {}, ", "))
  end
  return nil, field .. " has an unknown type"
end

--- Validate one typed input value against its declaration.
---@param def table input declaration (type, pattern, min, max, values)
---@param value any the value (strings are coerced for integer, number, boolean)
---@param field string|nil field name for messages (default "value")
---@return any|nil value coerced
---@return string|nil err
function M.check_input(def, value, field)
  return _check_typed_value(def, value, field or "value")
end

local function _validate_inputs(src, out, add, positions)
  local inputs = _v(src.inputs)
  out.inputs, out.input_order = {}, {}
  if inputs == nil then return end
  if type(inputs) ~= "table" or (next(inputs) ~= nil and _is_array(inputs)) then
    add(src, "inputs", "inputs", "inputs must be a mapping of name to declaration")
    return
  end
  local order = {}
  for name, def in pairs(inputs) do
    local f = "inputs." .. tostring(name)
    if type(name) ~= "string" or not name:match("^[a-z_][a-z0-9_]*$") then
      add(inputs, name, f, "an input name is lower-case letters, digits and _")
    elseif type(def) ~= "table" then
      add(inputs, name, f, "an input declaration is a mapping with at least `type`")
    else
      local d = {}
      for k, val in pairs(def) do
        if not INPUT_KEYS[k] then
          add(def, k, f .. "." .. tostring(k), ("unknown key %q (type, default, required, description, "
            .. "pattern, min, max, values, label)"):format(tostring(k)))
        else
          d[k] = _v(val)
        end
      end
      local ok = true
      if not schema.INPUT_TYPES[d.type] then
        add(def, "type", f .. ".type", "type must be one of string, integer, number, boolean, enum, path")
        ok = false
      end
      for _, k in ipairs({ "description", "label" }) do
        if d[k] ~= nil and type(d[k]) ~= "string" then add(def, k, f .. "." .. k, k .. " must be a string") end
      end
      if d.required ~= nil and type(d.required) ~= "boolean" then
        add(def, "required", f .. ".required", "required must be true or false"); ok = false
      end
      if d.pattern ~= nil then
        if d.type ~= "string" and d.type ~= "path" then
          add(def, "pattern", f .. ".pattern", "pattern applies to string and path inputs")
        elseif type(d.pattern) ~= "string" or not pcall(string.find, "", d.pattern) then
          add(def, "pattern", f .. ".pattern", "pattern must be a valid Lua pattern")
        elseif #d.pattern > 200 or schema.pattern_repeats(d.pattern) > schema.MAX_PATTERN_REPEATS then
          -- Lua patterns backtrack: n repetitions cost O(len^n) on a hostile value
          add(def, "pattern", f .. ".pattern", ("pattern may use at most %d repetition operators (* - + ?) "
            .. "and 200 characters"):format(schema.MAX_PATTERN_REPEATS))
          ok = false
        end
      end
      for _, k in ipairs({ "min", "max" }) do
        if d[k] ~= nil then
          if d.type ~= "integer" and d.type ~= "number" then
            add(def, k, f .. "." .. k, k .. " applies to integer and number inputs")
          elseif type(d[k]) ~= "number" or (d.type == "integer" and not _is_int(d[k])) then
            add(def, k, f .. "." .. k, k .. " must be a" .. (d.type == "integer" and "n integer" or " number"))
            ok = false
          end
        end
      end
      if ok and d.min and d.max and d.min > d.max then
        add(def, "max", f .. ".max", "max must not be below min"); ok = false
      end
      if d.type == "enum" then
        local vals = d.values
        local good = type(vals) == "table" and #vals > 0 and _is_array(vals)
        if good then
          for _, x in ipairs(vals) do if type(x) ~= "string" then good = false end end
        end
        if not good then
          add(def, "values", f .. ".values", "an enum input needs `values`: a non-empty list of strings")
          ok = false
        end
      elseif d.values ~= nil then
        add(def, "values", f .. ".values", "values applies to enum inputs")
      end
      if ok and d.default ~= nil then
        -- a string default may refer to cluster defaults ("{{ defaults.model_cache_dir }}/x")
        if type(d.default) == "string" and d.default:find("{{", 1, true) then
          local parts, err = templates.parse_template(d.default)
          if not parts then
            add(def, "default", f .. ".default", err)
          else
            for _, p in ipairs(parts) do
              if p.kind == "ref" and p.ns ~= "defaults" then
                add(def, "default", f .. ".default", "a default may only refer to {{ defaults.* }}")
              elseif p.kind == "ref" then
                local e = _check_ref(p, {})
                if e then add(def, "default", f .. ".default", e) end
              end
            end
          end
        else
          local v, err = _check_typed_value(d, d.default, f .. ".default")
          if v == nil then add(def, "default", f .. ".default", err) else d.default = v end
        end
      end
      if d.min then d.min = _int(d.min) end
      if d.max then d.max = _int(d.max) end
      d.name = name
      out.inputs[name] = d
      local p = positions and positions[inputs] and positions[inputs][name]
      order[#order + 1] = { name = name, line = p and p.line or 0 }
    end
  end
  table.sort(order, function(a, b)
    if a.line ~= b.line then return a.line < b.line end
    return a.name < b.name
  end)
  for i, o in ipairs(order) do out.input_order[i] = o.name end
end

--- The time_limit value that asks for the longest the partition allows (`time_limit: max`).
M.TIME_MAX = "max"
--- Minutes a `max` time limit stands for until a partition with a finite MaxTime is known.
M.TIME_MAX_FALLBACK = 1440

-- the bounds of a setting are the managed spec's (obleth.schema.managed): a recipe never resolves to a
-- spec its PUT would refuse
local function _bounds(path)
  local f = wire.field(managed.spec, path)
  return { kind = "integer", min = f.min, max = f.max }
end
local RES_RULES = {
  partition = { kind = "string", pattern = "^[A-Za-z0-9_.-]+$", maxlen = 64 },
  gpu_type = { kind = "string", pattern = "^[A-Za-z0-9_.-]+$", maxlen = 64 },
  constraint = { kind = "string", pattern = "^[A-Za-z0-9_&|,()!*:-]+$", maxlen = 1024 },
  exclude = { kind = "string", pattern = "^[A-Za-z0-9_.,%[%]-]+$", maxlen = 4096 },
  nodes = _bounds("nodes"),
  gpus_per_node = _bounds("gpus_per_node"),
  cpus_per_node = _bounds("cpus_per_node"), -- 0: the whole node
  memory_per_node = _bounds("memory_per_node"),
  time_limit = { kind = "time" },
  replicas = _bounds("replicas"),
  rollover_margin = _bounds("rollover_margin"),
  account = { kind = "string", pattern = "^[A-Za-z0-9_.-]+$", maxlen = 256 },
  qos = { kind = "string", pattern = "^[A-Za-z0-9_.-]+$", maxlen = 256 },
  stdout = { kind = "text", maxlen = 4096 },
  stderr = { kind = "text", maxlen = 4096 },
}
-- RES_RULES holds the rule of every setting: schema.RESOURCE_KEYS go under resources:, schema.TOP_SETTINGS
-- at the top level
local RESOURCE_KEYS, TOP_SETTINGS = schema.RESOURCE_KEYS, schema.TOP_SETTINGS
local function _seconds(name)
  local f = wire.field(managed.health, name)
  return { kind = "seconds", min = f.min, max = f.max }
end
-- autoscale: (a recipe's `autoscale:` mapping) the managed spec's fields and bounds (obleth.schema.managed)
local AUTOSCALE_RULES, AUTOSCALE_NAMES = {}, {}
for _, f in ipairs(managed.autoscale.fields) do
  AUTOSCALE_RULES[f[1]] = { kind = "integer", min = f[2].min, max = f[2].max }
  AUTOSCALE_NAMES[#AUTOSCALE_NAMES + 1] = f[1]
end
local HEALTH_RULES = {
  path = { kind = "path" },
  interval = _seconds("interval"),
  timeout = _seconds("timeout"),
  startup_grace = _seconds("startup_grace"),
  failure_threshold = _bounds("health.failure_threshold"),
}

--- Check one setting value against its rule; returns the coerced value or nil, message.
local function _check_rule(rule, v, field)
  if rule.kind == "string" then
    if type(v) ~= "string" or v == "" then return nil, field .. " must be a non-empty string" end
    if #v > rule.maxlen then return nil, ("%s must be at most %d characters"):format(field, rule.maxlen) end
    if not v:match(rule.pattern) then return nil, field .. " contains characters Slurm does not accept here" end
    return v
  elseif rule.kind == "text" then
    if type(v) ~= "string" or v == "" then return nil, field .. " must be a non-empty string" end
    if #v > rule.maxlen then return nil, ("%s must be at most %d characters"):format(field, rule.maxlen) end
    if v:find("[\0\n\r]") then return nil, field .. " must not contain control characters" end
    return v
  elseif rule.kind == "integer" then
    if type(v) == "string" and v:match("^%s*%d+%s*$") then v = tonumber(v) end
    if not _is_int(v) then return nil, field .. " must be a whole number" end
    v = _int(v)
    if v < rule.min or v > rule.max then
      return nil, ("%s must be between %d and %d"):format(field, rule.min, rule.max)
    end
    return v
  elseif rule.kind == "time" then
    -- "max": the longest the partition allows (its MaxTime), settled once the partition is known
    if type(v) == "string" and v:lower():match("^%s*max%s*$") then return M.TIME_MAX end
    if type(v) == "number" and _is_int(v) then v = _int(v) end
    local m, err = timefmt.parse_minutes(v)
    if not m then return nil, field .. ": " .. err end
    return m
  elseif rule.kind == "seconds" then
    if type(v) == "string" then v = tonumber(v) or v end
    if type(v) ~= "number" or v ~= v or v < rule.min or v > rule.max then
      return nil, ("%s must be a number of seconds from %d to %d"):format(field, rule.min, rule.max)
    end
    return _int(v)
  elseif rule.kind == "path" then
    if type(v) ~= "string" or v:sub(1, 1) ~= "/" or v:find("[%s%c]") then
      return nil, field .. " must be an URL path starting with / (no spaces)"
    end
    return v
  end
  error("unknown rule " .. tostring(rule.kind))
end

-- Walk every template of the recipe with `fn(text, field, tbl, key, kind)`.
local function _each_template(src, fn)
  if type(src.script) == "string" then fn(src.script, "script", src, "script", "script") end
  if type(src.image) == "string" then fn(src.image, "image", src, "image", "raw") end
  local launch = _v(src.launch)
  if type(launch) == "table" then
    for i, el in ipairs(launch) do
      if type(el) == "string" then
        fn(el, ("launch[%d]"):format(i), launch, i, "argv")
      elseif type(el) == "table" and type(_v(el.args)) == "table" then
        for j, a in ipairs(el.args) do
          if type(a) == "string" then fn(a, ("launch[%d].args[%d]"):format(i, j), el.args, j, "argv") end
        end
      end
    end
  end
  local pre = _v(src.preamble)
  if type(pre) == "table" then
    for i, el in ipairs(pre) do
      local line, tbl, key = el, pre, i
      if type(el) == "table" then line, tbl, key = _v(el.line), el, "line" end
      if type(line) == "string" then fn(line, ("preamble[%d]"):format(i), tbl, key, "line") end
    end
  end
  local env = _v(src.environment)
  if type(env) == "table" then
    for k, val in pairs(env) do
      if type(val) == "string" then fn(val, "environment." .. tostring(k), env, k, "raw") end
    end
  end
end

local function _check_when(when, inputs)
  -- `when: inputs.x` or `when: {inputs.x: value}`
  local ref
  if type(when) == "string" then
    ref = when
  elseif type(when) == "table" then
    local n = 0
    for k, val in pairs(when) do
      n = n + 1; ref = k
      if type(val) ~= "string" and type(val) ~= "number" and type(val) ~= "boolean" then
        return "when: the value to compare must be a scalar"
      end
    end
    if n ~= 1 then return "when: give one reference, or one `reference: value` pair" end
  else
    return "when: give a reference like inputs.name, or `inputs.name: value`"
  end
  local ns, name = tostring(ref):match("^([%a_][%w_]*)%.([%a_][%w_]*)$")
  if not ns then return ("when: %q is not a reference like inputs.name"):format(tostring(ref)) end
  return _check_ref({ ns = ns, name = name, raw = tostring(ref) }, inputs)
end

-- The recipe's `programs:` (names its author says take their arguments as data), or nil.
local function _programs(tbl, out, add)
  local list = _v(tbl.programs)
  if list == nil then return nil end
  if type(list) ~= "table" or not _is_array(list) then
    add(tbl, "programs", "programs", "programs must be a list of program names"); return nil
  end
  local set = {}
  for i, p in ipairs(list) do
    if type(p) ~= "string" or not p:match("^[%w][%w._+-]*$") then
      add(list, i, ("programs[%d]"):format(i), ("programs[%d]: a program name (letters, digits, . _ + -)"):format(i))
    elseif contexts.INTERPRETERS[p] then
      add(list, i, ("programs[%d]"):format(i), ("programs[%d]: %s runs its arguments as code or runs another "
        .. "program: it cannot take an input's text as data"):format(i, p))
    else
      set[p] = true
    end
  end
  out.programs = list
  return set
end

-- Where free text (string and path inputs) may stand: the allowlist of obleth.recipe.contexts, for
-- the script, the preamble lines and the launch list, with the `environment:` entries that carry
-- free text. Every refusal names the line.
local function _check_text_contexts(tbl, out, add, refused)
  local programs = _programs(tbl, out, add)
  if refused.script or refused.preamble or refused.launch or refused.environment then return end
  local inputs = out.inputs or {}
  local function is_text(p)
    return p.kind == "ref" and p.ns == "inputs" and inputs[p.name] ~= nil
      and contexts.TEXT_TYPES[inputs[p.name].type] == true
  end
  local function marked(text)
    local parts = templates.parse_template(text)
    if not parts then return nil end
    local buf, any = {}, false
    for _, p in ipairs(parts) do
      if p.kind == "text" then buf[#buf + 1] = p.text
      elseif is_text(p) then buf[#buf + 1] = contexts.TAINT; any = true
      else buf[#buf + 1] = contexts.DATA end
    end
    return table.concat(buf), any
  end
  -- environment: entries whose value refers to free text carry it into the job
  local carriers = {}
  local env = _v(tbl.environment)
  if type(env) == "table" then
    for k, val in pairs(env) do
      if type(k) == "string" and type(val) == "string" then
        local _, any = marked(val)
        if any then carriers[k] = true end
      end
    end
  end
  local script = _v(tbl.script)
  if type(script) == "string" then
    local text = marked(script)
    if text then
      local err = contexts.check_script(text, carriers, programs)
      if err then add(tbl, "script", "script", err) end
    end
    return
  end
  local launch = _v(tbl.launch)
  if type(launch) ~= "table" then return end
  -- the preamble lines run before the command, as one script
  local pre, lines = _v(tbl.preamble), {}
  if type(pre) == "table" then
    for i, el in ipairs(pre) do
      local line = type(el) == "table" and _v(el.line) or el
      lines[i] = type(line) == "string" and (marked(line) or "") or ""
    end
  end
  local err, C = contexts.check_script(table.concat(lines, "\n"), carriers, programs)
  if err then
    local n = tonumber(err:match("^line (%d+)")) or 1
    local el = pre[n]
    local msg = err:gsub("^line %d+: ", "")
    add(type(el) == "table" and el or pre, type(el) == "table" and "line" or n, ("preamble[%d]"):format(n),
      ("preamble[%d]: %s"):format(n, msg))
  end
  -- the launch list: free text in any element, or a variable that carries it
  local tainted = false
  local function look(text)
    if type(text) ~= "string" then return end
    local _, any = marked(text)
    if any then tainted = true end
    for name in text:gmatch("%$%{?([%a_][%w_]*)") do if C[name] then tainted = true end end
  end
  for _, el in ipairs(launch) do
    if type(el) == "table" and type(_v(el.args)) == "table" then
      for _, a in ipairs(el.args) do look(a) end
    else
      look(el)
    end
  end
  local lerr = contexts.check_launch(out.launch or {}, tainted, programs)
  if lerr then add(launch, 1, "launch[1]", lerr) end
end

--- Validate a decoded recipe.
---@param tbl table the recipe as decoded from YAML (yaml.null reads as absent)
---@param positions table|nil `pos` from obleth.yaml decode{positions=true}: pos[tbl][key] = {line, column}
---@return table|nil recipe normalized copy: inputs with coerced defaults, `input_order`,
---  resources.time_limit in minutes, `health` merged over the managed-spec defaults
---@return {code: "invalid", field: string|nil, message: string, errors: {field: string, message: string,
---  line: integer|nil, column: integer|nil}[]}|nil err every error in `errors`, sorted by line (schema.invalid)
function M.validate(tbl, positions)
  local errors, add = _collector(positions)
  if type(tbl) ~= "table" then
    return nil, schema.invalid({ { field = "", message = "a recipe is a mapping (id, name, engine, ...)" } })
  end
  local out = {}
  for k in pairs(tbl) do
    if not TOP_KEYS[k] then
      add(tbl, k, tostring(k), ("unknown key %q"):format(tostring(k)))
    end
  end
  local id = _v(tbl.id)
  if type(id) ~= "string" or not id:match(schema.ID_PATTERN) or #id > schema.ID_MAX then
    add(tbl, "id", "id", "id is required: lower-case letters, digits, '.', '_' and '-' (at most 64)")
  end
  out.id = id
  local name = _v(tbl.name)
  if name ~= nil and type(name) ~= "string" then add(tbl, "name", "name", "name must be a string") end
  out.name = name or id
  local engine = _v(tbl.engine)
  if not schema.ENGINES[engine] then
    add(tbl, "engine", "engine", "engine must be one of " .. table.concat(schema.ENGINE_LIST, ", "))
  end
  out.engine = engine
  local desc = _v(tbl.description)
  if desc ~= nil and type(desc) ~= "string" then add(tbl, "description", "description", "must be a string") end
  out.description = desc

  _validate_inputs(tbl, out, add, positions)

  -- resources
  out.resources = {}
  local res = _v(tbl.resources)
  if res ~= nil and type(res) ~= "table" then
    add(tbl, "resources", "resources", "resources must be a mapping")
  elseif res then
    for k, val in pairs(res) do
      local rule = RESOURCE_KEYS[k] and RES_RULES[k]
      if not rule then
        add(res, k, "resources." .. tostring(k), ("unknown resource %q"):format(tostring(k)))
      elseif _v(val) ~= nil then
        local v, err = _check_rule(rule, val, "resources." .. k)
        if v == nil then add(res, k, "resources." .. k, err) else out.resources[k] = v end
      end
    end
  end
  for k in pairs(TOP_SETTINGS) do
    local val = _v(tbl[k])
    if val ~= nil then
      local v, err = _check_rule(RES_RULES[k], val, k)
      if v == nil then add(tbl, k, k, err) else out[k] = v end
    end
  end

  -- autoscale: the replicas follow the load (obleth.schema.managed.autoscale), instead of `replicas`
  local auto = _v(tbl.autoscale)
  if auto ~= nil and type(auto) ~= "table" then
    add(tbl, "autoscale", "autoscale", "autoscale must be a mapping (" .. table.concat(AUTOSCALE_NAMES, ", ") .. ")")
  elseif auto then
    out.autoscale = {}
    for k, val in pairs(auto) do
      local rule = AUTOSCALE_RULES[k]
      if not rule then
        add(auto, k, "autoscale." .. tostring(k), ("unknown key %q (%s)"):format(tostring(k),
          table.concat(AUTOSCALE_NAMES, ", ")))
      elseif _v(val) ~= nil then
        local v, err = _check_rule(rule, val, "autoscale." .. k)
        if v == nil then add(auto, k, "autoscale." .. k, err) else out.autoscale[k] = v end
      end
    end
    if next(out.autoscale) == nil then out.autoscale = nil end
    if out.autoscale and out.replicas ~= nil then
      add(tbl, "replicas", "replicas", "give replicas (a fixed count) or autoscale, not both")
    end
  end

  -- health
  out.health = {}
  for k, val in pairs(schema.HEALTH_DEFAULTS) do out.health[k] = val end
  local health = _v(tbl.health)
  if health ~= nil and type(health) ~= "table" then
    add(tbl, "health", "health", "health must be a mapping")
  elseif health then
    for k, val in pairs(health) do
      local rule = HEALTH_RULES[k]
      if not rule then
        add(health, k, "health." .. tostring(k), ("unknown key %q (path, interval, timeout, startup_grace, "
          .. "failure_threshold)"):format(tostring(k)))
      elseif _v(val) ~= nil then
        local v, err = _check_rule(rule, val, "health." .. k)
        if v == nil then add(health, k, "health." .. k, err) else out.health[k] = v end
      end
    end
  end

  -- script xor image + launch
  local script, launch, image, pre = _v(tbl.script), _v(tbl.launch), _v(tbl.image), _v(tbl.preamble)
  if script ~= nil and launch ~= nil then
    add(tbl, "launch", "launch", "give either script or launch (with image), not both")
  elseif script == nil and launch == nil then
    add(tbl, "script", "script", "a recipe needs a script, or a launch command (argv list)")
  end
  if script ~= nil then
    if type(script) ~= "string" or script == "" then add(tbl, "script", "script", "script must be a string")
    else out.script = script end
    if image ~= nil then add(tbl, "image", "image", "image goes with launch, not with script") end
    if pre ~= nil then add(tbl, "preamble", "preamble", "preamble goes with launch; a script has its own lines") end
  end
  if launch ~= nil then
    if type(launch) ~= "table" or #launch == 0 or not _is_array(launch) then
      add(tbl, "launch", "launch", "launch must be a non-empty list of arguments (argv), e.g. [vllm, serve, ...]")
    else
      out.launch = {}
      for i, el in ipairs(launch) do
        local f = ("launch[%d]"):format(i)
        if type(el) == "number" then el = _text(el) end
        if type(el) == "string" then
          out.launch[i] = el
        elseif type(el) == "table" and _v(el.when) ~= nil and type(_v(el.args)) == "table" then
          for k in pairs(el) do
            if k ~= "when" and k ~= "args" then add(el, k, f .. "." .. tostring(k), "unknown key (when, args)") end
          end
          local e = _check_when(el.when, out.inputs)
          if e then add(el, "when", f .. ".when", e) end
          local args = {}
          for j, a in ipairs(el.args) do
            if type(a) == "number" then a = _text(a) end
            if type(a) ~= "string" then add(el.args, j, ("%s.args[%d]"):format(f, j), "an argument must be a string")
            else args[j] = a end
          end
          out.launch[i] = { when = el.when, args = args }
        else
          add(launch, i, f, "an argument is a string, or {when: inputs.x, args: [...]}")
        end
      end
      if type(out.launch[1]) ~= "string" then
        add(launch, 1, "launch[1]", "the first argument (the program) must be a plain string")
      end
    end
    if image ~= nil then
      if type(image) ~= "string" then add(tbl, "image", "image", "image must be a string (an Apptainer image path)")
      else out.image = image end
    end
    out.preamble = {}
    if pre ~= nil then
      if type(pre) ~= "table" or not _is_array(pre) then
        add(tbl, "preamble", "preamble", "preamble must be a list of lines")
      else
        for i, el in ipairs(pre) do
          local f = ("preamble[%d]"):format(i)
          if type(el) == "string" then
            if el:find("\n", 1, true) then add(pre, i, f, "a preamble entry is one line")
            else out.preamble[i] = el end
          elseif type(el) == "table" and type(_v(el.line)) == "string" and _v(el.when) ~= nil then
            local e = _check_when(el.when, out.inputs)
            if e then add(el, "when", f .. ".when", e) end
            if el.line:find("\n", 1, true) then add(el, "line", f .. ".line", "a preamble entry is one line") end
            out.preamble[i] = { line = el.line, when = el.when }
          else
            add(pre, i, f, "a preamble entry is a line, or {when: defaults.modules, line: ...}")
          end
        end
      end
    end
  end

  -- environment
  out.environment = {}
  local env = _v(tbl.environment)
  if env ~= nil then
    if type(env) ~= "table" or (next(env) ~= nil and _is_array(env)) then
      add(tbl, "environment", "environment", "environment must be a mapping NAME: value")
    else
      for k, val in pairs(env) do
        local f = "environment." .. tostring(k)
        if not shell.is_name(k) then
          add(env, k, f, "an environment name is letters, digits and _, not starting with a digit")
        elseif type(val) == "number" or type(val) == "boolean" then
          out.environment[k] = _text(val)
        elseif type(val) ~= "string" then
          add(env, k, f, "an environment value must be a string")
        else
          out.environment[k] = val
        end
      end
    end
  end

  -- every template: references must exist, contexts must be safe
  _each_template(tbl, function(text, field, t, key, kind)
    if text:find("\0", 1, true) then add(t, key, field, "contains a NUL byte"); return end
    local parts, err
    if kind == "argv" then
      parts, err = _parse_argv_element(text)
    else
      parts, err = templates.parse_template(text)
    end
    if not parts then add(t, key, field, err); return end
    for _, p in ipairs(parts) do
      if p.kind == "ref" then
        local e = _check_ref(p, out.inputs)
        if e then add(t, key, field, e) end
      end
    end
    if kind == "script" or kind == "line" then
      local e = _check_script_context(parts)
      if e then add(t, key, field, e) end
    end
  end)

  -- where free text may stand, for the templates no check above has refused (one error each)
  local refused = {}
  for _, e in ipairs(errors) do refused[(e.field or ""):match("^[%a_]+")] = true end
  _check_text_contexts(tbl, out, add, refused)

  -- rules across inputs: one_of = [[a, b], ...] (at least one of each group is set),
  -- requires = {a = [b, ...]} (when a is set, so is each b)
  local function known_inputs(list, field)
    if type(list) ~= "table" or #list == 0 then
      add(tbl, field:match("^[^.]+"), field, field .. " must be a list of input names"); return nil
    end
    for i, n in ipairs(list) do
      if type(n) ~= "string" or not (out.inputs or {})[n] then
        add(tbl, field:match("^[^.]+"), ("%s[%d]"):format(field, i), ("%s[%d]: %q is not an input of this recipe")
          :format(field, i, tostring(n)))
        return nil
      end
    end
    return list
  end
  if tbl.one_of ~= nil then
    out.one_of = {}
    if type(tbl.one_of) ~= "table" then
      add(tbl, "one_of", "one_of", "one_of must be a list of lists of input names")
    else
      for i, group in ipairs(tbl.one_of) do
        local g = known_inputs(group, ("one_of[%d]"):format(i))
        if g then out.one_of[#out.one_of + 1] = g end
      end
    end
  end
  if tbl.requires ~= nil then
    out.requires = {}
    if type(tbl.requires) ~= "table" then
      add(tbl, "requires", "requires", "requires must map an input name to the inputs it needs")
    else
      for input, list in pairs(tbl.requires) do
        if not (out.inputs or {})[input] then
          add(tbl, "requires", "requires." .. tostring(input), ("requires: %q is not an input of this recipe")
            :format(tostring(input)))
        else
          local l = known_inputs(list, "requires." .. input)
          if l then out.requires[input] = l end
        end
      end
    end
  end

  if #errors > 0 then
    table.sort(errors, function(a, b)
      if (a.line or 0) ~= (b.line or 0) then return (a.line or 0) < (b.line or 0) end
      return a.field < b.field
    end)
    return nil, schema.invalid(errors)
  end
  return out
end

-- named exports the other parts of obleth.recipe use
M.RES_RULES = RES_RULES
M.HEALTH_RULES = HEALTH_RULES
M.AUTOSCALE_RULES = AUTOSCALE_RULES
M.check_rule = _check_rule
M.check_typed_value = _check_typed_value

return M
