--- Policy loader: the built-in policy modules (lua/obleth/policy/NAME.lua),
-- each optionally overridden by an operator file NAME.lua in the override
-- directory (default /etc/obleth/policy.d, or $OBLETH_POLICY_DIR).
--
-- An override file runs in its own environment with only the safe parts of
-- the standard library (no io, no os.execute, no load/require of arbitrary
-- modules) plus `builtin`, the built-in module of that name. It returns a
-- table; its functions replace the built-in ones of the same name and a
-- `DEFAULTS` table is merged over the built-in DEFAULTS (so
-- `return {DEFAULTS = {margin = 600}}` changes the rollover margin).
--
-- Reload = compile, run, validate (the module's required functions exist),
-- swap one reference. On any failure the previous module stays in use and
-- the error is kept (`errors()`), so a broken edit never replaces a working
-- policy. A file is recompiled when its mtime or size changed (stat from
-- obleth.sys, else lfs); without either, every reload recompiles.
local tables = require "obleth.util.tables"

local M = {}

M.DEFAULT_DIR = "/etc/obleth/policy.d"

--- Policy names and the functions each module must have.
M.REQUIRED = {
  learned = { "defaults" },
  suggestions = { "suggest" },
  partition_fit = { "fit", "partition", "constraint" },
  validate = { "check", "accounts_for" },
  rollover = { "plan" },
  lost = { "check", "backoff", "window", "counts" },
  failures = { "classify" },
  scale = { "decide" },
  access = { "role_of", "allows", "actions_of" },
}
M.NAMES = { "learned", "suggestions", "partition_fit", "validate", "rollover", "lost", "failures", "scale",
  "access" }

local function _stat_fn()
  local ok, sys = pcall(require, "obleth.sys")
  if ok and type(sys) == "table" and sys.stat then
    return function(path)
      local st = sys.stat(path)
      if not st then return nil end
      return { mtime = st.mtime, size = st.size }
    end
  end
  local ok2, lfs = pcall(require, "lfs")
  if ok2 and type(lfs) == "table" and lfs.attributes then
    return function(path)
      local st = lfs.attributes(path)
      if not st then return nil end
      return { mtime = st.modification, size = st.size }
    end
  end
  return nil
end

local _copy = tables.copy

local SAFE_GLOBALS = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "select", "tonumber", "tostring", "type",
  "xpcall", "rawequal", "rawget", "rawlen", "rawset", "setmetatable", "getmetatable", "_VERSION",
}
local SAFE_LIBS = { "string", "table", "math", "utf8" }
-- pure modules an override may require
local SAFE_REQUIRE = {
  ["obleth.util.hostlist"] = true, ["obleth.slurm.gres"] = true, ["obleth.util.timefmt"] = true,
  ["obleth.util.shell"] = true,
}
-- the names these modules had before the layout of lua/obleth/ changed, so that operator files
-- written for them still load
local RENAMED = { ["obleth.timefmt"] = "obleth.util.timefmt", ["obleth.shell"] = "obleth.util.shell",
  ["obleth.job.shell"] = "obleth.util.shell", ["obleth.slurm.hostlist"] = "obleth.util.hostlist" }

local function _env(name, builtin)
  local env = {}
  for _, k in ipairs(SAFE_GLOBALS) do env[k] = _G[k] end
  for _, lib in ipairs(SAFE_LIBS) do env[lib] = _copy(_G[lib]) end
  env.os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime }
  env.builtin = builtin
  env.policy_name = name
  env.require = function(mod)
    mod = RENAMED[mod] or mod
    if SAFE_REQUIRE[mod] or (type(mod) == "string" and mod:match("^obleth%.policy%.[%w_]+$")) then
      return require(mod)
    end
    error(("require(%q) is not allowed in a policy file"):format(tostring(mod)), 2)
  end
  env._G = env
  return env
end

-- Check a module has what its callers need; returns nil or a message.
local function _check(name, mod)
  if type(mod) ~= "table" then return "the module is not a table" end
  for _, fn in ipairs(M.REQUIRED[name] or {}) do
    if type(mod[fn]) ~= "function" then return ("%s.%s must be a function"):format(name, fn) end
  end
  if mod.DEFAULTS ~= nil and type(mod.DEFAULTS) ~= "table" then return "DEFAULTS must be a table" end
  return nil
end

-- Compile and run an override file over the built-in module.
-- Late binding: the override's functions are written into a fresh instance of
-- the built-in module (`builtin.new()`), whose own functions call each other
-- through that instance; so overriding a helper (validate's
-- partition_takes_account) changes every decision that uses it (check,
-- accounts_for). `builtin` in the file's environment holds the instance's
-- functions as shipped, bound to the same instance.
-- Returns the merged module, or nil, {code = "invalid_policy", message}.
local function _invalid(message) return nil, { code = "invalid_policy", message = message } end

