--- obleth.store — the Management API's durable store, behind one interface. The semantics live in
-- obleth.store.base and its table-group modules (models, specs, replicas, settings, provisioner,
-- launches, recipes, keys), written once; a backend (obleth.store.sqlite, obleth.store.pg) brings the connection,
-- the transactions and the migrations in its dialect. Callers see tables shaped like the API's JSON
-- (see docs/api.md and docs/managed-spec.md).
--
-- Errors: expected failures return nil, err with err.code one of
--   "not_found"  the model / replica / recipe does not exist
--   "conflict"   a unique name is taken, or the change is refused in this state (err.field)
--   "storage"    the database refused the write (busy, full, I/O); nothing was written; or
--                it cannot be opened or migrated (open)
--   "unsupported" open: a location this build has no backend for
-- Misuse raises.
local M = {}

for _, group in ipairs({ "models", "specs", "replicas", "settings", "provisioner", "launches", "recipes", "keys",
  "sessions", "audit", "tokens" }) do
  require("obleth.store." .. group)
end

--- Open a store.
---@param location string a file path for SQLite (":memory:" for tests), or postgresql://... (or
---  postgres://...) for PostgreSQL (from a task: the backend waits on the event loop)
---@param opts table|nil {busy_timeout = ms (SQLite), pool = connections (PostgreSQL), log = obleth.log}
---@return table|nil store
---@return {code: "unsupported"|"storage", message: string}|nil err
function M.open(location, opts)
  if type(location) ~= "string" or location == "" then error("store.open: expects a path", 2) end
  if location:match("^postgres%a*://") then return require("obleth.store.pg").open(location, opts) end
  return require("obleth.store.sqlite").open(location, opts)
end

return M
