--- obleth.schema — the wire objects, declared once as data, and what is read from them: the validator
-- (`validate`), the OpenAPI schemas (`openapi`), the form's hints (`hint`: min, max, default, unit) and
-- defaults (`defaults`).
--
-- A schema is a table (`lua/obleth/schema/<object>.lua` hold them):
--   {type = "integer"|"number", min, max, unit = "minutes"|"seconds"|"MiB"|nil, default}
--   {type = "boolean", default}
--   {type = "string", max_len (4096), pattern (Lua, the whole string), rule (the pattern in words),
--    multiline, enum = {...}}
--   {type = "minutes", min, max}  a Slurm time limit: integer minutes, or "HH:MM:SS", "D-HH", ...
--   {type = "array", items = <schema>, max_items, min_items}
--   {type = "map", values = <schema>, key_pattern, key_rule, integer_keys = true (keys are ids: the
--    value has integer keys), keep_null = true (a null value is kept: cjson.null)}  an object of free keys
--   {type = "object", fields = {{"name", <schema>}, ...}, required = {"name", ...}, read_only = {"name", ...},
--    open = true (any keys, unchecked),
--    keep_null = true (a field sent as null is kept as cjson.null: "set to null", a report's way),
--    no_defaults = true (only the fields given: a partial object over stored ones)}
--   {type = "any"}  anything (a key whose contents another part checks)
--   {type = "one_of", of = {<schema>, ...}}  the first whose JSON type the value has (a string or an
--    integer, say); a value of none is checked against the last (its error names what it wanted)
-- and on any of them: `nullable = true` (null gives the default, or nothing; a blank string is null),
-- `format = "<name>"` (a check that cannot be data, given by the caller of `validate` in opts.formats),
-- `description`, `scalars = true` (a string that also takes a number or boolean, as its text),
-- `code = "<code>"` (the error code of a bad or missing value, "invalid" when not given), `shape` (what
-- the value looks like, in words: an object's fields, said when it is not an object, or when a required
-- value is missing).
-- Rules between fields (exactly one of two, one below another) are the caller's: they are not data.
local check = require "obleth.schema.check"
local timefmt = require "obleth.util.timefmt"

local M = {}

local NULL = check.NULL

local _copy = require("obleth.util.tables").deep_copy

--- The default value of a schema: its `default`, or for an object the table of its fields' defaults.
---@param s table a schema
---@return any|nil value a fresh copy
function M.defaults(s)
  if s.default ~= nil then return _copy(s.default) end
  if s.type == "object" and s.fields then
    local out, any = {}, false
    for _, f in ipairs(s.fields) do
      local d = M.defaults(f[2])
      if d ~= nil then out[f[1]] = d; any = true end
    end
    if any then return out end
  end
  return nil
end

--- The schema of a field, by its dotted path ("health.interval").
---@return table|nil
function M.field(s, path)
  for name in path:gmatch("[^.]+") do
    local found
    for _, f in ipairs(s.fields or {}) do
      if f[1] == name then found = f[2] break end
    end
    if not found then return nil end
    s = found
  end
  return s
end

--- What the form shows beside a field: {min, max, default, unit} (each may be nil).
---@param s table the object's schema
---@param path string dotted field path
---@return table|nil
function M.hint(s, path)
  local f = M.field(s, path)
  if not f then return nil end
  return { min = f.min, max = f.max, default = M.defaults(f), unit = f.unit or (f.type == "minutes" and "minutes" or nil) }
end

-- the checks, one per type
local TYPES = {}

function TYPES.integer(s, v, field) return check.int(v, field, s.min, s.max) end
function TYPES.number(s, v, field) return check.num(v, field, s.min, s.max) end
function TYPES.boolean(_, v, field) return check.bool(v, field) end
function TYPES.any(_, v) return v end

function TYPES.string(s, v, field)
  if s.scalars and (type(v) == "number" or type(v) == "boolean") then v = tostring(v) end
  if s.enum then
    for _, e in ipairs(s.enum) do if v == e then return v end end
    return check.err(field, "must be %s", s.enum_text or ("one of " .. table.concat(s.enum, ", ")))
  end
  return check.str(v, field, { max = s.max_len, pattern = s.pattern, rule = s.rule, multiline = s.multiline,
    secret = s.secret })
end

function TYPES.minutes(s, v, field)
  if type(v) == "number" then return check.int(v, field, s.min, s.max) end
  if type(v) ~= "string" then
    return check.err(field, "must be minutes or a Slurm time (e.g. 1:00:00), got %s", check.tname(v))
  end
  local m, e = timefmt.parse_minutes(v)
  if not m then return nil, { code = "invalid", field = field, message = field .. ": " .. e } end
  if m < s.min then return check.err(field, "must be at least %d minute%s", s.min, s.min == 1 and "" or "s") end
  if m > s.max then return check.err(field, "must be at most %d minutes (a year)", s.max) end
  return m
end

function TYPES.array(s, v, field, opts)
  if not check.is_array(v) then return check.err(field, "must be an array of %ss", s.items.type) end
  if s.max_items and #v > s.max_items then return check.err(field, "has more than %d items", s.max_items) end
  if s.min_items and #v < s.min_items then return check.err(field, "has fewer than %d items", s.min_items) end
  local out = {}
  for i, x in ipairs(v) do
    local r, e = M.validate(s.items, x, ("%s[%d]"):format(field, i - 1), opts)
    if e then return nil, e end
    out[i] = r
  end
  return out
end

function TYPES.map(s, v, field, opts)
  if not check.is_object(v) then return check.err(field, "must be an object of %s", s.shape or "key: value pairs") end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    local key = k
    if s.integer_keys then key = k:match("^%d+$") and math.tointeger(tonumber(k)) end
    if (s.key_pattern and not k:match(s.key_pattern)) or #k > (s.key_max or 256) or not key then
      return check.err(field .. "." .. k, "is not a valid %s", s.key_rule or "key")
    end
    local x = v[k]
    if s.keep_null and x == NULL then out[key] = NULL
    else
      local r, e = M.validate(s.values, x, field .. "." .. k, opts)
      if e then return nil, e end
      out[key] = r
    end
  end
  return out
end

-- the JSON type a schema takes: a value of another is not for it (one_of)
local KIND = { integer = "number", number = "number", boolean = "boolean", string = "string", minutes = "string",
  array = "array", map = "object", object = "object" }

local function _kind(v)
  if type(v) == "number" or type(v) == "boolean" or type(v) == "string" then return type(v) end
  if check.is_object(v) then return "object" end
  if check.is_array(v) then return "array" end
  return nil
end

function TYPES.one_of(s, v, field, opts)
  local k = _kind(v)
  for _, alt in ipairs(s.of) do
    if KIND[alt.type] == k then return M.validate(alt, v, field, opts) end
  end
  return M.validate(s.of[#s.of], v, field, opts)
end

function TYPES.object(s, v, field, opts)
  if not check.is_object(v) then
    if field == nil then return nil, { code = "invalid", message = "the body must be a JSON object" } end
    return check.err(field, "must be an object%s", s.shape and (" " .. s.shape) or "")
  end
  if s.open then return v end
  local prefix = field and (field .. ".") or ""
  local known = {}
  for _, f in ipairs(s.fields) do known[f[1]] = f[2] end
  for _, k in ipairs(s.read_only or {}) do known[k] = known[k] or true end
  local ok, err = check.unknown(v, known, prefix)
  if not ok then return nil, err end
  local out = not s.no_defaults and M.defaults(s) or {}
  for _, name in ipairs(s.required or {}) do
    if check.null(v[name]) then
      local fs = type(known[name]) == "table" and known[name] or {}
      local _, e = check.err(prefix .. name, "is required%s", fs.shape and (" (" .. fs.shape .. ")") or "")
      e.code = fs.code or e.code
      return nil, e
    end
  end
  for _, f in ipairs(s.fields) do
    local x = v[f[1]]
    if s.keep_null and x == NULL then out[f[1]] = NULL
    elseif x ~= nil then
      local r, e = M.validate(f[2], x, prefix .. f[1], opts)
      if e then return nil, e end
      out[f[1]] = r
    end
  end
  return out
end

--- Check a decoded JSON value against a schema.
---@param s table the schema
---@param v any the value (cjson's: numbers as floats, null as cjson.null)
---@param field string|nil its name in errors (nil: the whole body)
---@param opts {formats: table<string, fun(v: any, field: string): any, table|nil>}|nil
---@return any|nil value normalized, defaults filled in (nil for a null nullable field without one)
---@return table|nil err {code = "invalid", field, message} (docs/errors.md)
function M.validate(s, v, field, opts)
  local blank = s.type == "string" and type(v) == "string" and v:match("^%s*$")
  if s.nullable and (v == nil or v == NULL or blank) then
    return M.defaults(s)
  end
  local t = TYPES[s.type]
  if not t then error("obleth.schema: unknown type " .. tostring(s.type), 2) end
  local r, e = t(s, v, field, opts)
  if e and s.code and e.code == "invalid" then e.code = s.code end
  if e or r == nil then return nil, e end
  if s.format then
    local fn = opts and opts.formats and opts.formats[s.format]
    if not fn then error("obleth.schema: no check for format " .. s.format, 2) end
    return fn(r, field)
  end
  return r
end

--- The names of a schema's secret fields (`secret = true`: the value is a credential) and of its maps
--- whose every value may be one (`secret_values = true`: environment variables), at any depth: what
--- the audit trail masks (obleth.api.audit) and a reader who may not change them is not shown.
---@param s table the schema
---@param out {fields: table<string, true>, maps: table<string, true>}|nil added to
---@return {fields: table<string, true>, maps: table<string, true>}
function M.secrets(s, out)
  out = out or { fields = {}, maps = {} }
  for _, f in ipairs(s.fields or {}) do
    local name, fs = f[1], f[2]
    if fs.secret then out.fields[name] = true end
    if fs.secret_values then out.maps[name] = true end
    M.secrets(fs, out)
  end
  if s.items then M.secrets(s.items, out) end
  if s.values then M.secrets(s.values, out) end
  return out
end

--- Mask the secrets `sec` names (M.secrets) in `t`, in place and at any depth: a secret field's
--- non-empty string, and every value of a secret map (an environment's). What a reader who may not
--- change a thing is shown of it (obleth.api.managed for a viewer). Tables deeper than 16 levels are
--- left as they are (no stored document nests that deep).
---@param t table a decoded document (changed in place)
---@param sec {fields: table<string, true>, maps: table<string, true>}
---@param mask string what a secret reads as
---@return table t
function M.mask_secrets(t, sec, mask, _depth)
  _depth = _depth or 0
  if type(t) ~= "table" or _depth > 16 then return t end
  for k, v in pairs(t) do
    if sec.fields[k] and type(v) == "string" and v ~= "" then t[k] = mask
    elseif sec.maps[k] and type(v) == "table" then
      for name, x in pairs(v) do if type(x) ~= "table" and type(x) ~= "userdata" then v[name] = mask end end
    elseif type(v) == "table" then M.mask_secrets(v, sec, mask, _depth + 1) end
  end
  return t
end

---------------------------------------------------------------------------
-- OpenAPI
---------------------------------------------------------------------------

-- Lua character class letters and what they mean in a regular expression's class
local CLASS = { w = "A-Za-z0-9", d = "0-9", a = "A-Za-z", x = "0-9A-Fa-f", s = " \\t\\n\\r\\f\\v", l = "a-z",
  u = "A-Z" }

--- A Lua pattern (of the plain kind schemas use: anchors, classes, %-escapes, * + ? -) as an ECMA
--- regular expression for OpenAPI.
---@param p string
---@return string
function M.regex(p)
  local out, i, in_class = {}, 1, false
  while i <= #p do
    local c = p:sub(i, i)
    if c == "%" then
      local n = p:sub(i + 1, i + 1)
      if CLASS[n] then
        out[#out + 1] = in_class and CLASS[n] or ("[" .. CLASS[n] .. "]")
      elseif CLASS[n:lower()] and not in_class then -- %S, %W...: the complement
        out[#out + 1] = "[^" .. CLASS[n:lower()] .. "]"
      elseif n:match("%p") then
        out[#out + 1] = "\\" .. n
      else
        error("obleth.schema.regex: cannot translate %" .. n, 2)
      end
      i = i + 2
    else
      if c == "[" and not in_class then in_class = true
      elseif c == "]" and in_class then in_class = false
      elseif c == "-" and not in_class then c = "*?" -- Lua's lazy star
      end
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

local ONE_LINE = "^[^\\r\\n\\u0000]*$"

--- The OpenAPI 3.0 schema of a schema.
---@param s table
---@return table
function M.openapi(s)
  local o
  if s.type == "integer" or s.type == "number" then
    o = { type = s.type, minimum = s.min, maximum = s.max }
  elseif s.type == "boolean" then
    o = { type = "boolean" }
  elseif s.type == "string" then
    if s.enum then
      o = { type = "string", enum = s.enum }
    else
      o = { type = "string", maxLength = s.max_len or 4096 }
      local re = s.pattern and M.regex(s.pattern) or (not s.multiline and ONE_LINE) or nil
      if re and s.nullable then re = "^\\s*$|" .. re end -- blank is null
      o.pattern = re
    end
    if s.scalars then o = { oneOf = { o, { type = "number" }, { type = "boolean" } } } end
  elseif s.type == "minutes" then
    o = { oneOf = { { type = "integer", minimum = s.min, maximum = s.max },
      { type = "string", pattern = M.regex("^%s*[0-9:%-]+%s*$"),
        description = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS" } } }
  elseif s.type == "array" then
    o = { type = "array", items = M.openapi(s.items), maxItems = s.max_items, minItems = s.min_items }
  elseif s.type == "map" then
    o = { type = "object", additionalProperties = M.openapi(s.values) }
    if s.keep_null then o.additionalProperties.nullable = true end
    if s.key_pattern then o["x-key-pattern"] = M.regex(s.key_pattern) end
  elseif s.type == "any" then
    o = {}
  elseif s.type == "one_of" then
    local alts = {}
    for i, alt in ipairs(s.of) do alts[i] = M.openapi(alt) end
    o = { oneOf = alts }
  elseif s.type == "object" then
    o = { type = "object" }
    if not s.open then
      o.additionalProperties = false
      o.properties = {}
      local required = {}
      for _, k in ipairs(s.required or {}) do required[k] = true end
      for _, f in ipairs(s.fields) do
        o.properties[f[1]] = M.openapi(f[2])
        -- a required field is never null, kept or not
        if s.keep_null and not required[f[1]] then o.properties[f[1]].nullable = true end
      end
      for _, k in ipairs(s.read_only or {}) do
        o.properties[k] = o.properties[k] or { readOnly = true, description = "read-only: sent back, ignored" }
      end
      if s.required and #s.required > 0 then o.required = s.required end
    end
  else
    error("obleth.schema.openapi: unknown type " .. tostring(s.type), 2)
  end
  if s.nullable then o.nullable = true end
  local d = s.type ~= "object" and M.defaults(s) or nil
  if d ~= nil and type(d) ~= "table" then o.default = d end
  if s.unit then o["x-unit"] = s.unit end
  if s.description then o.description = s.description end
  return o
end

return M