local function _load_override(name, path, builtin)
  local fh, ferr = io.open(path, "rb")
  if not fh then return _invalid(tostring(ferr)) end
  local src = fh:read("a")
  fh:close()
  local merged = type(builtin.new) == "function" and builtin.new() or _copy(builtin)
  local shipped = _copy(merged)
  local chunk, cerr = load(src, "@" .. path, "t", _env(name, shipped))
  if not chunk then return _invalid(cerr) end
  local ok, ret = pcall(chunk)
  if not ok then return _invalid(tostring(ret)) end
  if type(ret) ~= "table" then
    return _invalid(("%s must return a table of functions and values (got %s)"):format(path, type(ret)))
  end
  if ret.DEFAULTS ~= nil and type(ret.DEFAULTS) ~= "table" then return _invalid("DEFAULTS must be a table") end
  if ret.DEFAULTS then
    merged.DEFAULTS = tables.merged(merged.DEFAULTS, ret.DEFAULTS)
    shipped.DEFAULTS = merged.DEFAULTS
  end
  for k, v in pairs(ret) do
    if k ~= "DEFAULTS" then merged[k] = v end
  end
  local e = _check(name, merged)
  if e then return _invalid(path .. ": " .. e) end
  return merged
end

--- Load one override file without installing it (to try an edit): compile,
--- run, merge over the built-in module and validate, as a reload would.
---@param name string a policy name (one of M.NAMES)
---@param path string the file
---@return table|nil module the module the file would make
---@return {code: "unknown_policy"|"invalid_policy", message: string}|nil err what failed; compile and run
---  errors name the file and line ("PATH:3: ...")
function M.load_file(name, path)
  if not M.REQUIRED[name] then
    return nil, { code = "unknown_policy",
      message = ("unknown policy %q (one of %s)"):format(tostring(name), table.concat(M.NAMES, ", ")) }
  end
  return _load_override(name, path, require("obleth.policy." .. name))
end

--- A policy set: built-in modules plus the overrides of one directory.
---@param opts {dir: string|nil, names: string[]|nil, stat: function|false|nil, clock: function|nil}|nil
---  dir default: $OBLETH_POLICY_DIR or /etc/obleth/policy.d; stat(path) -> {mtime, size}|nil
---  (false: no stat, every reload recompiles)
---@return table set with :get(name), :reload(), :errors(), :dir()
function M.new(opts)
  opts = opts or {}
  local dir = opts.dir or os.getenv("OBLETH_POLICY_DIR") or M.DEFAULT_DIR
  local names = opts.names or M.NAMES
  local stat = opts.stat
  if stat == nil then stat = _stat_fn() elseif stat == false then stat = nil end
  local clock = opts.clock or os.time
  local builtins, current, seen, errs = {}, {}, {}, {}
  local set = {}

  for _, name in ipairs(names) do
    local b = require("obleth.policy." .. name)
    local e = _check(name, b)
    if e then error("built-in policy " .. name .. ": " .. e) end
    builtins[name], current[name] = b, b
  end

  --- The current module of a policy.
  ---@param name string
  ---@return table
  function set.get(name)
    local m = current[name]
    if not m then error(("unknown policy %q"):format(tostring(name)), 2) end
    return m
  end

  --- Recompile changed override files; keep the previous module on failure.
  ---@return boolean ok true when every file loaded
  ---@return table<string, {path: string, message: string, at: number}> errors by policy name
  function set.reload()
    for _, name in ipairs(names) do
      local path = dir .. "/" .. name .. ".lua"
      local st, exists
      if stat then
        st = stat(path)
        exists = st ~= nil
      else
        local fh = io.open(path, "rb")
        exists = fh ~= nil
        if fh then fh:close() end
      end
      if not exists then
        if seen[name] then -- the override was removed: back to the built-in
          current[name], seen[name], errs[name] = builtins[name], nil, nil
        end
      else
        local sig = st and (tostring(st.mtime) .. ":" .. tostring(st.size)) or nil
        if sig == nil or seen[name] ~= sig then
          local mod, err = _load_override(name, path, builtins[name])
          if mod then
            current[name], errs[name] = mod, nil
          else
            errs[name] = { path = path, message = err.message, at = clock() }
          end
          seen[name] = sig or true
        end
      end
    end
    return next(errs) == nil, set.errors()
  end

  --- Errors of the last attempt per policy whose file failed (and is still in that state).
  ---@return table<string, {path: string, message: string, at: number}>
  function set.errors()
    local out = {}
    for k, v in pairs(errs) do out[k] = _copy(v) end
    return out
  end

  --- The override directory.
  function set.dir() return dir end

  set.reload()
  return set
end

-- The process-wide set, made on first use.
local default_set

local function _default()
  if not default_set then default_set = M.new() end
  return default_set
end

--- The current module of a policy (process-wide set).
---@param name string
---@return table
function M.get(name) return _default().get(name) end

--- Reload the process-wide set (see `new():reload()`).
function M.reload() return _default().reload() end

--- Errors of the process-wide set.
function M.errors() return _default().errors() end

--- Replace the process-wide set (e.g. with a different directory); returns it.
---@param opts table|nil as for `new`
function M.configure(opts)
  default_set = M.new(opts)
  return default_set
end

return M
