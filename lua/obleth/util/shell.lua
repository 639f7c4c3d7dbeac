--- POSIX shell quoting: turn values into words /bin/sh reads back literally.
--
-- Every value is wrapped in single quotes, inside which sh(1) gives no
-- character a special meaning; a single quote in the value becomes `'\''`
-- (close, escaped quote, reopen). Newlines, `$`, backticks, `\`, `*`, `;`
-- stay literal. A NUL byte cannot be passed through a shell word (C strings
-- end there), so it is refused. Pure functions, no I/O.
--
-- Errors: a leaf parser (docs/errors.md): `quote` and `join` return nil, "message" for bad input, and
-- the caller wraps it into {code, message, field}. spec/unit/error_shape_spec.lua holds this list.
local M = {}

--- Quote one value as a single shell word.
---@param s string|number|boolean the value (numbers and booleans are tostring'd)
---@return string|nil word e.g. `'it'\''s'`
---@return string|nil err "contains a NUL byte" when s cannot be passed
function M.quote(s)
  local t = type(s)
  if t == "number" then
    s = math.tointeger(s) and tostring(math.tointeger(s)) or tostring(s)
  elseif t == "boolean" then
    s = tostring(s)
  elseif t ~= "string" then
    error("shell.quote: expected a string, got " .. t, 2)
  end
  if s:find("\0", 1, true) then return nil, "contains a NUL byte" end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- Quote each element of an argument vector and join them with spaces.
---@param argv (string|number|boolean)[]
---@return string|nil command line where argv[i] is exactly one word
---@return string|nil err "argument N contains a NUL byte"
function M.join(argv)
  if type(argv) ~= "table" then error("shell.join: expected an array", 2) end
  local out = {}
  for i, a in ipairs(argv) do
    local q, err = M.quote(a)
    if not q then return nil, ("argument %d %s"):format(i, err) end
    out[i] = q
  end
  return table.concat(out, " ")
end

--- True when `name` is a valid environment variable name for sh.
---@param name any
---@return boolean
function M.is_name(name)
  return type(name) == "string" and name:match("^[A-Za-z_][A-Za-z0-9_]*$") ~= nil
end

return M
