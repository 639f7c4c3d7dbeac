--- obleth.api.access — who is asking, and whether they may (docs/access.md). The decision is the
-- access policy's (obleth.policy.access, overridable in policy.d); this module only gathers the
-- identity from the request and words the refusal.
--
-- An identity: {user = "alice" | nil, groups = {...}, via = "token"|"session"|"proxy"|"pat",
--   admin = true (the admin token, or a session signed in with it), role, actor}
-- actor is how logs and the audit trail name it: the user's name, or "token:admin" for the admin
-- token. A user name never has a ':' (a proxy naming one is refused), so no user can be taken for a
-- token in the audit trail or the logs: the two are told apart by construction, not by a list.
local cidr = require "obleth.util.cidr"

local M = {}

--- How the admin token is named where a user's name would be.
M.ADMIN_ACTOR = "token:admin"

--- The trusted-proxy settings from the environment (OBLETH_AUTH_PROXY_HEADER,
--- OBLETH_AUTH_PROXY_GROUPS_HEADER, OBLETH_AUTH_PROXY_FROM), or nil when no header is named.
---@param getenv function|nil default os.getenv
---@return table|nil proxy {header, groups_header, from = ranges, from_text}, table|nil err {code = "invalid",
---  field = "OBLETH_AUTH_PROXY_FROM", message}
function M.proxy_from_env(getenv)
  getenv = getenv or os.getenv
  local header = getenv("OBLETH_AUTH_PROXY_HEADER")
  if not header or header == "" then return nil end
  local from_text = getenv("OBLETH_AUTH_PROXY_FROM") or ""
  local from, err = cidr.parse_list(from_text)
  if not from then
    return nil, { code = "invalid", field = "OBLETH_AUTH_PROXY_FROM", message = "OBLETH_AUTH_PROXY_FROM: " .. err.message }
  end
  if #from == 0 then
    return nil, { code = "invalid", field = "OBLETH_AUTH_PROXY_FROM",
      message = "OBLETH_AUTH_PROXY_FROM must name the proxy's addresses when OBLETH_AUTH_PROXY_HEADER is set" }
  end
  local groups = getenv("OBLETH_AUTH_PROXY_GROUPS_HEADER")
  return { header = header:lower(), groups_header = groups and groups ~= "" and groups:lower() or nil,
    from = from, from_text = from_text }
end

--- A groups header's names: separated by commas or semicolons, spaces around them dropped.
---@param v string|nil
---@return string[]
function M.split_groups(v)
  local out = {}
  for g in tostring(v or ""):gmatch("[^,;]+") do
    g = g:match("^%s*(.-)%s*$")
    if g ~= "" then out[#out + 1] = g end
  end
  return out
end

--- The identity a trusted proxy vouches for, or nil (no header, or not from a trusted address:
--- then the header is ignored and logged).
---@param proxy table from proxy_from_env
---@param req table {headers, remote_addr}
---@param log table
function M.from_proxy(proxy, req, log)
  local hs = req.headers or {}
  local user = hs[proxy.header]
  if type(user) ~= "string" then return nil end
  user = user:match("^%s*(.-)%s*$")
  if user == "" then return nil end
  if not cidr.contains(proxy.from, req.remote_addr or "") then
    log.warn("auth_proxy_header_ignored", { remote_addr = req.remote_addr, header = proxy.header,
      reason = "not from OBLETH_AUTH_PROXY_FROM" })
    return nil
  end
  -- a header the proxy let through twice (one set by the proxy, one sent by the client, or a second
  -- hop's) is never merged into one name or one group list: nobody is believed
  local rep = req.repeated or {}
  for _, h in ipairs({ proxy.header, proxy.groups_header }) do
    if rep[h] then
      log.warn("auth_proxy_header_ignored", { remote_addr = req.remote_addr, header = h, reason = "repeated",
        times = rep[h] })
      return nil, { code = "proxy_header_repeated", field = h,
        message = ("the trusted proxy's %s header came %d times: the proxy must set it once, replacing what the "
          .. "client sent"):format(h, rep[h]) }
    end
  end
  if #user > 256 or user:find("%c") or user:find(":", 1, true) then
    log.warn("auth_proxy_header_ignored", { remote_addr = req.remote_addr, header = proxy.header,
      reason = "not a user name" })
    return nil, { code = "proxy_user_invalid", field = proxy.header,
      message = ("the trusted proxy's %s header is not a user name (at most 256 bytes, no control character, "
        .. "no ':')"):format(proxy.header) }
  end
  local groups = proxy.groups_header and M.split_groups(hs[proxy.groups_header]) or {}
  return { user = user, groups = groups, via = "proxy" }
end

--- Fill in an identity's role and actor from the access policy.
---@param ident table
---@param policy table|nil the access policy module (its role_of and DEFAULTS); nil for the admin token
---@return table ident
function M.resolve(ident, policy)
  if ident.admin then
    ident.role = "admin"
  elseif ident.token_role then
    ident.role = ident.token_role -- a personal token acts with the role it was made with
  else
    ident.role, ident.role_from = policy.role_of(ident, policy.DEFAULTS)
  end
  ident.actor = ident.admin and M.ADMIN_ACTOR or ident.user
  return ident
end

--- May the request's identity take `action`? What a route that answers everyone asks before it shows
--- a secret (a viewer "sees everything but secrets"). No identity (an internal call) and the admin
--- token may; a user, as the access policy says of their role.
---@param ctx table the request's context (ctx.identity, ctx.app)
---@param action string
---@return boolean
function M.may(ctx, action)
  local ident = ctx.identity
  if not ident or ident.admin then return true end
  local pol = ctx.app:access_policy()
  return (pol.allows(ident.role, action, pol.DEFAULTS))
end

--- The 403 body for a refused action: it names the action and the role that has it.
---@return integer status, table body
function M.refusal(ident, action, needs)
  local who = ident.admin and "the admin token" or ("%s (role %s)"):format(ident.user or "?", ident.role)
  return 403, { error = { code = "forbidden", action = action, role = needs,
    message = ("%s may not %s: that needs the %s role"):format(who, action, needs) } }
end

return M
