-- The store backends a spec runs over: SQLite always (a file in a fresh temp directory), and
-- PostgreSQL (a fresh database on the server of spec.support.pg: Debian's, started by the test run)
-- wherever it can run; where it cannot, a PostgreSQL entry whose open() marks the case pending.
local M = {}

local n = 0

local function sqlite_open()
  n = n + 1
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir))
  local path = dir .. "/obleth-" .. n .. ".db"
  local store = assert(require("obleth.store").open(path))
  local close = store.close
  function store.close(self) -- the store, then its directory
    close(self)
    os.execute("rm -rf " .. dir)
  end
  return store, nil, path
end

local function pg_open()
  local pgs = require "spec.support.pg"
  local ok, why = pgs.available()
  if not ok then return nil, why end
  local url, drop = pgs.database()
  local store = assert(require("obleth.store").open(url, { pool = 4 }))
  local close = store.close
  function store.close(self) -- the store, then its database
    close(self)
    drop()
  end
  return store, nil, url
end

--- {name, open = function() -> store, nil, location | nil, why_not} for each backend (location: what
--- obleth.store.open takes to open the same database again, as a second instance would).
function M.backends()
  return {
    { name = "SQLite", open = sqlite_open },
    { name = "PostgreSQL", open = pg_open },
  }
end

return M
