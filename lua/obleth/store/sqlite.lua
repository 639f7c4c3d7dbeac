--- obleth.store.sqlite — the SQLite backend of obleth.store (WAL, foreign keys, synchronous=FULL):
-- one connection, every transaction BEGIN IMMEDIATE (one writer at a time); PRAGMA user_version holds
-- the last migration applied. The store's semantics are obleth.store.base's and the table-group
-- modules', its schema obleth.store.migrations', the words of SQLite's SQL obleth.store.dialect's.
local sqlite = require "obleth.sqlite"

local M = {}


local dialect = require("obleth.store.dialect").sqlite

--- The schema migrations in SQLite's dialect (obleth.store.migrations); PRAGMA user_version holds the
--- last applied.
M.migrations = require("obleth.store.migrations").render(dialect)

local Conn = {}
Conn.__index = Conn

function Conn:query(sql, ...) return self.sqlite:query(sql, ...) end
function Conn:first(sql, ...) return self.sqlite:first(sql, ...) end
function Conn:execute(sql, ...)
  local changes, err = self.sqlite:execute(sql, ...)
  if not changes then return nil, err end
  return changes
end
function Conn:insert(sql, ...)
  local changes, rowid = self.sqlite:execute(sql, ...)
  if not changes then return nil, rowid end
  return rowid
end
function Conn:transaction(fn, ...) return self.sqlite:transaction(fn, ...) end
function Conn.storage_error(_, e)
  if type(e) == "table" and e.code and e.sqlite_code then return { sqlite = e.code } end
  return nil
end
function Conn:schema_version() return assert(self.sqlite:first("PRAGMA user_version")).user_version end
function Conn:migrate(v, script)
  return self.sqlite:transaction(function()
    assert(self.sqlite:exec(script))
    assert(self.sqlite:exec(("PRAGMA user_version = %d"):format(v)))
    return true
  end)
end

function Conn:close()
  if self.sqlite then self.sqlite:close() end
  self.sqlite = nil
end

--- Open (creating and migrating) a SQLite store.
---@param path string a file path, or ":memory:"
---@param opts table|nil {busy_timeout = ms, log = obleth.log}
---@return table|nil store, table|nil err {code = "storage", message}
function M.open(path, opts)
  opts = opts or {}
  local base = require "obleth.store.base"
  local db, err = sqlite.open(path, { wal = true, foreign_keys = true, synchronous = "FULL",
    busy_timeout = opts.busy_timeout or 5000 })
  if not db then
    return nil, base.err("storage", "cannot open the database %s: %s", path, err and err.message or "?")
  end
  if path ~= ":memory:" then
    -- it holds the JWT and the Hugging Face token: owner only
    local sys = require "obleth.sys"
    for _, suffix in ipairs({ "", "-wal", "-shm" }) do
      if sys.stat(path .. suffix) then sys.chmod(path .. suffix, tonumber("600", 8)) end
    end
  end
  local conn = setmetatable({ sqlite = db, location = path, backend = "sqlite", migrations = M.migrations,
    sql = dialect.statements }, Conn)
  return base.new(conn, { log = opts.log, path = path })
end

return M
