--- obleth.recipe.schema — what a recipe may contain (engines, input types, the keys a template
-- may name, the managed-spec defaults) and the small value helpers every part of obleth.recipe uses.

local wire = require "obleth.schema"
local managed = require "obleth.schema.managed"
local model = require "obleth.schema.model"
local saved = require "obleth.schema.recipe"

local M = {}

--- Limits that keep an input's `pattern` check cheap (Lua patterns backtrack):
--- repetition operators per pattern, and the longest value checked against one.
M.MAX_PATTERN_REPEATS = 2
M.MAX_PATTERN_VALUE = 4096

--- The repetition operators (* + - ?) of a Lua pattern, outside sets and escapes.
---@param p string
---@return integer
function M.pattern_repeats(p)
  local n, i, len = 0, 1, #p
  while i <= len do
    local c = p:sub(i, i)
    if c == "%" then
      i = i + 2
    elseif c == "[" then
      i = i + 1
      if p:sub(i, i) == "^" then i = i + 1 end
      if p:sub(i, i) == "]" then i = i + 1 end -- a literal ] first in the set
      while i <= len and p:sub(i, i) ~= "]" do
        i = i + (p:sub(i, i) == "%" and 2 or 1)
      end
      i = i + 1
    else
      if c == "*" or c == "+" or c == "?" or (c == "-" and i > 1) then n = n + 1 end
      i = i + 1
    end
  end
  return n
end

--- The engines, the ids and the top-level keys: obleth.schema.recipe's (the API's saved recipe reads them
--- too).
M.ENGINE_LIST = saved.ENGINES
M.ENGINES = {}
for _, e in ipairs(saved.ENGINES) do M.ENGINES[e] = true end
--- A recipe's id (a library file's, a recipe saved at launch): a lower-case letter or digit,
--- then lower-case letters, digits, '.', '_', '-'; at most ID_MAX characters.
M.ID_PATTERN = saved.ID_PATTERN

--- The API model name (what clients send, and the served model name an engine is given): the one rule
--- for both the Management API's models and the launch form (obleth.schema.model).
M.API_NAME_PATTERN = model.name.pattern
M.API_NAME_MAX = model.name.max_len
M.API_NAME_RULE = model.name.rule
M.ID_MAX = saved.ID_MAX
--- What an id a recipe is looked up by (in a URL, a query, a saved document) may hold: letters of
--- either case, digits, '.', '_', '-'; at most ID_LOOKUP_MAX characters.
M.ID_LOOKUP_PATTERN = saved.ID_LOOKUP_PATTERN
M.ID_LOOKUP_MAX = saved.ID_LOOKUP_MAX
M.INPUT_TYPES = { string = true, integer = true, number = true, boolean = true, enum = true, path = true }
M.PROVENANCE = { "builtin", "recipe", "cluster_default", "learned", "user" }

--- Cluster-default keys a template may name (`{{ defaults.<key> }}`); keys
-- starting with `x_` are free for site-specific values. The Hugging Face
-- token is deliberately absent: secrets never go into a rendered script.
M.DEFAULT_KEYS = {
  model_cache_dir = true, image_dir = true, log_dir = true, modules = true,
  partition = true, account = true, qos = true,
}
M.MODEL_KEYS = { api_name = true, id = true }
--- Settings a recipe gives under `resources:`.
M.RESOURCE_KEYS = {
  partition = true, nodes = true, gpus_per_node = true, gpu_type = true, cpus_per_node = true,
  memory_per_node = true, time_limit = true, constraint = true, exclude = true, account = true, qos = true,
}
--- Settings a recipe gives at its top level (each also has a rule in validate's RES_RULES).
M.TOP_SETTINGS = { replicas = true, rollover_margin = true, stdout = true, stderr = true }
M.FILTERS = { first_shard = true, in_image_dir = true }

--- Managed-spec health defaults (docs/managed-spec.md).
M.HEALTH_DEFAULTS = wire.defaults(managed.health)
--- Managed-spec defaults for settings neither the recipe nor the cluster gives.
M.SPEC_DEFAULTS = {}
for _, k in ipairs({ "time_limit", "nodes", "gpus_per_node", "cpus_per_node", "memory_per_node", "replicas" }) do
  M.SPEC_DEFAULTS[k] = wire.defaults(wire.field(managed.spec, k))
end

local TOP_KEYS = saved.KEYS
local INPUT_KEYS = {
  type = true, default = true, required = true, description = true, pattern = true, min = true,
  max = true, values = true, label = true,
}


---------------------------------------------------------------------------
-- small helpers
---------------------------------------------------------------------------

-- yaml.null / cjson.null (lightuserdata) read as nil.
local _v = require("obleth.util.json").nonnull

local function _is_int(x)
  return math.type(x) == "integer" or (type(x) == "number" and x == math.floor(x) and x > -2 ^ 53 and x < 2 ^ 53)
end

local function _int(x)
  return math.tointeger(x) or x
end

local function _is_array(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function _sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

--- Text of a scalar value as it reaches a command line.
local function _text(v)
  if type(v) == "number" then
    if math.type(v) == "integer" or _is_int(v) then return tostring(_int(v)) end
    return ("%.14g"):format(v)
  end
  return tostring(v)
end

-- named exports the other parts of obleth.recipe use (not the public face, obleth.recipe)
M.TOP_KEYS = TOP_KEYS
M.INPUT_KEYS = INPUT_KEYS
M.value = _v -- a decoded value, nil for a JSON / YAML null
M.is_int = _is_int
M.int = _int
M.is_array = _is_array
M.sorted_keys = _sorted_keys
M.text = _text

--- A recipe's field errors in the one error shape (docs/errors.md): code "invalid", the first
--- error's field and message, and `errors`, every one ({field, message, line?, column?}).
---@param errors {field: string, message: string, line: integer|nil, column: integer|nil}[] at least one
---@return {code: "invalid", field: string|nil, message: string, errors: table[]}
function M.invalid(errors)
  local first = errors[1] or {}
  return { code = "invalid", field = first.field ~= "" and first.field or nil, message = first.message,
    errors = errors }
end

return M
