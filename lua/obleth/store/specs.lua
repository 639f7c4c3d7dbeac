--- obleth.store.specs — managed specs: methods of the store object (obleth.store.base), in the SQL every
-- backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now, _dec = util.NULL, util.abort, util.now, util.dec

---------------------------------------------------------------------------
-- managed specs
---------------------------------------------------------------------------

local SPEC_ARRAYS = { "preamble" }

local function _spec_out(row)
  if not row then return nil end
  local spec = _dec(row.spec)
  for _, k in ipairs(SPEC_ARRAYS) do spec[k] = json.array(spec[k] or {}) end
  spec.generation = row.generation
  spec.provision_error = row.provision_error and _dec(row.provision_error) or NULL
  spec.model_id = row.model_id
  spec.launch_id = row.launch_id or NULL
  spec.model_name = row.model_name
  spec.created_at = row.created_at
  spec.updated_at = row.updated_at
  return spec
end

local function _spec_text(spec)
  local t = {}
  for k, v in pairs(spec) do t[k] = v end
  for _, k in ipairs(SPEC_ARRAYS) do t[k] = json.array(t[k] or {}) end
  return json.encode(t)
end

-- The spec row, its model's name and the model's latest launch (the provisioner tags replicas with it).
local SPEC_SELECT = [[SELECT s.*, m.name AS model_name,
    (SELECT max(l.id) FROM launches l WHERE l.model_id = s.model_id) AS launch_id
  FROM managed_specs s JOIN models m ON m.id = s.model_id]]

--- A model's managed spec (with generation, provision_error, launch_id), or nil.
function Store:get_spec(model_id)
  return _spec_out(self:_one(SPEC_SELECT .. " WHERE s.model_id = ?", model_id))
end

--- Every managed spec, with its model's name.
function Store:list_specs()
  local out = json.array()
  for _, r in ipairs(self:_q(SPEC_SELECT .. " ORDER BY s.model_id")) do
    out[#out + 1] = _spec_out(r)
  end
  return out
end

--- The managed specs' model ids, generations and model names, without reading the specs themselves:
--- a caller that keeps decoded specs re-reads (get_spec) only those whose generation moved (a spec's
--- generation changes with every change of its text, and never goes back).
---@param after integer|nil only model ids above this one (keyset paging)
---@param limit integer|nil at most this many
---@return {model_id: integer, generation: integer, model_name: string}[] by model id
function Store:spec_generations(after, limit)
  local sql = [[SELECT s.model_id, s.generation, m.name AS model_name FROM managed_specs s
    JOIN models m ON m.id = s.model_id WHERE s.model_id > ? ORDER BY s.model_id]]
  if limit then return self:_q(sql .. " LIMIT ?", after or 0, limit) end
  return self:_q(sql, after or 0)
end

--- Create or replace a model's managed spec (validated by obleth.deployment.input).
--- The generation is bumped when the spec changes (it never goes back, even
--- across a DELETE and a new PUT).
---@return {spec: table, created: boolean}|nil put the stored spec; created = there was none before
---@return table|nil err {code = "not_found"|..., message}
function Store:put_spec(model_id, spec)
  local res, err = self:transaction(function()
    local m = self:_one("SELECT generation FROM models WHERE id = ?", model_id)
    if not m then _abort("not_found", ("model %s does not exist"):format(model_id)) end
    local text = _spec_text(spec)
    local cur = self:_one("SELECT spec, generation FROM managed_specs WHERE model_id = ?", model_id)
    local now = _now()
    if cur and cur.spec == text then return { created = false } end
    local gen = m.generation + 1
    self:_x("UPDATE models SET generation = ?, updated_at = ? WHERE id = ?", gen, now, model_id)
    if cur then
      self:_x("UPDATE managed_specs SET spec = ?, generation = ?, updated_at = ? WHERE model_id = ?",
        text, gen, now, model_id)
    else
      self:_x([[INSERT INTO managed_specs (model_id, spec, generation, created_at, updated_at)
        VALUES (?, ?, ?, ?, ?)]], model_id, text, gen, now, now)
    end
    return { created = cur == nil }
  end)
  if not res then return nil, err end
  return { spec = self:get_spec(model_id), created = res.created }
end

--- Delete a model's spec: nothing more is launched; live replicas are
--- cancelled by the provisioner (the snapshot lists the model with spec null).
---@return true|nil, table|nil err
function Store:delete_spec(model_id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", model_id) then
      _abort("not_found", ("model %s does not exist"):format(model_id))
    end
    if self:_x("DELETE FROM managed_specs WHERE model_id = ?", model_id) == 0 then
      _abort("not_found", ("model %s has no managed spec"):format(model_id))
    end
    self:_x("UPDATE models SET generation = generation + 1, updated_at = ? WHERE id = ?", _now(), model_id)
    return true
  end)
end

--- Dismiss the last refused-job message of a spec.
function Store:dismiss_provision_error(model_id)
  local ok, err = self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM managed_specs WHERE model_id = ?", model_id) then
      _abort("not_found", ("model %s has no managed spec"):format(model_id))
    end
    self:_x("UPDATE managed_specs SET provision_error = NULL WHERE model_id = ?", model_id)
    return true
  end)
  if not ok then return nil, err end
  return self:get_spec(model_id)
end
