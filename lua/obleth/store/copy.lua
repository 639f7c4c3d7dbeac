--- obleth.store.copy — copy every row of one store into another, empty one (`obleth store copy`):
-- moving from SQLite to PostgreSQL (or back). Both are open stores (obleth.store.open), migrated to
-- the same schema version. The rows keep their ids (replica, launch and key ids are in URLs, logs
-- and job tags), the installation id (in every job's tag: the provisioner keeps recognising its jobs)
-- and the lease generation (the fence only grows). One transaction on the destination: it is copied
-- whole or not at all.
local M = {}

--- The tables in an order that satisfies their foreign keys; singletons hold one row (id 1) from
--- their migration, replaced by the source's.
M.TABLES = { "models", "managed_specs", "endpoints", "launches", "replicas", "job_outcomes",
  "clear_lost_requests", "settings", "provisioner_status", "recipes", "installation", "api_keys",
  "api_key_usage", "provisioner_lease", "replica_logs", "dashboard_sessions", "signin_failures", "audit", "personal_tokens" }
local SINGLETONS = { provisioner_status = true, installation = true }
--- Kept by the destination's own triggers as the rows arrive (the snapshot versions, migration 11): not
--- copied. A provisioner's version from the source's obleth serve is no base there (a full resync).
M.DERIVED = { sync_version = true, model_versions = true }
--- Each obleth serve's load window of the last seconds (obleth.store.load_shares, migration 15): not
--- copied. The instances on the destination publish their own.
M.TRANSIENT = { load_shares = true }
local IDENTITIES = { "models", "launches", "replicas", "job_outcomes", "api_keys", "audit", "personal_tokens" }

local function _err(code, fmt, ...) return { code = code, message = fmt:format(...) } end

--- Copy src into dst.
---@param src table an open store (the source: only read)
---@param dst table an open store with no model, key, recipe, setting, launch or lease yet
---@return table|nil counts {[table] = rows copied}, table|nil err {code = "conflict"|"invalid"|"storage", message}
function M.copy(src, dst)
  local sv, dv = src:schema_version(), dst:schema_version()
  if sv ~= dv then
    return nil, _err("invalid", "the source has schema version %d and the destination %d: open both with this obleth "
      .. "first", sv, dv)
  end
  local known = {}
  for _, t in ipairs(M.TABLES) do known[t] = true end
  for _, t in ipairs(src:tables()) do
    if not known[t] and not M.DERIVED[t] and not M.TRANSIENT[t] then
      return nil, _err("invalid", "table %s is not in obleth.store.copy's list", t)
    end
  end
  for _, t in ipairs(M.TABLES) do
    if not SINGLETONS[t] then
      local n = dst:_one("SELECT count(*) AS n FROM " .. t).n
      if n > 0 then
        return nil, _err("conflict", "the destination %s is not empty: table %s has %d row%s", dst.location, t, n,
          n == 1 and "" or "s")
      end
    end
  end
  local counts = {}
  local res, err = dst:transaction(function()
    for _, t in ipairs(M.TABLES) do
      local cols = src:columns(t)
      local rows = src:_q("SELECT * FROM " .. t .. (cols.id and " ORDER BY id" or ""))
      if SINGLETONS[t] and #rows > 0 then dst:_x("DELETE FROM " .. t) end
      local names, marks = {}, {}
      for i, c in ipairs(cols) do names[i], marks[i] = c, "?" end
      local sql = ("INSERT INTO %s (%s) VALUES (%s)"):format(t, table.concat(names, ", "), table.concat(marks, ", "))
      for _, r in ipairs(rows) do
        local vals = {}
        for i, c in ipairs(cols) do vals[i] = r[c] end
        dst:_x(sql, table.unpack(vals, 1, #cols))
      end
      counts[t] = #rows
    end
    if dst.db.reset_identity then
      for _, t in ipairs(IDENTITIES) do dst.db:reset_identity(t) end
    end
    return true
  end)
  if not res then return nil, err end
  return counts
end

return M
