--- Command-line parsing shared by the obleth commands.
-- A spec lists the options: { name = {kind="string"|"number"|"integer"|"boolean"|"list", short=, help=} }.
-- Accepts --name value, --name=value, -s value, --flag, --no-flag; "--" ends options.
--
-- Errors: a leaf parser (docs/errors.md): `parse` returns nil, "message" for a bad command line, and
-- the command prints it with its usage. spec/unit/error_shape_spec.lua holds this list.
local M = {}

--- Parse args against spec.
---@param args string[]
---@param spec table<string, {kind: string, short: string|nil, help: string|nil}>
---@return table|nil opts (positional arguments in opts[1..n]), string|nil err naming the option
function M.parse(args, spec)
  local opts, pos = {}, {}
  local short = {}
  for name, s in pairs(spec) do
    if s.short then short[s.short] = name end
    if s.kind == "list" then opts[name] = {} end
  end
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--" then
      for j = i + 1, #args do pos[#pos + 1] = args[j] end
      break
    end
    local name, value
    if a:sub(1, 2) == "--" then
      name, value = a:match("^%-%-([%w%-_]+)=(.*)$")
      if not name then name = a:sub(3) end
    elseif a:match("^%-%a$") then
      name = short[a:sub(2)]
      if not name then return nil, ("unknown option %s"):format(a) end
    else
      pos[#pos + 1] = a
      name = nil
    end
    if name then
      local key = name:gsub("%-", "_")
      local s = spec[key]
      if not s and key:sub(1, 3) == "no_" and spec[key:sub(4)] and spec[key:sub(4)].kind == "boolean" then
        opts[key:sub(4)] = false
      elseif not s then
        return nil, ("unknown option --%s"):format(name)
      elseif s.kind == "boolean" then
        if value then return nil, ("option --%s takes no value"):format(name) end
        opts[key] = true
      else
        if not value then
          i = i + 1
          value = args[i]
          if value == nil then return nil, ("option --%s needs a value"):format(name) end
        end
        if s.kind == "number" or s.kind == "integer" then
          local n = tonumber(value)
          if not n or (s.kind == "integer" and not math.tointeger(n)) then
            return nil, ("option --%s: %q is not %s"):format(name, value,
              s.kind == "integer" and "a whole number" or "a number")
          end
          opts[key] = s.kind == "integer" and math.tointeger(n) or n
        elseif s.kind == "list" then
          local l = opts[key]
          l[#l + 1] = value
        else
          opts[key] = value
        end
      end
    end
    i = i + 1
  end
  for k, v in ipairs(pos) do opts[k] = v end
  return opts
end

--- Render a help block for spec: one line per option, sorted.
function M.help(spec)
  local names = {}
  for n in pairs(spec) do names[#names + 1] = n end
  table.sort(names)
  local out = {}
  for _, n in ipairs(names) do
    local s = spec[n]
    local flag = "--" .. n:gsub("_", "-") .. (s.kind == "boolean" and "" or " " .. (s.arg or s.kind:upper()))
    if s.short then flag = "-" .. s.short .. ", " .. flag end
    out[#out + 1] = ("  %-28s %s"):format(flag, s.help or "")
  end
  return table.concat(out, "\n")
end

return M
