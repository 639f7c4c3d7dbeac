--- obleth.store.tokens — personal access tokens (docs/access.md "Tokens for scripts"): methods of the
-- store object (obleth.store.base), in the SQL every backend speaks. Only a token's SHA-256 is kept.
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now = util.NULL, util.abort, util.now

local function _out(r)
  if not r then return nil end
  return { id = r.id, user = r.username, name = r.name, prefix = r.prefix, role = r.role, created_at = r.created_at,
    revoked_at = r.revoked_at or NULL }
end

--- Keep a new token (its hash only).
---@param t {user: string, name: string, prefix: string, hash: string, role: string}
---@return table|nil token {id, user, name, prefix, role, created_at, revoked_at}, table|nil err
function Store:create_personal_token(t)
  return self:transaction(function()
    local id = self:_insert([[INSERT INTO personal_tokens (username, name, prefix, hash, role, created_at)
      VALUES (?, ?, ?, ?, ?, ?)]], t.user, t.name, t.prefix, t.hash, t.role, _now())
    return _out(self:_one("SELECT * FROM personal_tokens WHERE id = ?", id))
  end)
end

--- A user's tokens (every user's when user is nil), without secrets, by id.
---@param user string|nil
function Store:list_personal_tokens(user)
  local rows = user and self:_q("SELECT * FROM personal_tokens WHERE username = ? ORDER BY id", user)
    or self:_q("SELECT * FROM personal_tokens ORDER BY id")
  local out = json.array()
  for _, r in ipairs(rows) do out[#out + 1] = _out(r) end
  return out
end

--- One token by id, or nil.
function Store:get_personal_token(id)
  return _out(self:_one("SELECT * FROM personal_tokens WHERE id = ?", id))
end

--- Revoke a token (idempotent: it keeps its first revoked_at).
---@return table|nil token, table|nil err (not_found)
function Store:revoke_personal_token(id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM personal_tokens WHERE id = ?", id) then
      _abort("not_found", ("personal token %s does not exist"):format(tostring(id)))
    end
    self:_x("UPDATE personal_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", _now(), id)
    return _out(self:_one("SELECT * FROM personal_tokens WHERE id = ?", id))
  end)
end

--- The unrevoked token with this hash {id, user, role}, or nil.
---@param hash string SHA-256 hex of the presented token
function Store:personal_token_by_hash(hash)
  local r = self:_one("SELECT id, username, role FROM personal_tokens WHERE hash = ? AND revoked_at IS NULL", hash)
  return r and { id = r.id, user = r.username, role = r.role }
end
