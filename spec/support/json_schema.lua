--- A small JSON Schema checker for the specs (the OpenAPI 3.0 subset obleth's document uses): type
-- (integer = a whole number), nullable, enum, minimum, maximum, maxLength, pattern, items, maxItems,
-- minItems, properties, additionalProperties, required, oneOf, allOf, $ref to #/components/schemas/.
-- readOnly and the x- extensions are not checked (a request may send read-only fields back), but for
-- x-key-pattern (obleth's: the pattern every key of a map must match; OpenAPI 3.0 has no propertyNames).
-- Patterns are ECMA regular expressions of the plain kind (anchors, classes, escapes, * + ? *?, a
-- top-level |); anything else raises, so a spec never passes on a pattern it did not read.
local cjson = require "cjson"

local M = {}

local function _alternatives(re)
  local alts, cur, in_class, i = {}, {}, false, 1
  while i <= #re do
    local c = re:sub(i, i)
    if c == "\\" then cur[#cur + 1] = re:sub(i, i + 1); i = i + 2
    else
      if c == "[" then in_class = true elseif c == "]" then in_class = false end
      if c == "|" and not in_class then alts[#alts + 1] = table.concat(cur); cur = {}
      else cur[#cur + 1] = c end
      i = i + 1
    end
  end
  alts[#alts + 1] = table.concat(cur)
  return alts
end

local ESC = { s = "%s", d = "%d", r = "\r", n = "\n", t = "\t", f = "\f", v = "\v" }

--- An ECMA regular expression (the plain kind) as a list of Lua patterns, any of which matches.
function M.lua_patterns(re)
  local out = {}
  for _, alt in ipairs(_alternatives(re)) do
    local p, i, in_class = {}, 1, false
    while i <= #alt do
      local c = alt:sub(i, i)
      if c == "\\" then
        local n = alt:sub(i + 1, i + 1)
        if n == "u" then
          local hex = alt:sub(i + 2, i + 5)
          assert(hex:match("^%x%x%x%x$") and tonumber(hex, 16) < 128, "json_schema: unsupported escape \\u" .. hex)
          local ch = string.char(tonumber(hex, 16))
          p[#p + 1] = ch:match("%w") and ch or ("%" .. ch)
          if ch == "\0" then p[#p] = "%z" end
          i = i + 6
        else
          if ESC[n] then p[#p + 1] = ESC[n]
          elseif n:match("%p") then p[#p + 1] = "%" .. n
          else error("json_schema: unsupported escape \\" .. n) end
          i = i + 2
        end
      else
        if c == "[" and not in_class then in_class = true
        elseif c == "]" and in_class then in_class = false
        elseif c == "%" then c = "%%"
        elseif not in_class then
          if c == "*" and alt:sub(i + 1, i + 1) == "?" then c = "-"; i = i + 1
          elseif c == "(" or c == ")" or c == "{" or c == "}" then error("json_schema: unsupported " .. c .. " in " .. re)
          end
        end
        p[#p + 1] = c
        i = i + 1
      end
    end
    out[#out + 1] = table.concat(p)
  end
  return out
end

local function _is_array(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  if mt and mt.__name == "obleth.json.array" then return true end
  local n = 0
  for k in pairs(v) do
    if math.type(k) ~= "integer" then return false end
    n = n + 1
  end
  return n == #v and (n > 0)
end

local function _type_ok(t, v)
  if t == "object" then return type(v) == "table" and not _is_array(v) and (next(v) == nil or type(next(v)) == "string") end
  if t == "array" then return _is_array(v) or (type(v) == "table" and next(v) == nil) end
  if t == "string" then return type(v) == "string" end
  if t == "boolean" then return type(v) == "boolean" end
  if t == "number" then return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end
  if t == "integer" then return type(v) == "number" and v == math.floor(v) and v ~= math.huge and v ~= -math.huge end
  error("json_schema: unknown type " .. tostring(t))
end

--- Check a decoded JSON value against a schema.
---@param doc table the OpenAPI document ($ref targets) or nil
---@return boolean ok, string|nil why (the path and the rule)
function M.check(s, v, doc, path)
  path = path or "$"
  if s["$ref"] then
    local name = s["$ref"]:match("^#/components/schemas/(.+)$")
    return M.check(assert(doc.components.schemas[name], "json_schema: no schema " .. tostring(name)), v, doc, path)
  end
  if v == cjson.null then
    if s.nullable or (s.type == nil and not s.oneOf and not s.allOf) then return true end
    return false, path .. ": null is not allowed"
  end
  if s.allOf then
    for _, sub in ipairs(s.allOf) do
      local ok, why = M.check(sub, v, doc, path)
      if not ok then return false, why end
    end
  end
  if s.oneOf then
    local n, whys = 0, {}
    for _, sub in ipairs(s.oneOf) do
      local ok, why = M.check(sub, v, doc, path)
      if ok then n = n + 1 else whys[#whys + 1] = why end
    end
    if n ~= 1 then return false, path .. ": matches " .. n .. " of oneOf (" .. table.concat(whys, "; ") .. ")" end
  end
  if s.type and not _type_ok(s.type, v) then return false, path .. ": not " .. s.type end
  if s.enum then
    local found = false
    for _, e in ipairs(s.enum) do if e == v then found = true end end
    if not found then return false, path .. ": not in enum" end
  end
  if type(v) == "number" then
    if s.minimum and v < s.minimum then return false, path .. ": below minimum " .. s.minimum end
    if s.maximum and v > s.maximum then return false, path .. ": above maximum " .. s.maximum end
  end
  if type(v) == "string" then
    if s.maxLength and utf8.len(v) and utf8.len(v) > s.maxLength then return false, path .. ": longer than maxLength" end
    if s.minLength and (utf8.len(v) or #v) < s.minLength then return false, path .. ": shorter than minLength" end
    if s.pattern then
      local any = false
      for _, p in ipairs(M.lua_patterns(s.pattern)) do if v:find(p) then any = true break end end
      if not any then return false, path .. ": does not match " .. s.pattern end
    end
  end
  if type(v) == "table" and _is_array(v) then
    if s.maxItems and #v > s.maxItems then return false, path .. ": more than maxItems" end
    if s.minItems and #v < s.minItems then return false, path .. ": fewer than minItems" end
    for i, x in ipairs(v) do
      if s.items then
        local ok, why = M.check(s.items, x, doc, ("%s[%d]"):format(path, i - 1))
        if not ok then return false, why end
      end
    end
  elseif type(v) == "table" then
    for _, k in ipairs(s.required or {}) do
      if v[k] == nil then return false, path .. "." .. k .. ": required" end
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      if s["x-key-pattern"] then
        local any = false
        for _, p in ipairs(M.lua_patterns(s["x-key-pattern"])) do if k:find(p) then any = true break end end
        if not any then return false, path .. "." .. k .. ": the key does not match " .. s["x-key-pattern"] end
      end
      local sub = s.properties and s.properties[k]
      if sub then
        local ok, why = M.check(sub, v[k], doc, path .. "." .. k)
        if not ok then return false, why end
      elseif s.additionalProperties == false then
        return false, path .. "." .. k .. ": not allowed (additionalProperties)"
      elseif type(s.additionalProperties) == "table" then
        local ok, why = M.check(s.additionalProperties, v[k], doc, path .. "." .. k)
        if not ok then return false, why end
      end
    end
  end
  return true
end

return M
