--- obleth.store.base — the store object, backend-neutral: transactions, expected failures, migrations
-- applied at open. The methods of each table group live in their own module (obleth.store.models,
-- .specs, .replicas, .settings, .provisioner, .launches, .recipes, .keys) and are written once in the
-- SQL both backends speak (`?` parameters, ON CONFLICT, the new id through _insert); so are the
-- migrations (obleth.store.migrations). What the two SQLs differ in is obleth.store.dialect's (types,
-- `?` as `$n`, migration 11's triggers, the few statements in `db.sql`); the backend
-- (obleth.store.sqlite, obleth.store.pg) brings the connection, the transactions and where the
-- schema version is kept.
--
-- A backend connection `db` answers:
--   db:query(sql, ...) -> rows | nil, err        db:first(sql, ...) -> row | nil | nil, err
--   db:execute(sql, ...) -> changes | nil, err   db:insert(sql, ...) -> id | nil, err (the new row's id)
--   db:transaction(fn, ...) -> fn's results | nil, err   (one writer at a time, as SQLite's
--                                                         BEGIN IMMEDIATE; nested calls are savepoints)
--   db:unavailable(e) -> true when e says the database cannot be reached (optional)
--   db:storage_error(e) -> fields for a "storage" error when e is the backend's error, else nil
--   db:schema_version() -> integer;  db:migrate(version, script) -> true, applied | nil, err (applied
--                                    false: another instance applied it meanwhile)
--   db:close();  db.migrations (scripts, in order);  db.sql (the dialect's statements);  db.location;
--   db.shared (true when several obleth serve may use the database at once: PostgreSQL)
local cjson = require "cjson"

local NULL = cjson.null

local M = {}

local Store = {}
Store.__index = Store
M.Store = Store

-- An expected failure raised inside a transaction (rolls it back).
local ERR = { __name = "obleth.store.error" }
local function _abort(code, message, field, extra)
  local e = setmetatable({ code = code, message = message, field = field }, ERR)
  for k, v in pairs(extra or {}) do e[k] = v end
  error(e, 0)
end

local function _dec(s)
  if s == nil then return nil end
  return cjson.decode(s)
end

-- A value as a column takes it: JSON null is NULL, a boolean 1 or 0.
local function _sqlv(v)
  if v == NULL then return nil end
  if type(v) == "boolean" then return v and 1 or 0 end
  return v
end

--- What the table-group modules share.
M.util = { NULL = NULL, abort = _abort, now = function() return os.time() end, dec = _dec, sqlv = _sqlv,
  -- the states of a replica that still holds (or waits for) a Slurm job
  LIVE_SQL = "('pending', 'submitted', 'starting', 'healthy', 'unhealthy', 'ending')" }

---------------------------------------------------------------------------
-- low-level helpers (raise the backend's error table on failure)
---------------------------------------------------------------------------

function Store:_q(sql, ...)
  local rows, err = self.db:query(sql, ...)
  if not rows then error(err, 0) end
  return rows
end

function Store:_one(sql, ...)
  local row, err = self.db:first(sql, ...)
  if err then error(err, 0) end
  return row
end

--- Run a statement; the number of rows it changed.
function Store:_x(sql, ...)
  local changes, err = self.db:execute(sql, ...)
  if not changes then error(err, 0) end
  return changes
end

--- Run an INSERT into a table with an `id` column; the new row's id.
function Store:_insert(sql, ...)
  local id, err = self.db:insert(sql, ...)
  if not id then error(err, 0) end
  return id
end

--- Run fn(...) in one transaction (nested calls become savepoints).
--- Returns fn's results, or nil, err (err.code "storage" for database failures).
function Store:transaction(fn, ...)
  local res = table.pack(self.db:transaction(fn, ...))
  if res[1] == nil and res.n >= 2 and res[2] ~= nil then
    local e = res[2]
    if getmetatable(e) == ERR then return nil, e end
    local fields = self.db:storage_error(e)
    if fields then
      local out = { code = "storage", message = "the database refused the write: " .. tostring(e.message) }
      for k, v in pairs(fields) do out[k] = v end
      return nil, out
    end
    error(e, 0)
  end
  return table.unpack(res, 1, res.n)
end

--- Whether e, an error a store method raised, says the database cannot be reached right now (a
--- connection refused or lost: PostgreSQL down or restarting), not a bug: the caller answers 503
--- `storage` with Retry-After instead of 500. Always false on a backend without connections (SQLite).
function Store:unavailable(e)
  return (self.db and self.db.unavailable and self.db:unavailable(e)) and true or false
end

---------------------------------------------------------------------------
-- open / migrate
---------------------------------------------------------------------------

-- An expected failure: {code, message} (message formatted from fmt and its values).
local function _err(code, fmt, ...)
  return { code = code, message = fmt:format(...) }
end
M.err = _err

--- A store over an open backend connection, migrated.
---@param db table a backend connection (see the top of this file)
---@param opts table|nil {log = obleth.log, path = string|nil (a SQLite file)}
---@return table|nil store, table|nil err
function M.new(db, opts)
  opts = opts or {}
  local self = setmetatable({ db = db, path = opts.path, location = db.location, log = opts.log,
    backend = db.backend, shared = db.shared or false }, Store)
  local ok, merr = self:migrate()
  if not ok then
    db:close()
    return nil, merr
  end
  return self
end

--- Apply the migrations not yet applied, each in its own transaction.
---@return true|nil ok
---@return {code: "storage", message: string}|nil err
function Store:migrate()
  local cur = self.db:schema_version()
  local last = #self.db.migrations
  if cur > last then
    return nil, _err("storage", "the database %s has schema version %d, newer than this obleth knows (%d)",
      self.location, cur, last)
  end
  for v = cur + 1, last do
    local ok, err = self.db:migrate(v, self.db.migrations[v])
    if not ok then return nil, _err("storage", "migration %d failed: %s", v, tostring(err and err.message or err)) end
    if self.log and err ~= false then self.log.info("store_migrated", { version = v }) end
  end
  return true
end

--- The tables of the schema, by name (not the backend's own: where it keeps the schema version).
---@return string[]
function Store:tables()
  local out = {}
  for _, r in ipairs(self:_q(self.db.sql.tables)) do out[#out + 1] = r.name end
  return out
end

--- A table's columns in order (also keyed by name: cols.id is true when it has an id).
---@param t string a table of tables()
---@return table
function Store:columns(t)
  local out = {}
  for _, r in ipairs(self:_q(self.db.sql.columns, t)) do
    out[#out + 1] = r.name
    out[r.name] = true
  end
  return out
end

--- The schema version (the last migration applied).
function Store:schema_version()
  return self.db:schema_version()
end

---------------------------------------------------------------------------
-- change notices between instances sharing the store (PostgreSQL's LISTEN / NOTIFY)
---------------------------------------------------------------------------

M.CHANNEL = "obleth_changes"

--- Tell every instance listening on the store (listen_changes) about `payload` (a string of at most
--- 7900 bytes). A no-op on a store no other instance shares. Inside a task.
---@return true|nil ok, table|nil err
function Store:notify_changes(payload)
  if not self.db.notify then return true end
  return self.db:notify(M.CHANNEL, payload)
end

--- Call fn(payload) for every notice (notify_changes, by any instance: this one's too), and
--- fn(nil) after a lost connection to the database came back (notices may have been missed).
--- Returns a handle with close(), or nil on a store no other instance shares.
function Store:listen_changes(fn)
  if not self.db.listen then return nil end
  return self.db:listen(M.CHANNEL, fn)
end

function Store:close()
  if self.db then self.db:close() end
  self.db = nil
end

return M
