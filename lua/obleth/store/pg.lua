--- obleth.store.pg — the PostgreSQL backend of obleth.store, chosen by a postgresql:// location
-- (OBLETH_DATABASE_URL). Driven from the event loop through obleth.pg (libpq's asynchronous API: the
-- calling task yields while the server works), over a small pool of connections. The semantics are
-- obleth.store.base's and the table-group modules', the same SQL as on SQLite (obleth.store.dialect
-- makes `?` `$n`):
--   - every transaction first takes one advisory lock (pg_advisory_xact_lock), so transactions run one
--     at a time across every `obleth serve` on the database, as SQLite's BEGIN IMMEDIATE does in one
--     process; READ COMMITTED, each statement after the lock sees every commit before it;
--   - a statement outside a transaction runs on any pooled connection; inside one (nested calls are
--     savepoints), every statement of the task runs on the transaction's connection;
--   - a pooled connection the server dropped (a restart) is replaced: a statement outside a transaction,
--     or a transaction's BEGIN, is tried once more on a new connection;
--   - the schema migrations are obleth.store.migrations', rendered in PostgreSQL's dialect; obleth_schema
--     holds the last applied; several instances starting at once migrate one after the other (one applies, the
--     others find it applied).
-- Types (obleth.store.dialect): a signal (a number or a name) is TEXT, read back here as an integer
-- when it is one.
local M = {}

local dialect = require("obleth.store.dialect").postgresql
local _dollars = dialect.sql

--- The schema migrations in PostgreSQL's dialect (obleth.store.migrations); obleth_schema holds the
--- last applied.
M.migrations = require("obleth.store.migrations").render(dialect)

-- The advisory lock every transaction takes: "obleth" in ASCII; and the one migrations take.
local LOCK_KEY = 0x6f626c657468
local MIGRATE_KEY = LOCK_KEY + 1

--- The location shown in logs and messages: built from its parsed parts (scheme, user, host, port,
--- dbname) only, never its password or other parameters.
function M.redact(url)
  local loc = require("obleth.store").locate(url)
  return loc and loc.masked or "postgresql://?"
end

---------------------------------------------------------------------------
-- the pool: at most `size` connections, made when needed; a task waits for a free one
---------------------------------------------------------------------------

local Pool = {}
Pool.__index = Pool

local function _pool(url, size, timeout)
  return setmetatable({ url = url, size = size, timeout = timeout, idle = {}, count = 0, waiters = {} }, Pool)
end

function Pool:_wake()
  local n = table.remove(self.waiters, 1)
  if n then n:notify() end
end

