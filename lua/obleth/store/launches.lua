--- obleth.store.launches — launch history: methods of the store object (obleth.store.base), in the SQL every
-- backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _now, _dec = util.NULL, util.now, util.dec

---------------------------------------------------------------------------
-- launches
---------------------------------------------------------------------------

--- Record one launch (the launch flow calls this, inside its own transaction if it likes).
---@param l {model_id: integer|nil, recipe_id: string|nil, settings: table, created_by: string|nil, created_at: integer|nil}
---@return integer|nil id, table|nil err
function Store:add_launch(l)
  if type(l) ~= "table" or type(l.settings) ~= "table" then error("add_launch: settings must be a table", 2) end
  return self:transaction(function()
    local id = self:_insert([[INSERT INTO launches (model_id, recipe_id, settings, created_by, created_at)
      VALUES (?, ?, ?, ?, ?)]], l.model_id, l.recipe_id, json.encode(l.settings), l.created_by,
      l.created_at or _now())
    return id
  end)
end

--- Launch history, newest first, each with the job outcomes of its replicas.
---@param q {model_id: integer|nil, recipe_id: string|nil, limit: integer}
function Store:list_launches(q)
  local where, args = {}, {}
  if q.model_id then where[#where + 1] = "model_id = ?"; args[#args + 1] = q.model_id end
  if q.recipe_id then where[#where + 1] = "recipe_id = ?"; args[#args + 1] = q.recipe_id end
  args[#args + 1] = q.limit or 50
  local sql = "SELECT * FROM launches" .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "")
    .. " ORDER BY created_at DESC, id DESC LIMIT ?"
  local out = json.array()
  for _, r in ipairs(self:_q(sql, table.unpack(args))) do
    local outcomes = json.array()
    for _, o in ipairs(self:_q([[SELECT replica_id, nonce, slot, job_id, state, reason, exit_code, signal, node,
        healthy, started_at, ended_at FROM job_outcomes WHERE launch_id = ? ORDER BY id]], r.id)) do
      o.healthy = o.healthy == 1
      outcomes[#outcomes + 1] = o
    end
    out[#out + 1] = {
      id = r.id, model_id = r.model_id or NULL, recipe_id = r.recipe_id or NULL, settings = _dec(r.settings),
      created_by = r.created_by or NULL, created_at = r.created_at, outcomes = outcomes,
    }
  end
  return out
end
