--- Personal access tokens (docs/access.md "Tokens for scripts"): a signed-in user makes tokens for
-- their scripts, each limited to a role no higher than theirs, revocable, kept hashed. A script sends
-- one as Authorization: Bearer obp_...; it acts as the user, with the token's role.
local errors = require "obleth.api.errors"
local params = require "obleth.api.params"

local M = {}

--- Personal tokens look like obp_<48 hex characters> (192 random bits).
M.PREFIX = "obp_"
M.RANDOM_BYTES = 24
--- Characters kept (and listed) to tell tokens apart: "obp_" and 8 hex.
M.SHOWN = 12

--- The roles a personal token of this identity may have, least first: every role up to the
--- identity's own; none for the admin token, which is no user and makes no token. The one owner of
--- that rule: POST /api/v1/tokens checks it, GET /api/v1/session tells the dashboard (token_roles).
---@param ident {user: string|nil, role: string}
---@param pol table the access policy (obleth.policy.access or its override)
---@return string[] roles
function M.roles_for(ident, pol)
  local out = {}
  if not ident.user then return out end
  local mine = pol.rank(ident.role) or 0
  for _, r in ipairs(pol.ROLES) do
    if pol.rank(r) <= mine then out[#out + 1] = r end
  end
  return out
end

--- May this identity list and revoke another user's tokens? The policy's `users.manage`.
local function _manages_users(ctx)
  local pol = ctx.app:access_policy()
  return (pol.allows(ctx.identity.role, "users.manage", pol.DEFAULTS))
end

local function list(ctx)
  local ident = ctx.identity
  local user = ident.user
  if ctx.query.user then
    if ctx.query.user ~= user and not _manages_users(ctx) then
      return errors.fail(403, "forbidden", "user: listing another user's tokens needs users.manage", "user")
    end
    user = ctx.query.user
  elseif ident.admin then
    user = nil -- the admin token: every user's
  end
  return 200, { tokens = ctx.app.store:list_personal_tokens(user) }
end

local function create(ctx)
  local ident = ctx.identity
  if not ident.user then
    return errors.fail(409, "conflict", "the admin token is no user: sign in as yourself to make a personal token")
  end
  if ident.via == "pat" then
    -- a token that could make tokens would outlive its own revocation through the ones it made
    return errors.fail(403, "forbidden", "a personal access token cannot make another: sign in as yourself to make one")
  end
  local b = ctx.json or {}
  local fields = M.schemas.PersonalTokenInput.properties
  for k in pairs(b) do
    if not fields[k] then
      local names = {}
      for n in pairs(fields) do names[#names + 1] = n end
      table.sort(names)
      return errors.fail(400, "invalid", ("unknown field: %s (%s)"):format(k, table.concat(names, ", ")), k)
    end
  end
  local name = b.name
  if name == nil or name == require("cjson").null then name = "" end
  if type(name) ~= "string" or #name > 128 or name:find("%c") then
    return errors.fail(400, "invalid", "name: must be at most 128 characters without control characters", "name")
  end
  local role = b.role
  if role == nil or role == require("cjson").null then role = ident.role end
  local pol = ctx.app:access_policy()
  if type(role) ~= "string" or not pol.rank(role) then
    return errors.fail(400, "invalid", "role: must be one of " .. table.concat(pol.ROLES, ", "), "role")
  end
  local allowed = false
  for _, r in ipairs(M.roles_for(ident, pol)) do allowed = allowed or r == role end
  if not allowed then
    return errors.fail(403, "forbidden", ("%s has the %s role: a token of theirs cannot be %s"):format(ident.user,
      ident.role, role), "role", { role = ident.role })
  end
  local key = M.PREFIX .. require("obleth.sys").random_hex(M.RANDOM_BYTES)
  local t, err = ctx.app.store:create_personal_token { user = ident.user, name = name, prefix = key:sub(1, M.SHOWN),
    hash = require("obleth.crypto").sha256_hex(key), role = role }
  if not t then return errors.store(err) end
  ctx.app.log.info("personal_token_created", { id = t.id, actor = ctx.actor, role = role, prefix = t.prefix })
  t.token = key
  return 201, t, { Location = "/api/v1/tokens/" .. t.id }
end

local function revoke(ctx)
  local id = params.int_param(ctx, "id")
  local t = id and ctx.app.store:get_personal_token(id)
  local ident = ctx.identity
  if not t or (t.user ~= ident.user and not _manages_users(ctx)) then
    return errors.not_found("personal token", ctx.params.id)
  end
  local r, err = ctx.app.store:revoke_personal_token(id)
  if not r then return errors.store(err) end
  ctx.app.log.info("personal_token_revoked", { id = id, actor = ctx.actor, user = t.user })
  return 200, r
end

M.schemas = {
  PersonalTokenInput = { type = "object", additionalProperties = false, properties = {
    name = { type = "string", maxLength = 128, description = "what the token is for" },
    role = { type = "string", enum = { "viewer", "operator", "admin" },
      description = "the token's role, at most the user's (default: the user's)" } } },
}

M.routes = {
  { "GET", "/api/v1/tokens", list, action = "session.own", tag = "access", query = { "user" },
    summary = "Your personal access tokens (with users.manage, an admin's: ?user=; the admin token: everyone's); "
      .. "never the token" },
  { "POST", "/api/v1/tokens", create, action = "session.own", tag = "access", body = "PersonalTokenInput",
    body_optional = true, changes = {},
    summary = "Make a personal access token for scripts (Authorization: Bearer obp_...), acting as you with a "
      .. "role no higher than yours; the answer's `token` is shown this once (only its hash is stored)" },
  { "DELETE", "/api/v1/tokens/{id}", revoke, action = "session.own", tag = "access", changes = {},
    summary = "Revoke one of your personal access tokens (with users.manage, an admin's: anyone's); it stops "
      .. "working at once" },
}

return M