--- A connection for the calling task: conn, reused (true when it was pooled) | nil, err
function Pool:acquire()
  local pg = require "obleth.pg"
  while true do
    if self.closed then return nil, { code = "closed", message = "the store is closed" } end
    local c = table.remove(self.idle)
    if c then
      if c:status() == "ok" then return c, true end
      c:close()
      self.count = self.count - 1
    elseif self.count < self.size then
      self.count = self.count + 1
      local nc, err = pg.connect(self.url, { timeout = self.timeout })
      if nc then return nc, false end
      self.count = self.count - 1
      self:_wake()
      return nil, err
    else
      local n = require("obleth.loop").notifier()
      self.waiters[#self.waiters + 1] = n
      n:wait()
    end
  end
end

function Pool:release(c)
  if self.closed or c:status() ~= "ok" then
    c:close()
    self.count = self.count - 1
  else
    self.idle[#self.idle + 1] = c
  end
  self:_wake()
end

function Pool:close()
  self.closed = true
  for _, c in ipairs(self.idle) do c:close() end
  self.idle = {}
  for _, n in ipairs(self.waiters) do n:notify() end
  self.waiters = {}
end

---------------------------------------------------------------------------
-- the backend connection obleth.store.base drives
---------------------------------------------------------------------------

local Conn = {}
Conn.__index = Conn

local function _is_int_text(v) return type(v) == "string" and v:match("^%-?%d+$") ~= nil end

-- a signal column holds a number or a name: a number comes back as one
local function _fix_rows(rows)
  for i = 1, #rows do
    local r = rows[i]
    if _is_int_text(r.signal) then r.signal = math.tointeger(tonumber(r.signal)) end
    if _is_int_text(r.end_signal) then r.end_signal = math.tointeger(tonumber(r.end_signal)) end
  end
  return rows
end

-- Run method ("query" / "exec") on the task's transaction connection, or on a pooled one.
function Conn:_run(method, sql, ...)
  local tx = self.tx[coroutine.running()]
  if tx then return tx[method](tx, sql, ...) end
  for attempt = 1, 2 do
    local c, reused = self.pool:acquire()
    if not c then return nil, reused end
    local r1, r2 = c[method](c, sql, ...)
    self.pool:release(c)
    if r1 ~= nil or attempt == 2 or not reused or type(r2) ~= "table" or r2.code ~= "connection" then
      return r1, r2
    end
  end
end

function Conn:query(sql, ...)
  local rows, err = self:_run("query", _dollars(sql), ...)
  if not rows then return nil, err end
  return _fix_rows(rows)
end

function Conn:first(sql, ...)
  local rows, err = self:query(sql, ...)
  if not rows then return nil, err end
  return rows[1]
end

function Conn:execute(sql, ...)
  local rows, changes = self:_run("query", _dollars(sql), ...)
  if not rows then return nil, changes end
  return changes or 0
end

function Conn:insert(sql, ...)
  local rows, err = self:_run("query", _dollars(sql) .. " RETURNING id", ...)
  if not rows then return nil, err end
  return rows[1].id
end

-- fn's results after a pcall: (true when none), or nil, the error
local function _results(res)
  if not res[1] then return nil, res[2] end
  if res.n == 1 then return true end
  return table.unpack(res, 2, res.n)
end

--- fn(...) in one transaction (see the top); nested calls are savepoints.
function Conn:transaction(fn, ...)
  local co = coroutine.running()
  local tx = self.tx[co]
  if tx then
    self.savepoints = (self.savepoints or 0) + 1
    local name = "obleth_sp" .. self.savepoints
    local ok, err = tx:query("SAVEPOINT " .. name)
    if not ok then return nil, err end
    local res = table.pack(pcall(fn, ...))
    if not res[1] then tx:query("ROLLBACK TO SAVEPOINT " .. name) end
    local rok, rerr = tx:query("RELEASE SAVEPOINT " .. name)
    if res[1] and not rok then return nil, rerr end
    return _results(res)
  end
  for attempt = 1, 2 do
    local c, reused = self.pool:acquire()
    if not c then return nil, reused end
    local ok, err = c:query("BEGIN")
    if ok then ok, err = c:query("SELECT pg_advisory_xact_lock($1)", LOCK_KEY) end
    if ok then
      self.tx[co] = c
      local res = table.pack(pcall(fn, ...))
      self.tx[co] = nil
      if res[1] then
        local cok, cerr = c:query("COMMIT")
        self.pool:release(c)
        if not cok then return nil, cerr end
        return _results(res)
      end
      c:query("ROLLBACK") -- a connection that died here is dropped by release
      self.pool:release(c)
      return nil, res[2]
    end
    self.pool:release(c)
    if attempt == 2 or not reused or err.code ~= "connection" then return nil, err end
  end
end

--- Whether e (raised by a statement) says the server cannot be reached right now: its connection was
--- refused or lost (libpq's "connection" class), not a fault of the statement.
function Conn.unavailable(_, e)
  local mt = type(e) == "table" and getmetatable(e)
  return (mt and mt.__name == "obleth.pg.error" and e.code == "connection") and true or false
end

function Conn.storage_error(_, e)
  local mt = type(e) == "table" and getmetatable(e)
  if mt and mt.__name == "obleth.pg.error" then return { sqlstate = e.sqlstate, pg = e.code } end
  return nil
end

-- The last migration applied, read through q (a query function that raises).
local function _version(q)
  if not q("SELECT to_regclass('obleth_schema') IS NOT NULL AS present")[1].present then return 0 end
  return q("SELECT version FROM obleth_schema WHERE id = 1")[1].version
end

function Conn:schema_version()
  return _version(function(sql) return assert(self:query(sql)) end)
end

--- Apply migration v (a script) unless another instance did meanwhile. Migrations are serialized by a
--- session advisory lock taken before their transaction begins: a transaction begun earlier would
--- keep the server's cached view that the tables another instance just created do not exist.
function Conn:migrate(v, script)
  local c, err = self.pool:acquire()
  if not c then return nil, err end
  local function q(sql, ...)
    local rows, e = c:query(sql, ...)
    if not rows then error(e, 0) end
    return rows
  end
  local ok, res = pcall(function()
    q("SELECT pg_advisory_lock($1)", MIGRATE_KEY)
    q("BEGIN")
    local ok2, e2 = pcall(function()
      q("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
      local cur = _version(q)
      if cur >= v then return "skipped" end
      local done, e = c:exec(script)
      if not done then error(e, 0) end
      if cur == 0 then q("CREATE TABLE obleth_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)") end
      q("INSERT INTO obleth_schema (id, version) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET version = excluded.version", v)
    end)
    if not ok2 then c:query("ROLLBACK"); error(e2, 0) end
    q("COMMIT")
    return e2 ~= "skipped"
  end)
  c:query("SELECT pg_advisory_unlock($1)", MIGRATE_KEY) -- a dead connection took its lock with it
  self.pool:release(c)
  if not ok then return nil, res end
  return true, res
end

--- After rows were inserted with their ids: the next id of table t follows the largest.
function Conn:reset_identity(t)
  assert(self:query(("SELECT setval(pg_get_serial_sequence('%s', 'id'), coalesce(max(id), 0) + 1, false) FROM %s")
    :format(t, t)))
end

--- NOTIFY channel, payload (through any pooled connection, or the task's transaction: then it is
--- delivered at its commit).
function Conn:notify(channel, payload)
  local ok, err = self:query("SELECT pg_notify(?, ?)", channel, payload)
  if not ok then return nil, err end
  return true
end

--- LISTEN on channel, on a connection of its own (not the pool's), in a task of its own: fn(payload)
--- for each notification, fn(nil) after the connection came back from a loss (one try a second).
--- Returns a handle whose close() stops it.
function Conn:listen(channel, fn)
  local pg, loop = require "obleth.pg", require "obleth.loop"
  local h = { closed = false }
  function h.close()
    h.closed = true
    if h.conn then h.conn:close() end
  end
  loop.spawn(function()
    local lost = false
    while not h.closed and not self.pool.closed do
      local c = pg.connect(self.pool.url, { timeout = self.pool.timeout })
      if c and c:query("LISTEN " .. c:escape_identifier(channel)) then
        h.conn = c
        if lost then fn(nil) end
        while not h.closed do
          local list = c:notifications(60)
          if not list then break end
          for _, n in ipairs(list) do fn(n.payload) end
        end
        h.conn = nil
      end
      if c then c:close() end
      lost = true
      if not h.closed then loop.sleep(1) end
    end
  end)
  return h
end

function Conn:close()
  if self.pool then self.pool:close() end
end

--- Open (migrating) a PostgreSQL store. Inside a task.
---@param url string postgresql://... (or postgres://)
---@param opts table|nil {log = obleth.log, pool = connections (8), connect_timeout = seconds (10)}
---@return table|nil store, table|nil err {code = "storage"|"unsupported", message}
function M.open(url, opts, loc)
  opts = opts or {}
  local store = require "obleth.store"
  if not loc then
    local lerr
    loc, lerr = store.locate(url)
    if not loc then return nil, lerr end
  end
  local base = require "obleth.store.base"
  if not pcall(require, "obleth.pg") then
    return nil, { code = "unsupported", message = "PostgreSQL stores need the obleth runtime (obleth.pg)" }
  end
  local conn = setmetatable({ pool = _pool(url, opts.pool or 8, opts.connect_timeout or 10),
    tx = setmetatable({}, { __mode = "k" }), location = loc.masked, backend = "postgresql", shared = true,
    migrations = M.migrations, sql = dialect.statements }, Conn)
  local c, err = conn.pool:acquire()
  if not c then
    conn.pool:close()
    return nil, base.err("storage", "cannot connect to the database %s: %s", conn.location,
      store.mask(loc, err and err.message or "?")) -- libpq's text may quote the conninfo
  end
  conn.pool:release(c)
  return base.new(conn, { log = opts.log })
end

return M
