--- obleth.store.models — models and endpoints; the router's reads: methods of the store object
-- (obleth.store.base), in the SQL every backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now = util.NULL, util.abort, util.now

---------------------------------------------------------------------------
-- models and endpoints
---------------------------------------------------------------------------

function Store:_endpoints(model_id)
  local out = json.array()
  for _, r in ipairs(self:_q("SELECT url FROM endpoints WHERE model_id = ? ORDER BY position, url", model_id)) do
    out[#out + 1] = r.url
  end
  return out
end

function Store:_model_out(row)
  if not row then return nil end
  return {
    id = row.id, name = row.name, description = row.description or NULL, status = row.status,
    endpoints = self:_endpoints(row.id), managed = row.managed == 1,
    created_at = row.created_at, updated_at = row.updated_at,
  }
end

local MODEL_SELECT = [[SELECT m.*, CASE WHEN EXISTS (SELECT 1 FROM managed_specs s WHERE s.model_id = m.id) THEN 1 ELSE 0 END
    AS managed
  FROM models m]]

--- Every model, by id.
function Store:list_models()
  local out = json.array()
  for _, r in ipairs(self:_q(MODEL_SELECT .. " ORDER BY m.id")) do out[#out + 1] = self:_model_out(r) end
  return out
end

---@return table|nil model
function Store:get_model(id)
  return self:_model_out(self:_one(MODEL_SELECT .. " WHERE m.id = ?", id))
end

---@return table|nil model
function Store:model_by_name(name)
  return self:_model_out(self:_one(MODEL_SELECT .. " WHERE m.name = ?", name))
end

local function _name_taken(name)
  _abort("conflict", ("a model named %q already exists"):format(name), "name")
end

--- Create a model (staged, no endpoints).
---@param m {name: string, description: string|nil}
---@return table|nil model, table|nil err
function Store:create_model(m)
  return self:transaction(function()
    if self:_one("SELECT 1 AS x FROM models WHERE name = ?", m.name) then _name_taken(m.name) end
    local now = _now()
    local desc = m.description
    if desc == NULL then desc = nil end
    local id = self:_insert(self.db.sql.insert_model, m.name, desc, now, now)
    return self:get_model(id)
  end)
end

--- Change a model's name / description.
function Store:update_model(id, m)
  return self:transaction(function()
    local cur = self:_one("SELECT * FROM models WHERE id = ?", id)
    if not cur then _abort("not_found", ("model %s does not exist"):format(id)) end
    if m.name and m.name ~= cur.name then
      if self:_one("SELECT 1 AS x FROM models WHERE name = ?", m.name) then _name_taken(m.name) end
      self:_x("UPDATE models SET name = ? WHERE id = ?", m.name, id)
    end
    if m.description ~= nil then
      local d = m.description
      if d == NULL then d = nil end
      self:_x("UPDATE models SET description = ? WHERE id = ?", d, id)
    end
    self:_x("UPDATE models SET updated_at = ? WHERE id = ?", _now(), id)
    return self:get_model(id)
  end)
end

--- Delete a model. Refused while it has a managed spec or live replicas
--- (their jobs must be cancelled first: delete the spec and wait).
function Store:delete_model(id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
      _abort("not_found", ("model %s does not exist"):format(id))
    end
    if self:_one("SELECT 1 AS x FROM managed_specs WHERE model_id = ?", id) then
      _abort("conflict", "the model has a managed spec: delete it first (DELETE /api/v1/models/" .. id ..
        "/managed) and wait for its replicas to end")
    end
    local live = self:_live_count(id)
    if live > 0 then
      _abort("conflict", ("the model still has %d live replica%s; wait for the provisioner to end them"):format(
        live, live == 1 and "" or "s"), nil, { running = live })
    end
    self:_x("DELETE FROM models WHERE id = ?", id)
    return true
  end)
end

function Store:_set_status(id)
  local n = self:_one("SELECT count(*) AS n FROM endpoints WHERE model_id = ?", id).n
  self:_x("UPDATE models SET status = ?, updated_at = ? WHERE id = ?", n > 0 and "active" or "staged", _now(), id)
end

--- Add an endpoint (idempotent); the model becomes active.
function Store:add_endpoint(id, url)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
      _abort("not_found", ("model %s does not exist"):format(id))
    end
    local pos = self:_one("SELECT coalesce(max(position), 0) + 1 AS p FROM endpoints WHERE model_id = ?", id).p
    self:_x("INSERT INTO endpoints (model_id, url, position, added_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
      id, url, pos, _now())
    self:_set_status(id)
    return self:get_model(id)
  end)
end

--- Remove an endpoint; the model is staged when none is left.
function Store:remove_endpoint(id, url)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
      _abort("not_found", ("model %s does not exist"):format(id))
    end
    if self:_x("DELETE FROM endpoints WHERE model_id = ? AND url = ?", id, url) == 0 then
      _abort("not_found", ("model %s has no endpoint %s"):format(id, url), "url")
    end
    self:_set_status(id)
    return self:get_model(id)
  end)
end

function Store:_set_endpoints(id, urls)
  self:_x("DELETE FROM endpoints WHERE model_id = ?", id)
  local now = _now()
  for i, u in ipairs(urls) do
    self:_x("INSERT INTO endpoints (model_id, url, position, added_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", id, u, i, now)
  end
  self:_set_status(id)
end

--- What the router needs to send one request: the model's id, status and endpoints
--- (in order), read in one statement; nil for an unknown name.
---@param name string the API model name
---@return table|nil {id, name, status, endpoints: string[]}
function Store:route_model(name)
  local r = self:_one(self.db.sql.route_model, name)
  if not r then return nil end
  local eps = {}
  if r.urls then for url in r.urls:gmatch("[^\n]+") do eps[#eps + 1] = url end end
  return { id = r.id, name = name, status = r.status, endpoints = eps }
end

--- Every model with its endpoint count and healthy replica count (for /v1/models and /metrics).
---@return table[] {id, name, created_at, endpoints: integer, healthy: integer}
function Store:route_models()
  return self:_q([[SELECT m.id, m.name, m.created_at,
      (SELECT count(*) FROM endpoints e WHERE e.model_id = m.id) AS endpoints,
      (SELECT count(*) FROM replicas r WHERE r.model_id = m.id AND r.state = 'healthy') AS healthy
    FROM models m ORDER BY m.id]])
end
