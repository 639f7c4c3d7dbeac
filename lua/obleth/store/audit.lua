--- obleth.store.audit — the audit trail (docs/access.md "Audit"): one row per write through the
-- Management API. Methods of the store object (obleth.store.base), in the SQL every backend speaks.
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _now, _dec = util.NULL, util.now, util.dec

--- The most rows one list returns.
local MAX_LIMIT = 1000

local function _out(r)
  local ok, summary = pcall(_dec, r.summary)
  return { id = r.id, at = r.at, actor = r.actor, via = r.via, role = r.role or NULL, method = r.method,
    route = r.route, target = r.target, model_id = r.model_id or NULL, status = r.status,
    summary = ok and summary or r.summary or NULL }
end

--- Record one write.
---@param e {actor: string, via: string, role: string|nil, method: string, route: string, target: string,
---  model_id: integer|nil, status: integer, summary: table|nil, at: integer|nil} summary: the change, without
---  secrets (the caller's redaction), stored as JSON
---@return integer|nil id, table|nil err
function Store:add_audit(e)
  return self:transaction(function()
    return self:_insert([[INSERT INTO audit (at, actor, via, role, method, route, target, model_id, status, summary)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)]], e.at or _now(), e.actor, e.via, e.role, e.method, e.route, e.target,
      e.model_id, e.status, e.summary ~= nil and json.encode(e.summary) or nil)
  end)
end

--- The audit trail, newest first.
---@param f {actor: string|nil, model_id: integer|nil, since: integer|nil, limit: integer|nil}|nil
---  since: epoch seconds (rows at or after it); limit: default 100, at most 1000
---@return table[] rows {id, at, actor, via, role, method, route, target, model_id, status, summary}
function Store:list_audit(f)
  f = f or {}
  local where, args = {}, {}
  if f.actor then where[#where + 1] = "actor = ?"; args[#args + 1] = f.actor end
  if f.model_id then where[#where + 1] = "model_id = ?"; args[#args + 1] = f.model_id end
  if f.since then where[#where + 1] = "at >= ?"; args[#args + 1] = f.since end
  local limit = math.min(f.limit or 100, MAX_LIMIT)
  args[#args + 1] = limit
  local sql = "SELECT * FROM audit" .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "")
    .. " ORDER BY id DESC LIMIT ?"
  local out = json.array()
  for _, r in ipairs(self:_q(sql, table.unpack(args))) do out[#out + 1] = _out(r) end
  return out
end
