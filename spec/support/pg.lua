-- A PostgreSQL server for the specs, from Debian's package (spec/support/pg.sh): the one named by
-- OBLETH_TEST_PG_URL (spec/run.sh starts one for the unit + host tiers), else one this process
-- starts on first use (initdb into a temp dir, a unix socket there) and stops when it exits.
-- Each caller gets its own database.
local M = {}

local BIN = os.getenv("OBLETH_PG_BIN") or "/usr/lib/postgresql/15/bin"
local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/support/pg%.lua$") or "."

-- The server this process started lives in the registry, not in this module: busted insulates each
-- spec file (package.loaded is restored after it), and a module-level server would be started again
-- for every file. It is stopped at lua_close (the end of the process).
local REG = debug.getregistry()
local state = REG["obleth.spec.pg"]
if not state then
  state = {}
  REG["obleth.spec.pg"] = state
end
local n = 0

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- Whether PostgreSQL can be used here: the obleth runtime (obleth.pg) and Debian's server binaries,
--- or a server named by OBLETH_TEST_PG_URL. Second value: why not.
function M.available()
  if not pcall(require, "obleth.pg") then return false, "obleth.pg is missing: run under build/obleth lua" end
  if os.getenv("OBLETH_TEST_PG_URL") and os.getenv("OBLETH_TEST_PG_URL") ~= "" then return true end
  local f = io.open(BIN .. "/initdb")
  if not f then return false, BIN .. "/initdb is missing (Debian package postgresql-15)" end
  f:close()
  return true
end


--- The server's URL (database postgres), starting it on first use.
function M.url()
  if state.url then return state.url end
  if state.why_not then error(state.why_not, 2) end
  local env = os.getenv("OBLETH_TEST_PG_URL")
  if env and env ~= "" then state.url = env; return state.url end
  local dir = os.tmpname()
  os.remove(dir)
  local p = io.popen(sh_quote(root .. "/spec/support/pg.sh") .. " start " .. sh_quote(dir) .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  if not ok then
    state.why_not = "spec/support/pg.sh could not start PostgreSQL: " .. out
    os.execute(sh_quote(root .. "/spec/support/pg.sh") .. " stop " .. sh_quote(dir))
    error(state.why_not, 2)
  end
  local stop = sh_quote(root .. "/spec/support/pg.sh") .. " stop " .. sh_quote(dir)
  -- stopped when the process ends: a sentinel only the registry holds, collected at lua_close
  state.sentinel = setmetatable({}, { __gc = function() os.execute(stop) end })
  state.url = out:match("(postgresql://%S+)")
  return state.url
end

--- The URL of database `name` on the same server.
function M.url_of(name)
  local u = M.url()
  return (u:gsub("^(postgresql://[^/]*/)[^?]*", "%1" .. name))
end

--- A new empty database: its URL and a function that drops it. Inside a task.
function M.database()
  local pg = require "obleth.pg"
  n = n + 1
  local name = ("obleth_spec_%d_%d_%d"):format(require("obleth.sys").getpid(), n, math.random(1, 1e9))
  local c = assert(pg.connect(M.url()))
  assert(c:query("CREATE DATABASE " .. name))
  c:close()
  return M.url_of(name), function()
    local d = assert(pg.connect(M.url()))
    assert(d:query("DROP DATABASE IF EXISTS " .. name .. " WITH (FORCE)"))
    d:close()
  end
end

return M
