--- The one-value checkers every wire-format check is made of (obleth.schema runs them from the
-- schemas; obleth.deployment.input runs them for what cannot be data).
--
-- Pure functions of decoded JSON (cjson: every number is a float, `null` is cjson.null). Each returns
-- the normalized value, or nil and err = {code = "invalid", field = "health.interval", message = "..."}
-- naming the field (docs/errors.md); the message starts with the field.
local cjson = require "cjson"

local M = {}

M.NULL = cjson.null

--- An error naming the field: nil, {code = "invalid", field, message = field .. ": " .. text}.
---@return nil, table
function M.err(field, fmt, ...)
  return nil, { code = "invalid", field = field, message = field .. ": " .. fmt:format(...) }
end

--- True for an absent value or JSON null.
function M.null(v) return v == nil or v == M.NULL end

--- How a value is named in a message ("a string", "null", ...).
function M.tname(v)
  if v == M.NULL then return "null" end
  local t = type(v)
  if t == "number" then return "a number" end
  if t == "string" then return "a string" end
  if t == "boolean" then return "a boolean" end
  if t == "table" then return "an object or array" end
  return t
end

--- True for a decoded JSON object (string keys only; a JSON array, even empty, is not one).
function M.is_object(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v) -- obleth.util.json marks arrays
  if mt and mt.__name == "obleth.json.array" then return false end
  for k in pairs(v) do if type(k) ~= "string" then return false end end
  return true
end

--- True for a sequence (a decoded JSON array).
function M.is_array(v)
  if type(v) ~= "table" then return false end
  local n = 0
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = n + 1
  end
  return n == #v
end

--- An integer (JSON numbers arrive as floats) in [lo, hi].
function M.int(v, field, lo, hi)
  local n = type(v) == "number" and math.tointeger(v)
  if not n and type(v) == "number" and v == v and v == math.floor(v) then -- whole, but past 2^63
    return M.err(field, "must be from %d to %d, got %.14g", lo, hi, v)
  elseif not n and type(v) == "number" then
    return M.err(field, "must be a whole number, got %.14g", v)
  end
  if not n then return M.err(field, "must be a whole number, got %s", M.tname(v)) end
  if n < lo or n > hi then return M.err(field, "must be from %d to %d, got %d", lo, hi, n) end
  return n
end

--- A finite number in [lo, hi].
function M.num(v, field, lo, hi)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    return M.err(field, "must be a number, got %s", M.tname(v))
  end
  if v < lo or v > hi then return M.err(field, "must be from %s to %s", lo, hi) end
  return v
end

function M.bool(v, field)
  if type(v) ~= "boolean" then return M.err(field, "must be true or false, got %s", M.tname(v)) end
  return v
end

--- A string of at most opts.max bytes (4096), without NUL (and without line breaks unless
--- opts.multiline); opts.pattern (Lua) checks the whole string, opts.rule says it in words.
---@param opts {max: integer|nil, multiline: boolean|nil, nonempty: boolean|nil, pattern: string|nil,
---  rule: string|nil, secret: boolean|nil}
function M.str(v, field, opts)
  if type(v) ~= "string" then return M.err(field, "must be a string, got %s", M.tname(v)) end
  local max = opts.max or 4096
  if #v > max then return M.err(field, "is longer than %d bytes", max) end
  if v:find("%z") then return M.err(field, "must not contain NUL bytes") end
  if not opts.multiline and v:find("[\r\n]") then return M.err(field, "must be one line") end
  if opts.nonempty and v:match("^%s*$") then return M.err(field, "must not be empty") end
  if opts.pattern and not v:match(opts.pattern) then
    if opts.secret then return M.err(field, "is not valid: %s", opts.rule or "bad characters") end
    return M.err(field, "%q is not valid: %s", v:sub(1, 80), opts.rule or "bad characters")
  end
  return v
end

--- A nullable string: null and "" (blank) give nil.
function M.ostr(v, field, opts)
  if M.null(v) or (type(v) == "string" and v:match("^%s*$")) then return nil end
  return M.str(v, field, opts)
end

--- True, or nil and an error naming the first unknown key of input (sorted), under prefix.
---@param known table<string, boolean>
function M.unknown(input, known, prefix)
  local bad = {}
  for k in pairs(input) do
    if type(k) ~= "string" or not known[k] then bad[#bad + 1] = tostring(k) end
  end
  if #bad > 0 then
    table.sort(bad)
    local f = (prefix or "") .. bad[1]
    return nil, { code = "invalid", field = f,
      message = ("unknown field%s: %s"):format(#bad > 1 and "s" or "", (prefix or "") .. table.concat(bad, ", ")) }
  end
  return true
end

--- A set from a list.
function M.set(list)
  local s = {}
  for _, k in ipairs(list) do s[k] = true end
  return s
end

return M
