--- `obleth repl`: interactive Lua in the obleth runtime, with `slurm`
--- already connected to the configured cluster.
--
-- Meant for poking at a production cluster: calls that change it (submit,
-- cancel) are refused unless the REPL was started with --write. Lines are
-- evaluated as expressions first (results pretty-printed), then as
-- statements; an incomplete chunk continues on the next line. Readline
-- history lives in ~/.obleth_history; Tab completes table fields.
local args = require "obleth.args"
local pp = require "obleth.pp"
local slurm_cli = require "obleth.cli.slurm"

local M = {}

local spec = {
  write = { kind = "boolean", help = "allow calls that change the cluster (submit, cancel)" },
  eval = { kind = "string", short = "e", arg = "CODE", help = "evaluate CODE, print its results and exit" },
  help = { kind = "boolean", short = "h", help = "this help" },
}
for k, v in pairs(slurm_cli.connection_spec) do spec[k] = v end

local WRITE_CALLS = { submit = true, submit_body = true, cancel = true }

--- A view of a connection for the REPL: methods work as `slurm.ping()` and
--- `slurm:ping()`; unless allow_write, changing calls raise with a message
--- that says how to allow them.
function M.guard(conn, allow_write)
  local proxy
  proxy = setmetatable({}, {
    __index = function(_, k)
      if WRITE_CALLS[k] and not allow_write then
        return function()
          error(("slurm.%s refused: this REPL is read-only; start it with `obleth repl --write` "
            .. "to submit or cancel jobs"):format(k), 2)
        end
      end
      local v = conn[k]
      if type(v) == "function" then
        return function(first, ...)
          if first == proxy then return v(conn, ...) end
          return v(conn, first, ...)
        end
      end
      return v
    end,
    __tostring = function()
      return ("slurm connection %s (%s)"):format(conn:version(), allow_write and "writes allowed" or "read-only")
    end,
    -- names for Tab completion (the __index above is a function)
    __fields = (function()
      local f = {}
      local cls = getmetatable(conn) and getmetatable(conn).__index
      if type(cls) == "table" then for k in pairs(cls) do f[k] = true end end
      return f
    end)(),
  })
  return proxy
end

--- Completion candidates for `text` (e.g. "slurm.pa", "string.fo") in env.
function M.complete(env, text)
  local path, sep, prefix = text:match("^(.-)([%.:]?)([%w_]*)$")
  local target = env
  if sep ~= "" then
    for part in path:gmatch("[^%.:]+") do
      local ok, v = pcall(function() return target[part] end)
      if not ok or v == nil then return {} end
      target = v
    end
  end
  local names, seen = {}, {}
  local function add_from(t)
    if type(t) ~= "table" then return end
    for k in pairs(t) do
      if type(k) == "string" and k:sub(1, #prefix) == prefix and not seen[k] and k:sub(1, 1) ~= "_" then
        seen[k] = true
        names[#names + 1] = path .. sep .. k
      end
    end
  end
  local mt = getmetatable(target)
  add_from(type(target) == "table" and target or nil)
  if type(target) ~= "table" or sep ~= "" then
    if type(mt) == "table" and type(mt.__index) == "table" then add_from(mt.__index) end
    if type(mt) == "table" and type(mt.__fields) == "table" then add_from(mt.__fields) end
    if type(target) == "string" then add_from(string) end
  end
  if sep == "" then add_from(_G) end
  table.sort(names)
  return names
end

local function results_text(n, ...)
  local parts = {}
  for i = 1, n do parts[i] = pp.format((select(i, ...))) end
  return table.concat(parts, "\t")
end

--- Evaluate one chunk in env. Returns "incomplete" when more lines are needed.
function M.eval(env, src, out)
  local fn, err = load("return " .. src, "=repl", "t", env)
  if not fn then
    fn, err = load(src, "=repl", "t", env)
  end
  if not fn then
    if err:match("<eof>$") then return "incomplete" end
    out("error: " .. err)
    return "error"
  end
  local res = table.pack(xpcall(fn, function(e) return debug.traceback(tostring(e), 2) end))
  if not res[1] then
    local msg = tostring(res[2]):gsub("\nstack traceback:.*$", "")
    out("error: " .. msg)
    return "error"
  end
  if res.n > 1 then out(results_text(res.n - 1, table.unpack(res, 2, res.n))) end
  return "ok"
end

function M.main(argv)
  local o, perr = args.parse(argv, spec)
  if not o or o.help then
    io.stderr:write(perr and ("obleth repl: " .. perr .. "\n") or "", "usage: obleth repl [--write] [-e CODE]\n",
      args.help(spec), "\n")
    return o and 0 or 2
  end
  local env = setmetatable({}, { __index = _G })
  env.loop = require "obleth.loop"
  env.http = require "obleth.http"
  env.yaml = require "obleth.yaml"
  env.cjson = require "cjson"
  env.log = require "obleth.log"
  env.sys = require "obleth.sys"
  env.pp = function(...) print(results_text(select("#", ...), ...)) end
  env.slurm_lib = require "obleth.slurm"
  local conn, cerr = slurm_cli.connect(o)
  if conn then
    env.slurm = M.guard(conn, o.write)
  else
    io.stderr:write("obleth repl: not connected to Slurm: ", tostring(cerr), "\n")
    env.slurm = setmetatable({}, { __index = function()
      error("not connected to Slurm: " .. tostring(cerr) .. " (see obleth repl --help)", 2)
    end })
  end
  local function out(s) io.stdout:write(s, "\n") io.stdout:flush() end
  if o.eval then
    local r = M.eval(env, o.eval, out)
    return r == "ok" and 0 or 1
  end
  local sys = require "obleth.sys"
  local interactive = sys.isatty(0)
  local rl, hist
  if interactive then
    rl = require "obleth.readline"
    hist = os.getenv("HOME") and (os.getenv("HOME") .. "/.obleth_history")
    if hist then rl.read_history(hist) end
    rl.set_completer(function(text) return M.complete(env, text) end)
    out(("obleth %s REPL — %s; %s"):format(require("obleth.sys").version,
      conn and ("slurm: " .. conn:version() .. " at " .. tostring((conn:info()).url or (conn:info()).socket))
        or "no Slurm connection",
      o.write and "writes ALLOWED" or "read-only (start with --write to submit or cancel)"))
  end
  local buf = nil
  local failed = false
  while true do
    local line
    if interactive then
      line = rl.readline(buf and ">> " or "obleth> ")
    else
      line = io.stdin:read("l")
    end
    if line == nil then break end
    if interactive and line:match("%S") then rl.add_history(line) end
    buf = buf and (buf .. "\n" .. line) or line
    if buf:match("%S") then
      local r = M.eval(env, buf, out)
      if r ~= "incomplete" then
        if r == "error" then failed = true end
        buf = nil
      end
    else
      buf = nil
    end
  end
  if buf then out("error: incomplete input at end of file") failed = true end
  if interactive and hist then rl.write_history(hist) end
  if interactive then io.stdout:write("\n") end
  return (not interactive and failed) and 1 or 0
end

return M
