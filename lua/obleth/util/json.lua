--- JSON for the Management API: lua-cjson for decoding, and an encoder that
-- keeps empty arrays as `[]` (lua-cjson 2.1.0 has no array marker) and
-- prints integral numbers as integers (lua-cjson decodes every number as a float).
--
-- Errors: a leaf parser (docs/errors.md): `decode` return nil, "message" for bad input, and
-- the caller wraps it into {code, message, field}. spec/unit/error_shape_spec.lua holds this list.
local cjson = require "cjson"

local M = {}

--- The JSON null value (what cjson.decode returns for `null`).
M.null = cjson.null

local ARRAY = require("obleth.util.tables").ARRAY

--- Mark t (default a new table) as a JSON array, so that it encodes as `[]` when empty.
---@param t table|nil
---@return table t
function M.array(t)
  return setmetatable(t or {}, ARRAY)
end

local RAW = { __name = "obleth.json.raw" }

--- Wrap JSON text so that encode writes it as is (it must be valid JSON).
---@param text string
---@return table
function M.raw(text)
  return setmetatable({ text }, RAW)
end

--- True when v is JSON null or nil.
function M.is_null(v)
  return v == nil or v == cjson.null
end

--- v itself, or nil when v is a decoded null: lua-cjson's and obleth.yaml's nulls are light
--- userdata, and decoded data holds no other userdata. The one reader of a value that may be
--- null (M.plain does the same for a whole table).
---@param v any
---@return any|nil
function M.nonnull(v)
  if type(v) == "userdata" then return nil end
  return v
end

--- A decoded JSON value as plain Lua data: JSON null becomes nil and
--- integral numbers become integers (lua-cjson decodes every number as a
--- float, and its null is a truthy userdata). Tables are copied.
---@param v any
---@return any
function M.plain(v)
  if v == cjson.null then return nil end
  local t = type(v)
  if t == "number" then return math.tointeger(v) or v end
  if t ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.plain(x) end
  return out
end

--- Decode text. Returns value or nil, message naming where ("at character N").
---@param text string
---@return any|nil value, string|nil err
-- Request bodies: a separate cjson instance that refuses nesting deeper
-- than 32 (a stored value the encoder could not write back would break
-- every later read of it).
-- Strict (RFC 8259): NaN, Infinity and hex numbers are refused, the text must be
-- valid UTF-8, integral numbers come back as integers (8080, not 8080.0), and arrays
-- carry the array mark (M.array), so an empty `[]` is never taken for an object.
M.MAX_DEPTH = 32
local _decoder = cjson.new()
_decoder.decode_max_depth(M.MAX_DEPTH)
_decoder.decode_invalid_numbers(false)

-- lua-cjson decodes [] and {} alike: each empty array outside a string is written as
-- [EMPTY] before decoding and turned back into a marked empty array after.
local EMPTY = "\\u0000obleth.empty-array"
local EMPTY_DECODED = "\0obleth.empty-array"

