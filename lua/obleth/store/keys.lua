--- obleth.store.keys — client API keys: methods of the store object (obleth.store.base), in the SQL every
-- backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now = util.NULL, util.abort, util.now

---------------------------------------------------------------------------
-- client API keys and routing reads (obleth.router, obleth.api.keys)
---------------------------------------------------------------------------

local function _key_out(r)
  if not r then return nil end
  return { id = r.id, name = r.name, prefix = r.prefix, created_at = r.created_at, revoked_at = r.revoked_at or NULL }
end

--- Store a new client key (its hash only; the key itself is never stored).
---@param k {name: string, prefix: string, hash: string} hash = SHA-256 hex of the key
---@return table|nil key {id, name, prefix, created_at, revoked_at}, table|nil err
function Store:create_api_key(k)
  return self:transaction(function()
    local id = self:_insert("INSERT INTO api_keys (name, prefix, hash, created_at) VALUES (?, ?, ?, ?)",
      k.name, k.prefix, k.hash, _now())
    return _key_out(self:_one("SELECT * FROM api_keys WHERE id = ?", id))
  end)
end

--- Every client key, without secrets, by id.
function Store:list_api_keys()
  local out = json.array()
  for _, r in ipairs(self:_q("SELECT * FROM api_keys ORDER BY id")) do out[#out + 1] = _key_out(r) end
  return out
end

--- Revoke a key (idempotent: a revoked key keeps its first revoked_at).
---@return table|nil key, table|nil err (not_found)
function Store:revoke_api_key(id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM api_keys WHERE id = ?", id) then
      _abort("not_found", ("API key %s does not exist"):format(tostring(id)))
    end
    self:_x("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", _now(), id)
    return _key_out(self:_one("SELECT * FROM api_keys WHERE id = ?", id))
  end)
end

--- The id of the unrevoked key with this hash, or nil.
---@param hash string SHA-256 hex of the presented key
---@return integer|nil
function Store:api_key_id(hash)
  local r = self:_one("SELECT id FROM api_keys WHERE hash = ? AND revoked_at IS NULL", hash)
  return r and r.id
end
