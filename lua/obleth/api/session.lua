--- The dashboard's sign-in (docs/dashboard.md): the admin token, typed once on
-- /signin, is exchanged for an HttpOnly session cookie (obleth.api.sessions).
local errors = require "obleth.api.errors"
local sessions = require "obleth.api.sessions"

local M = {}

local function create(ctx)
  local app = ctx.app
  local addr = ctx.req.remote_addr
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  for k in pairs(b) do
    if k ~= "token" then return errors.fail(400, "invalid", "unknown field: " .. k, k) end
  end
  if type(b.token) ~= "string" or b.token == "" then
    return errors.fail(400, "invalid", "token: the admin token is required", "token")
  end
  if not require("obleth.sys").consteq(b.token, app._token) then
    -- the throttle holds back wrong tokens only: behind a proxy every browser shares one
    -- address, and ten wrong guesses must not lock the admin out
    local wait = app.sessions:throttled(addr)
    if wait then
      local st429, body = errors.fail(429, "too_many_attempts",
        ("too many wrong tokens from this address: try again in %d s"):format(wait))
      return st429, body, { ["Retry-After"] = tostring(wait) }
    end
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
    actor = ident.actor, can = require("obleth.util.json").array(can) }
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
  SessionInput = { type = "object", additionalProperties = false, required = { "token" }, properties = {
    token = { type = "string", description = "the admin token (OBLETH_ADMIN_TOKEN)" } } },
}

M.routes = {
  { "POST", "/api/v1/session", create, body = "SessionInput", public = true, changes = {}, tag = "dashboard",
    summary = "Sign in: the admin token for an HttpOnly session cookie (204; 401 wrong token; 429 after "
      .. sessions.FAILURES .. " wrong ones in " .. sessions.WINDOW .. " s)" },
  { "GET", "/api/v1/session", show, action = "session.own", tag = "dashboard",
    summary = "Whether the request is signed in: {signed_in, expires_at (epoch s; null for the bearer token), via "
      .. "(token, session, proxy), user, role, groups, actor, can (the actions the role may take)}" },
  { "DELETE", "/api/v1/session", delete, public = true, changes = {}, tag = "dashboard",
    summary = "Sign out: the session is revoked and its cookie cleared (204)" },
}

return M
