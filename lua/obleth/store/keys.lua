--- obleth.store.keys — client API keys: methods of the store object (obleth.store.base), in the SQL every
-- backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now = util.NULL, util.abort, util.now

---------------------------------------------------------------------------
-- client API keys and routing reads (obleth.router, obleth.api.keys)
---------------------------------------------------------------------------

local function _usage_out(r)
  return { requests = r.requests or 0, limited = r.limited or 0, prompt_tokens = r.prompt_tokens or 0,
    completion_tokens = r.completion_tokens or 0, updated_at = r.usage_at or NULL }
end

local function _key_out(r)
  if not r then return nil end
  return { id = r.id, name = r.name, prefix = r.prefix, created_at = r.created_at, revoked_at = r.revoked_at or NULL,
    owner = r.owner or NULL, requests_per_minute = r.requests_per_minute or NULL,
    max_concurrent = r.max_concurrent or NULL, usage = _usage_out(r) }
end

local KEY_SELECT = [[SELECT k.*, u.requests, u.limited, u.prompt_tokens, u.completion_tokens,
    u.updated_at AS usage_at FROM api_keys k LEFT JOIN api_key_usage u ON u.key_id = k.id]]

--- Store a new client key (its hash only; the key itself is never stored).
---@param k {name: string, prefix: string, hash: string, owner: string|nil, requests_per_minute: integer|nil,
---  max_concurrent: integer|nil} hash = SHA-256 hex of the key; owner: who made it; limits nil: none
---@return table|nil key {id, name, prefix, created_at, revoked_at, owner, requests_per_minute, max_concurrent,
---  usage}, table|nil err
function Store:create_api_key(k)
  return self:transaction(function()
    local id = self:_insert([[INSERT INTO api_keys (name, prefix, hash, created_at, owner, requests_per_minute,
        max_concurrent) VALUES (?, ?, ?, ?, ?, ?, ?)]],
      k.name, k.prefix, k.hash, _now(), k.owner, k.requests_per_minute, k.max_concurrent)
    return _key_out(self:_one(KEY_SELECT .. " WHERE k.id = ?", id))
  end)
end

--- Every client key, without secrets, with its limits and usage, by id.
function Store:list_api_keys()
  local out = json.array()
  for _, r in ipairs(self:_q(KEY_SELECT .. " ORDER BY k.id")) do out[#out + 1] = _key_out(r) end
  return out
end

--- One client key (without secrets) with its limits and usage, or nil.
---@param id integer
function Store:get_api_key(id)
  return _key_out(self:_one(KEY_SELECT .. " WHERE k.id = ?", id))
end

-- A counter plus its delta, saturating (the test comes before the sum: PostgreSQL's bigint would
-- overflow in the sum itself).
local function _sat(col)
  return ("CASE WHEN api_key_usage.%s > 4611686018427387903 - excluded.%s THEN 4611686018427387903 "
    .. "ELSE api_key_usage.%s + excluded.%s END"):format(col, col, col, col)
end

-- A delta as an integer within [0, the counter's bound]
local function _cap(v)
  v = math.tointeger(v) or 0
  if v < 0 then return 0 end
  return math.min(v, 4611686018427387903)
end

--- The most a usage counter holds: a sum that would pass it stays at it (saturates, never wraps or
--- turns REAL on SQLite / bigint out of range on PostgreSQL); 2^62-1, so prompt + completion fits too.
Store.USAGE_COUNTER_MAX = 4611686018427387903

--- Add to the keys' usage counters, in one transaction (each counter saturates at USAGE_COUNTER_MAX).
---@param deltas table<integer, {requests: integer, limited: integer, prompt_tokens: integer,
---  completion_tokens: integer}> by key id (a key deleted meanwhile is skipped)
---@return true|nil ok, table|nil err
function Store:add_api_key_usage(deltas)
  return self:transaction(function()
    local now = _now()
    for id, d in pairs(deltas) do
      self:_x([[INSERT INTO api_key_usage (key_id, requests, limited, prompt_tokens, completion_tokens, updated_at)
          SELECT id, ?, ?, ?, ?, ? FROM api_keys WHERE id = ?
        ON CONFLICT (key_id) DO UPDATE SET requests = ]] .. _sat("requests") .. [[,
          limited = ]] .. _sat("limited") .. [[,
          prompt_tokens = ]] .. _sat("prompt_tokens") .. [[,
          completion_tokens = ]] .. _sat("completion_tokens") .. [[,
          updated_at = excluded.updated_at]],
        _cap(d.requests), _cap(d.limited), _cap(d.prompt_tokens), _cap(d.completion_tokens), now, id)
    end
    return true
  end)
end

--- Revoke a key (idempotent: a revoked key keeps its first revoked_at).
---@return table|nil key, table|nil err (not_found)
function Store:revoke_api_key(id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM api_keys WHERE id = ?", id) then
      _abort("not_found", ("API key %s does not exist"):format(tostring(id)))
    end
    self:_x("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", _now(), id)
    return _key_out(self:_one(KEY_SELECT .. " WHERE k.id = ?", id))
  end)
end

--- The id of the unrevoked key with this hash, or nil.
---@param hash string SHA-256 hex of the presented key
---@return integer|nil
function Store:api_key_id(hash)
  local r = self:_one("SELECT id FROM api_keys WHERE hash = ? AND revoked_at IS NULL", hash)
  return r and r.id
end

--- What the router needs of the unrevoked key with this hash, or nil.
---@param hash string SHA-256 hex of the presented key
---@return {id: integer, requests_per_minute: integer|nil, max_concurrent: integer|nil}|nil
function Store:api_key_limits(hash)
  return self:_one([[SELECT id, requests_per_minute, max_concurrent FROM api_keys
    WHERE hash = ? AND revoked_at IS NULL]], hash)
end
