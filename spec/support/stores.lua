-- The store backends a spec runs over: SQLite always (a file in a fresh temp directory), and
-- PostgreSQL when spec.support.pg has a server (Debian's, started by the test run).
local M = {}

local n = 0

--- {name, open = function() -> store} for each backend available here.
function M.backends()
  local out = {}
  out[#out + 1] = { name = "SQLite", open = function()
    n = n + 1
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local store = assert(require("obleth.store").open(dir .. "/obleth-" .. n .. ".db"))
    local close = store.close
    function store.close(self) -- the store, then its directory
      close(self)
      os.execute("rm -rf " .. dir)
    end
    return store
  end }
  return out
end

return M