local function _mark_empty_arrays(text)
  if not text:find("%[%s*%]") then return text end
  local out, i, n, last = {}, 1, #text, 1
  while i <= n do
    local c = text:byte(i)
    if c == 34 then -- a string: skip to its closing quote
      i = i + 1
      while i <= n do
        local d = text:byte(i)
        if d == 92 then i = i + 2
        elseif d == 34 then break
        else i = i + 1 end
      end
      i = i + 1
    elseif c == 91 then -- [
      local j = text:find("[^ \t\r\n]", i + 1)
      if j and text:byte(j) == 93 then
        out[#out + 1] = text:sub(last, i)
        out[#out + 1] = '"' .. EMPTY .. '"'
        last = j
        i = j + 1
      else
        i = i + 1
      end
    else
      i = i + 1
    end
  end
  out[#out + 1] = text:sub(last)
  return table.concat(out)
end

local function _finish(v)
  local t = type(v)
  if t == "number" then return math.tointeger(v) or v end
  if t ~= "table" then return v end
  if v[1] == EMPTY_DECODED and v[2] == nil then return M.array() end
  local n = #v
  if n > 0 then
    for i = 1, n do v[i] = _finish(v[i]) end
    return M.array(v)
  end
  for k, x in pairs(v) do v[k] = _finish(x) end
  return v
end

-- obleth.jsonscan (host/jsonscan.c) checks the whole text first, once for every JSON body obleth
-- reads (the Management API's here, the router's through jsonscan.fields): a key given twice in one
-- object or a string that is not UTF-8 is refused, naming the key. Plain lua5.4 (unit specs) has
-- no host module: there only cjson's checks apply.
local has_jsonscan, jsonscan = pcall(require, "obleth.jsonscan")

--- Decode a request body. Returns value, or nil, message ("... at character N"), key (the
--- name given twice, printable, when that is why).
---@param text string
---@return any|nil value
---@return string|nil err
---@return string|nil key
function M.decode(text)
  local bad = select(2, utf8.len(text))
  if bad then return nil, ("not valid UTF-8 at character %d"):format(bad) end
  if has_jsonscan then
    local ok, err, kind, key = jsonscan.check(text)
    if not ok and (kind == "duplicate_key" or kind == "utf8") then
      return nil, (err:gsub("%(at byte (%d+)%)$", "at character %1")), key
    end
  end
  -- a raw NUL is never JSON (inside a string it must be escaped), and lua-cjson stops reading at it
  local nul = text:find("\0", 1, true)
  if nul then return nil, ("a NUL byte at character %d"):format(nul) end
  local ok, v = pcall(_decoder.decode, _mark_empty_arrays(text))
  if not ok then
    local msg = tostring(v):gsub("^.-:%d+: ", "")
    return nil, msg
  end
  return _finish(v)
end

--- True when v is a table decoded from a JSON array (or made by M.array).
---@param v any
---@return boolean
function M.is_array(v)
  return type(v) == "table" and getmetatable(v) == ARRAY
end

local function _is_seq(t)
  local n = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = n + 1
  end
  for i = 1, n do
    if t[i] == nil then return false end
  end
  return n > 0, n
end

-- cjson escapes "/" as "\/"; a slash is always escaped, so "\/" only ever stands for "/".
local function _str(s)
  return (cjson.encode(s):gsub("\\/", "/"))
end

local function _enc(v, out, depth)
  if depth > 64 then error("json: nesting too deep", 0) end
  local t = type(v)
  if v == nil or v == cjson.null then
    out[#out + 1] = "null"
  elseif t == "boolean" then
    out[#out + 1] = v and "true" or "false"
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      out[#out + 1] = "null"
    elseif math.type(v) == "integer" then
      out[#out + 1] = ("%d"):format(v)
    elseif v == math.floor(v) and math.abs(v) < 2 ^ 53 then
      out[#out + 1] = ("%d"):format(math.tointeger(v))
    else
      local short = ("%.14g"):format(v)
      out[#out + 1] = tonumber(short) == v and short or ("%.17g"):format(v)
    end
  elseif t == "string" then
    out[#out + 1] = _str(v)
  elseif t == "table" and getmetatable(v) == RAW then
    out[#out + 1] = v[1]
  elseif t == "table" then
    local seq, n = _is_seq(v)
    if seq or getmetatable(v) == ARRAY then
      out[#out + 1] = "["
      for i = 1, n or #v do
        if i > 1 then out[#out + 1] = "," end
        _enc(v[i], out, depth + 1)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do
        local kt = type(k)
        if kt == "string" or kt == "number" then keys[#keys + 1] = tostring(k) end
      end
      table.sort(keys)
      out[#out + 1] = "{"
      local first = true
      for _, k in ipairs(keys) do
        local x = v[k]
        if x == nil then x = v[tonumber(k)] end
        local xt = type(x)
        if xt ~= "function" and xt ~= "thread" and x ~= nil then
          if not first then out[#out + 1] = "," end
          first = false
          out[#out + 1] = _str(k)
          out[#out + 1] = ":"
          _enc(x, out, depth + 1)
        end
      end
      out[#out + 1] = "}"
    end
  else
    out[#out + 1] = "null"
  end
end

--- Encode v as JSON text. Object keys are sorted (stable output); infinite
--- numbers become null; functions are left out.
---@param v any
---@return string
function M.encode(v)
  local out = {}
  _enc(v, out, 0)
  return table.concat(out)
end

return M
