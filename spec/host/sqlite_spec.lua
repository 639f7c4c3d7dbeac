-- Binding spec for obleth.sqlite (host/sqlite.c). Runs inside the host's
-- Lua 5.4, where "obleth.sqlite" is in package.preload. Expected values are
-- SQLite's documented behaviour (constraint names, extended codes, WAL
-- visibility), not read back from the binding.
local sqlite = require("obleth.sqlite")

-- A fresh file path; removes the db and its -wal/-shm files afterwards.
local function tmpdb()
  local path = os.tmpname()
  os.remove(path)
  finally(function()
    for _, suffix in ipairs({ "", "-wal", "-shm", "-journal" }) do os.remove(path .. suffix) end
  end)
  return path
end

local function mem()
  local db = assert(sqlite.open(":memory:"))
  finally(function() db:close() end)
  return db
end

local function typed(v)
  return (math.type(v) or type(v)) .. ":" .. tostring(v)
end

describe("obleth.sqlite", function()
  describe("open", function()
    it("turns on WAL and foreign keys for a file db", function()
      local path = tmpdb()
      local db = assert(sqlite.open(path))
      assert.equal("wal", db:first("PRAGMA journal_mode").journal_mode)
      assert.equal(1, db:first("PRAGMA foreign_keys").foreign_keys)
      assert.equal(1, db:first("PRAGMA synchronous").synchronous) -- NORMAL
      assert.equal(5000, db:first("PRAGMA busy_timeout").timeout)
      db:close()
    end)

    it("honours wal=false, foreign_keys=false, synchronous=FULL, busy_timeout", function()
      local path = tmpdb()
      local db = assert(sqlite.open(path, {
        wal = false, foreign_keys = false, synchronous = "FULL", busy_timeout = 250,
      }))
      assert.equal("delete", db:first("PRAGMA journal_mode").journal_mode)
      assert.equal(0, db:first("PRAGMA foreign_keys").foreign_keys)
      assert.equal(2, db:first("PRAGMA synchronous").synchronous) -- FULL
      assert.equal(250, db:first("PRAGMA busy_timeout").timeout)
      db:close()
    end)

    it("works for :memory:", function()
      local db = mem()
      assert.is_true(db:exec("create table t(a)"))
      assert.equal("memory", db:first("PRAGMA journal_mode").journal_mode)
    end)

    it("returns nil, cantopen for a missing file opened read-only", function()
      local path = tmpdb()
      local db, err = sqlite.open(path, { readonly = true })
      assert.is_nil(db)
      assert.equal("cantopen", err.code)
      assert.equal(14, err.sqlite_code & 0xff) -- SQLITE_CANTOPEN
      assert.is_string(err.message)
    end)

    it("a read-only connection cannot write: nil, readonly", function()
      local path = tmpdb()
      local rw = assert(sqlite.open(path))
      rw:exec("create table t(a)")
      local ro = assert(sqlite.open(path, { readonly = true }))
      local ok, err = ro:execute("insert into t values (1)")
      assert.is_nil(ok)
      assert.equal("readonly", err.code)
      ro:close()
      rw:close()
    end)

    it("raises on a bad option (misuse)", function()
      assert.has_error(function() sqlite.open(":memory:", { wal = "yes" }) end)
      assert.has_error(function() sqlite.open(":memory:", { synchronous = "OFF" }) end)
      assert.has_error(function() sqlite.open(":memory:", { busy_timeout = -1 }) end)
      assert.has_error(function() sqlite.open(":memory:", { walmode = true }) end)
      assert.has_error(function() sqlite.open({}) end)
    end)
  end)

  describe("binding and values", function()
    it("binds every type, including nil in the middle of the varargs", function()
      local db = mem()
      local row = db:first("select ? as a, ? as b, ? as c, ? as d, ? as e, ? as f, ? as g",
        1, nil, 2.5, "x", true, false, nil)
      assert.equal("integer:1", typed(row.a))
      assert.is_nil(row.b)
      assert.equal("float:2.5", typed(row.c))
      assert.equal("string:x", typed(row.d))
      assert.equal("integer:1", typed(row.e))
      assert.equal("integer:0", typed(row.f))
      assert.is_nil(row.g)
      local t = db:first("select typeof(?) as a, typeof(?) as b, typeof(?) as c, typeof(?) as d",
        nil, 7, 7.0, "7")
      assert.same({ a = "null", b = "integer", c = "real", d = "text" }, t)
    end)

    it("keeps embedded NUL bytes in text both ways", function()
      local db = mem()
      db:exec("create table t(s text)")
      local s = "a\0b\0\0c"
      db:execute("insert into t values (?)", s)
      local row = db:first("select s, length(cast(s as blob)) as n from t")
      assert.equal(s, row.s)
      assert.equal(6, row.n)
    end)

    it("returns BLOB columns as strings of their bytes", function()
      local db = mem()
      assert.equal("\0\1\255", db:first("select x'0001ff' as b").b)
    end)

    it("preserves integer vs float: 2^53+1 round-trips as an integer", function()
      local db = mem()
      db:exec("create table t(i integer, r real, any)")
      local big = (1 << 53) + 1
      db:execute("insert into t values (?, ?, ?)", big, 0.5, 3.0)
      local row = db:first("select * from t")
      assert.equal("integer:9007199254740993", typed(row.i))
      assert.equal("float:0.5", typed(row.r))
      assert.equal("float:3.0", typed(row.any))
      assert.equal(math.maxinteger, db:first("select ? as v", math.maxinteger).v)
      assert.equal(math.mininteger, db:first("select ? as v", math.mininteger).v)
    end)

    it("leaves NULL columns out of the row", function()
      local db = mem()
      local row = db:first("select 1 as a, null as b")
      assert.same({ a = 1 }, row)
    end)

    it("binds named parameters (:name, $name, @name) from a single table", function()
      local db = mem()
      db:exec("create table t(a, b, c)")
      db:execute("insert into t values (:a, $b, @c)", { a = 1, b = "two", c = 3.5 })
      assert.same({ a = 1, b = "two", c = 3.5 }, db:first("select * from t"))
      -- a missing key binds NULL; the same name used twice binds once
      local row = db:first("select :x as x, :y as y, :x + 1 as z", { x = 41 })
      assert.same({ x = 41, z = 42 }, row)
      -- ?NNN and bare ? read integer keys of the table
      assert.same({ p = "one", q = "two" }, db:first("select ?2 as q, ?1 as p", { "one", "two" }))
    end)

    it("raises on a wrong parameter count or an unbindable value", function()
      local db = mem()
      assert.has_error(function() db:query("select ?, ?", 1) end)
      assert.has_error(function() db:query("select ?", 1, 2) end)
      assert.has_error(function() db:query("select ?", function() end) end)
      assert.has_error(function() db:query("select ?, ?", {}, 1) end)
    end)

    it("raises for SQL with no statement or more than one", function()
      local db = mem()
      assert.has_error(function() db:query("") end)
      assert.has_error(function() db:query("select 1; select 2") end)
      -- a trailing comment or empty statement is fine
      assert.same({ { v = 1 } }, db:query("select 1 as v; -- done\n;"))
    end)
  end)

  describe("query / first / execute", function()
    it("query returns an array of rows in order", function()
      local db = mem()
      db:exec("create table t(n); insert into t values (3), (1), (2)")
      local rows = assert(db:query("select n from t order by n"))
      assert.same({ { n = 1 }, { n = 2 }, { n = 3 } }, rows)
      assert.same({}, db:query("select n from t where n > 10"))
    end)

    it("first returns nil alone when there is no row", function()
      local db = mem()
      db:exec("create table t(n)")
      local n = select("#", db:first("select n from t"))
      assert.equal(1, n)
      assert.is_nil(db:first("select n from t"))
    end)

    it("execute returns changes and the last insert rowid", function()
      local db = mem()
      db:exec("create table t(id integer primary key, v)")
      assert.same({ 1, 1 }, { db:execute("insert into t(v) values (?)", "a") })
      assert.same({ 1, 2 }, { db:execute("insert into t(v) values (?)", "b") })
      assert.same({ 1, 10 }, { db:execute("insert into t(id, v) values (10, 'c')") })
      local changes, rowid = db:execute("update t set v = 'z' where id < ?", 5)
      assert.equal(2, changes)
      assert.equal(10, rowid)
      assert.equal(2, db:changes())
      assert.equal(10, db:last_insert_rowid())
      assert.equal(3, (db:execute("delete from t")))
    end)

    it("returns nil, err for an SQL error", function()
      local db = mem()
      local rows, err = db:query("selec 1")
      assert.is_nil(rows)
      assert.equal("error", err.code)
      assert.matches("syntax error", err.message)
      assert.equal(1, err.sqlite_code)
      assert.matches("^error: ", tostring(err))
      assert.matches("syntax error", db:errmsg())
    end)
  end)

  describe("constraint errors", function()
    local db
    before_each(function()
      db = assert(sqlite.open(":memory:"))
      assert(db:exec([[
        create table p(id integer primary key, name text unique, code text not null,
                       qty integer check (qty >= 0));
        create table k(key text primary key) without rowid;
        create table c(id integer primary key, p_id integer not null references p(id));
      ]]))
      assert(db:execute("insert into p values (1, 'a', 'x', 1)"))
    end)
    after_each(function() db:close() end)

    local function violation(sql, ...)
      local ok, err = db:execute(sql, ...)
      assert.is_nil(ok)
      assert.equal("constraint", err.code)
      assert.equal(19, err.sqlite_code & 0xff)
      return err.constraint, err
    end

    it("unique", function()
      assert.equal("unique", violation("insert into p(name, code) values ('a', 'y')"))
    end)
    it("primary key", function()
      assert.equal("primarykey", violation("insert into p(id, code) values (1, 'y')"))
      db:execute("insert into k values ('a')")
      assert.equal("primarykey", violation("insert into k values ('a')"))
    end)
    it("not null", function()
      local name, err = violation("insert into p(name, code) values (?, ?)", "b", nil)
      assert.equal("notnull", name)
      assert.matches("NOT NULL", err.message)
    end)
    it("check", function()
      assert.equal("check", violation("insert into p(code, qty) values ('y', -1)"))
    end)
    it("foreign key", function()
      assert.equal("foreignkey", violation("insert into c(p_id) values (99)"))
    end)
    it("from exec too", function()
      local ok, err = db:exec("insert into p(id, code) values (2, 'y'); insert into p(name, code) values ('a', 'y')")
      assert.is_nil(ok)
      assert.equal("unique", err.constraint)
      assert.equal(1, #db:query("select 1 from p where id = 2")) -- the first statement ran
    end)
  end)

  describe("transactions", function()
    it("commits and returns fn's results", function()
      local db = mem()
      db:exec("create table t(n)")
      local a, b = db:transaction(function(x, y)
        db:execute("insert into t values (?)", x)
        return x + y, "ok"
      end, 1, 2)
      assert.equal(3, a)
      assert.equal("ok", b)
      assert.equal(1, #db:query("select * from t"))
      assert.is_true(db:transaction(function() end))
    end)

    it("a function that raises leaves nothing written and its error comes back", function()
      local db = mem()
      db:exec("create table t(n)")
      local boom = { reason = "boom" }
      local ok, err = db:transaction(function()
        db:execute("insert into t values (1)")
        db:execute("insert into t values (2)")
        error(boom)
      end)
      assert.is_nil(ok)
      assert.equal(boom, err)
      assert.same({}, db:query("select * from t"))
      -- the connection is back in autocommit: a new transaction can start
      assert.is_true(db:transaction(function() db:execute("insert into t values (3)") end))
      assert.same({ { n = 3 } }, db:query("select * from t"))
    end)

    it("a nested transaction that raises rolls back only the inner work", function()
      local db = mem()
      db:exec("create table t(n)")
      local ok = db:transaction(function()
        db:execute("insert into t values ('outer')")
        local r, err = db:transaction(function()
          db:execute("insert into t values ('inner')")
          error("inner failed", 0)
        end)
        assert.is_nil(r)
        assert.equal("inner failed", err)
        local r2 = db:transaction(function()
          db:execute("insert into t values ('inner2')")
          return "kept"
        end)
        assert.equal("kept", r2)
        return true
      end)
      assert.is_true(ok)
      assert.same({ { n = "outer" }, { n = "inner2" } }, db:query("select n from t order by rowid"))
    end)

    it("an outer failure undoes committed inner savepoints too", function()
      local db = mem()
      db:exec("create table t(n)")
      db:transaction(function()
        db:transaction(function() db:execute("insert into t values (1)") end)
        error("outer")
      end)
      assert.same({}, db:query("select * from t"))
    end)

    it("fn may yield (lua_pcallk): the transaction finishes on resume", function()
      local db = mem()
      db:exec("create table t(n)")
      local co = coroutine.wrap(function()
        return db:transaction(function()
          db:execute("insert into t values (1)")
          coroutine.yield("paused")
          db:execute("insert into t values (2)")
          return "done"
        end)
      end)
      assert.equal("paused", co())
      assert.equal("done", co())
      assert.equal(2, #db:query("select * from t"))
    end)

    it("returns nil, busy when another connection holds the write lock", function()
      local path = tmpdb()
      local a = assert(sqlite.open(path))
      local b = assert(sqlite.open(path, { busy_timeout = 0 }))
      a:exec("create table t(n)")
      a:exec("begin immediate")
      local ok, err = b:transaction(function() error("not reached") end)
      assert.is_nil(ok)
      assert.equal("busy", err.code)
      a:exec("rollback")
      a:close()
      b:close()
    end)
  end)

  describe("prepared statements", function()
    it("bind / step / reset / rows", function()
      local db = mem()
      db:exec("create table t(n); insert into t values (1), (2), (3)")
      local st = assert(db:prepare("select n from t where n >= ? order by n"))
      assert.equal(st, st:bind(2))
      assert.same({ n = 2 }, st:step())
      assert.same({ n = 3 }, st:step())
      assert.is_nil(st:step())
      assert.same({ n = 2 }, st:step()) -- reset at the end, bindings kept
      st:reset()
      local seen = {}
      for row in st:rows(1) do seen[#seen + 1] = row.n end
      assert.same({ 1, 2, 3 }, seen)
      for row in st:rows(3) do -- luacheck: ignore 512 (breaking out is the point)
        seen[#seen + 1] = row.n
        break
      end
      assert.same({ 1, 2, 3, 3 }, seen)
      -- breaking out reset the statement: stepping starts over
      assert.same({ n = 3 }, st:step())
      st:close()
      st:close() -- idempotent
      assert.has_error(function() st:step() end, "statement is closed")
    end)

    it("rows raises the error table on a step error", function()
      local db = mem()
      db:exec("create table t(n unique)")
      local st = db:prepare("insert into t values (?)")
      for _ in st:rows(1) do end
      local ok, err = pcall(function() for _ in st:rows(1) do end end)
      assert.is_false(ok)
      assert.equal("unique", err.constraint)
    end)

    it("prepare returns nil, err for bad SQL and raises for two statements", function()
      local db = mem()
      local st, err = db:prepare("select from")
      assert.is_nil(st)
      assert.equal("error", err.code)
      assert.has_error(function() db:prepare("select 1; select 2") end)
    end)

    it("a statement keeps its db alive until it is collected", function()
      local st
      do
        local db = assert(sqlite.open(":memory:"))
        st = db:prepare("select 42 as v")
      end
      collectgarbage()
      collectgarbage()
      assert.same({ v = 42 }, st:step())
      st:close()
    end)
  end)

  describe("close", function()
    it("is idempotent and later use raises", function()
      local db = assert(sqlite.open(":memory:"))
      local st = db:prepare("select 1 as v")
      assert.is_true(db:close())
      assert.is_true(db:close())
      assert.has_error(function() db:query("select 1") end, "database is closed")
      assert.has_error(function() db:exec("select 1") end, "database is closed")
      assert.has_error(function() db:execute("select 1") end, "database is closed")
      assert.has_error(function() db:first("select 1") end, "database is closed")
      assert.has_error(function() db:prepare("select 1") end, "database is closed")
      assert.has_error(function() db:transaction(function() end) end, "database is closed")
      assert.has_error(function() db:changes() end, "database is closed")
      -- closing the db finalized its statement
      assert.has_error(function() st:step() end, "statement is closed")
      st:close()
    end)

    it("closes on leaving a <close> scope", function()
      local outer
      do
        local db <close> = assert(sqlite.open(":memory:"))
        outer = db
        db:exec("create table t(a)")
      end
      assert.has_error(function() outer:query("select 1") end, "database is closed")
    end)

    it("closing the db inside a transaction raises", function()
      local db = assert(sqlite.open(":memory:"))
      assert.has_error(function() db:transaction(function() db:close() end) end)
    end)
  end)

  describe("statement cache", function()
    it("reuses the prepared statement across 1000 calls", function()
      local db = mem()
      db:exec("create table t(n)")
      for i = 1, 1000 do
        local _, rowid = db:execute("insert into t(n) values (?)", i)
        assert.equal(i, rowid)
        assert.equal(i, db:first("select n from t where rowid = ?", i).n)
      end
      local s = db:stats()
      assert.equal(2, s.misses)
      assert.equal(1998, s.hits)
      assert.equal(2, s.cached)
      assert.equal(2, s.open_statements)
      assert.equal(500500, db:first("select sum(n) as s from t").s)
    end)

    it("evicts the least recently used statement beyond 64", function()
      local db = mem()
      for i = 1, 70 do assert.equal(i, db:first("select " .. i .. " as v").v) end
      assert.equal(64, db:stats().cached)
      assert.equal(64, db:stats().open_statements)
      assert.equal(70, db:first("select 70 as v").v) -- still cached
      assert.equal(70, db:stats().misses)
      assert.equal(1, db:first("select 1 as v").v) -- evicted, prepared again
      assert.equal(71, db:stats().misses)
    end)

    it("a cached statement is reset after use: no read transaction is left open", function()
      local path = tmpdb()
      local a = assert(sqlite.open(path))
      a:exec("create table t(n); insert into t values (1), (2)")
      assert.same({ n = 1 }, a:first("select n from t order by n"))
      -- with a statement left mid-step, a would still hold its snapshot and
      -- never see b's write; after reset it sees it
      local b = assert(sqlite.open(path))
      b:execute("insert into t values (3)")
      assert.equal(3, a:first("select count(*) as c from t").c)
      a:close()
      b:close()
    end)
  end)

  describe("durability", function()
    it("a second connection sees committed data, and it survives close/reopen", function()
      local path = tmpdb()
      local a = assert(sqlite.open(path))
      a:exec("create table t(n)")
      local b = assert(sqlite.open(path))
      a:transaction(function() a:execute("insert into t values (?)", 7) end)
      assert.same({ { n = 7 } }, b:query("select n from t"))
      -- an uncommitted write is not visible to the other connection
      a:exec("begin")
      a:execute("insert into t values (8)")
      assert.equal(1, #b:query("select n from t"))
      a:exec("commit")
      a:close()
      b:close()
      local c = assert(sqlite.open(path))
      assert.same({ { n = 7 }, { n = 8 } }, c:query("select n from t order by n"))
      c:close()
    end)
  end)
end)
