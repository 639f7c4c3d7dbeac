--- The dashboard's sign-in (docs/dashboard.md): the admin token, typed once on
-- /signin, is exchanged for an HttpOnly session cookie (obleth.api.sessions); or, when the site's
-- directory is configured (OBLETH_LDAP_URL, docs/access.md "LDAP"), a user's name and password
-- (obleth.api.ldap): the session then carries the user and their groups.
local errors = require "obleth.api.errors"
local sessions = require "obleth.api.sessions"

local M = {}

local function too_many(wait, what)
  local st429, body = errors.fail(429, "too_many_attempts",
    ("too many wrong %s from this address: try again in %d s"):format(what, wait))
  return st429, body, { ["Retry-After"] = tostring(wait) }
end

-- Sign a user in against the directory: {user, password}.
local function create_ldap(ctx, b)
  local app = ctx.app
  local addr = ctx.req.remote_addr
  if not app.ldap then
    return errors.fail(400, "invalid", "user: this server signs in with the admin token only (no OBLETH_LDAP_URL)",
      "user")
  end
  if type(b.user) ~= "string" or b.user == "" then return errors.fail(400, "invalid", "user: required", "user") end
  if type(b.password) ~= "string" or b.password == "" then
    return errors.fail(400, "invalid", "password: required", "password")
  end
  -- every wrong password counts, and the directory is not asked again until the window passes
  local wait = app.sessions:throttled(addr)
  if wait then return too_many(wait, "passwords") end
  local who, err = require("obleth.api.ldap").signin(app.ldap, b.user, b.password)
  if not who then
    if err.code == "invalid_credentials" then
      app.sessions:failed(addr)
      app.log.warn("session_refused", { remote_addr = addr, user = b.user:sub(1, 64), reason = "ldap" })
      return errors.fail(401, "unauthorized", "no such user, or a wrong password")
    end
    app.log.error("ldap_failed", { remote_addr = addr, error = err.message })
    return errors.fail(503, "ldap_unavailable", "cannot sign in now: " .. err.message)
  end
  if ctx.auth == "session" then app.sessions:revoke(ctx.session_id) end
  local id, expires_at = app.sessions:create(app._token, { user = who.user, groups = who.groups })
  app.log.info("session_created", { remote_addr = addr, actor = who.user, groups = table.concat(who.groups, ","),
    expires_at = expires_at })
  return 204, "", { ["Set-Cookie"] = sessions.set_cookie(id, app:secure_cookie(ctx.req)) }
end

local function create(ctx)
  local app = ctx.app
  local addr = ctx.req.remote_addr
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  for k in pairs(b) do
    if k ~= "token" and k ~= "user" and k ~= "password" then
      return errors.fail(400, "invalid", "unknown field: " .. k, k)
    end
  end
  if b.user ~= nil or b.password ~= nil then
    if b.token ~= nil then return errors.fail(400, "invalid", "token: either the admin token or user and password", "token") end
    return create_ldap(ctx, b)
  end
  if type(b.token) ~= "string" or b.token == "" then
    return errors.fail(400, "invalid", "token: the admin token is required", "token")
  end
  if not require("obleth.sys").consteq(b.token, app._token) then
    -- the throttle holds back wrong tokens only: behind a proxy every browser shares one
    -- address, and ten wrong guesses must not lock the admin out
    local wait = app.sessions:throttled(addr)
    if wait then return too_many(wait, "tokens") end
    app.sessions:failed(addr)
    app.log.warn("session_refused", { remote_addr = addr })
    return errors.fail(401, "unauthorized", "that is not the admin token")
  end
  -- signing in again replaces the session the browser had
  if ctx.auth == "session" then app.sessions:revoke(ctx.session_id) end
  local id, expires_at = app.sessions:create(app._token)
  app.log.info("session_created", { remote_addr = addr, expires_at = expires_at })
  return 204, "", { ["Set-Cookie"] = sessions.set_cookie(id, app:secure_cookie(ctx.req)) }
end

local function show(ctx)
  local s = ctx.auth == "session" and ctx.app.sessions:check(ctx.session_id, ctx.app._token)
  local ident = ctx.identity
  local pol = ctx.app:access_policy()
  local can = {}
  for action in pairs(pol.actions_of(ident.role, pol.DEFAULTS)) do can[#can + 1] = action end
  table.sort(can)
  local null = require("cjson").null
  return 200, { signed_in = true, expires_at = s and s.expires_at or null,
    via = ctx.identity.via == "pat" and "pat" or ctx.auth == "session" and "session" or ctx.auth == "proxy" and "proxy"
      or "token",
    user = ident.user or null, role = ident.role, groups = require("obleth.util.json").array(ident.groups or {}),
    actor = ident.actor, can = require("obleth.util.json").array(can),
    token_roles = require("obleth.util.json").array(require("obleth.api.tokens").roles_for(ident, pol)) }
end

-- How one signs in here (public: the sign-in page asks before anyone has).
local function methods(ctx)
  return 200, { token = true, ldap = ctx.app.ldap ~= nil }
end

local function delete(ctx)
  local app = ctx.app
  if ctx.auth == "session" then
    app.sessions:revoke(ctx.session_id)
    app.events:close_owned(ctx.session_id)
    app.log.info("session_ended", { remote_addr = ctx.req.remote_addr })
  end
  return 204, "", { ["Set-Cookie"] = sessions.set_cookie(nil, app:secure_cookie(ctx.req)) }
end

M.schemas = {
  SessionInput = { type = "object", additionalProperties = false, properties = {
    token = { type = "string", description = "the admin token (OBLETH_ADMIN_TOKEN)" },
    user = { type = "string", description = "a user of the site's directory (with password; OBLETH_LDAP_URL)" },
    password = { type = "string", format = "password", description = "the user's password in the directory" } } },
}

M.routes = {
  { "POST", "/api/v1/session", create, body = "SessionInput", public = true, changes = {}, tag = "dashboard",
    summary = "Sign in: the admin token, or a user and password of the site's directory (LDAP), for an HttpOnly "
      .. "session cookie (204; 401 wrong token or password; 429 after " .. sessions.FAILURES .. " wrong ones in "
      .. sessions.WINDOW .. " s; 503 ldap_unavailable)" },
  { "GET", "/api/v1/session/methods", methods, public = true, tag = "dashboard",
    summary = "How one signs in here: {token: true, ldap: true when users sign in with the site's directory}" },
  { "GET", "/api/v1/session", show, action = "session.own", tag = "dashboard",
    summary = "Whether the request is signed in: {signed_in, expires_at (epoch s; null for the bearer token), via "
      .. "(token, session, proxy, pat), user, role, groups, actor, can (the actions the role may take), token_roles "
      .. "(the roles a personal access token of yours may have, least first; [] for the admin token)}" },
  { "DELETE", "/api/v1/session", delete, public = true, changes = {}, tag = "dashboard",
    summary = "Sign out: the session is revoked and its cookie cleared (204)" },
}

return M
