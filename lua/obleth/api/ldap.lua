--- obleth.api.ldap — signing users in against the site's directory (docs/access.md "LDAP"): bind
-- as the user with their password, then read their groups from the directory. The role is the
-- access policy's (obleth.policy.access maps the groups); nothing here decides it. Talks to the
-- directory through obleth.ldap (host/ldap.c: libldap's async API on the event loop).
--
-- Configuration (environment of obleth serve; docs/access.md):
--   OBLETH_LDAP_URL            ldap://host[:port] or ldaps://host[:port] (an address keeps DNS off the loop)
--   OBLETH_LDAP_STARTTLS       1: StartTLS on an ldap:// URL before anything else is sent
--   OBLETH_LDAP_CA_FILE        the CAs (PEM) the server's certificate must chain to over TLS (default: the
--                              system's); the certificate is always verified and its name checked
--   OBLETH_LDAP_USER_DN        the user's DN, a template: uid={user},ou=people,dc=example,dc=org
--   or OBLETH_LDAP_USER_BASE   where to search the user (with OBLETH_LDAP_USER_FILTER, default (uid={user}))
--   OBLETH_LDAP_BIND_DN        who searches (default: anonymous), with
--   OBLETH_LDAP_BIND_PASSWORD_FILE  a file holding its password (never the environment)
--   OBLETH_LDAP_GROUP_BASE     where the groups are; OBLETH_LDAP_GROUP_FILTER, default
--                              (|(member={dn})(uniqueMember={dn})(memberUid={user})) (groupOfNames,
--                              groupOfUniqueNames, posixGroup); the group's name is its cn
--   OBLETH_LDAP_GROUP_SEARCH_AS  user (default: the groups are read with the user's own bind) or bind_dn
--                              (with OBLETH_LDAP_BIND_DN's, for directories whose ACLs hide groups from users)
--   OBLETH_LDAP_TIMEOUT        seconds for each exchange with the directory (default 10)
-- {user} and {dn} are escaped for the filter (RFC 4515) or the DN (RFC 4514) they go in.
local M = {}

--- User names are at most this long.
M.MAX_USER = 256

local function nonempty(v) return v ~= nil and v ~= "" and v or nil end

--- The largest CA file (a site's bundle) and bind password file read, bytes.
M.MAX_CA_FILE = 1024 * 1024
M.MAX_PASSWORD_FILE = 4096

-- A small file read whole: a regular file (never a FIFO or a device, which would hang or fill memory)
-- of at most `max` bytes. Returns its text, or nil and {code = "invalid", message}.
local function read_small(path, max)
  local function refused(fmt, ...) return nil, { code = "invalid", message = fmt:format(path, ...) } end
  local ok, sys = pcall(require, "obleth.sys")
  if ok and sys.stat then
    local st = sys.stat(path)
    if not st then return refused("%s does not exist, or this process cannot reach it") end
    if st.type ~= "file" then return refused("%s is not a regular file") end
    if st.size > max then return refused("%s is larger than %d bytes", max) end
  end
  local f = io.open(path, "rb")
  if not f then return refused("%s cannot be read by this process") end
  local text = f:read(max + 1) or ""
  f:close()
  if #text > max then return refused("%s is larger than %d bytes", max) end
  return text
end

--- The LDAP settings from the environment, or nil when OBLETH_LDAP_URL is not set.
---@param getenv function|nil default os.getenv
---@return table|nil cfg, table|nil err {code = "invalid", field, message}
function M.from_env(getenv)
  getenv = getenv or os.getenv
  local url = nonempty(getenv("OBLETH_LDAP_URL"))
  if not url then return nil end
  local function bad(field, msg) return nil, { code = "invalid", field = field, message = field .. ": " .. msg } end
  -- the URL is logged at start: it names a host and a port, and nothing else (no user:password@)
  local hostport = url:match("^ldaps?://([^/]+)/?$")
  local host, port = (hostport or ""):match("^([%w%.%-]+)(.*)$")
  if not host then host, port = (hostport or ""):match("^(%[[%x:%.]+%])(.*)$") end
  local pn = port and port:match("^:(%d+)$")
  local port_ok = port == "" or (pn ~= nil and tonumber(pn) >= 1 and tonumber(pn) <= 65535)
  if not host or not port_ok then
    return bad("OBLETH_LDAP_URL", "expected ldap://HOST[:PORT] or ldaps://HOST[:PORT] (a host name or address, a port "
      .. "1..65535; no user or password in it)")
  end
  local cfg = {
    url = url, user_dn = nonempty(getenv("OBLETH_LDAP_USER_DN")), user_base = nonempty(getenv("OBLETH_LDAP_USER_BASE")),
    user_filter = nonempty(getenv("OBLETH_LDAP_USER_FILTER")) or "(uid={user})",
    bind_dn = nonempty(getenv("OBLETH_LDAP_BIND_DN")),
    group_base = nonempty(getenv("OBLETH_LDAP_GROUP_BASE")),
    group_filter = nonempty(getenv("OBLETH_LDAP_GROUP_FILTER"))
      or "(|(member={dn})(uniqueMember={dn})(memberUid={user}))",
    timeout = tonumber(nonempty(getenv("OBLETH_LDAP_TIMEOUT")) or "10"),
    ca_file = nonempty(getenv("OBLETH_LDAP_CA_FILE")),
    group_search_as = nonempty(getenv("OBLETH_LDAP_GROUP_SEARCH_AS")) or "user",
  }
  local st = (nonempty(getenv("OBLETH_LDAP_STARTTLS")) or "0"):lower()
  if st == "1" or st == "true" or st == "yes" then cfg.starttls = true
  elseif st ~= "0" and st ~= "false" and st ~= "no" then
    return bad("OBLETH_LDAP_STARTTLS", "1 or 0 (or true / false, yes / no)")
  end
  local ldaps = url:match("^ldaps://") ~= nil
  if cfg.starttls and ldaps then
    return bad("OBLETH_LDAP_STARTTLS", "is for an ldap:// URL (ldaps:// is TLS from the first byte)")
  end
  if cfg.ca_file then
    if not ldaps and not cfg.starttls then
      return bad("OBLETH_LDAP_CA_FILE", "is for TLS: an ldaps:// URL or OBLETH_LDAP_STARTTLS=1")
    end
    local head, ferr = read_small(cfg.ca_file, M.MAX_CA_FILE)
    if not head then return bad("OBLETH_LDAP_CA_FILE", ferr.message) end
    if not head:find("-----BEGIN CERTIFICATE-----", 1, true) then
      return bad("OBLETH_LDAP_CA_FILE", "no PEM certificate in " .. cfg.ca_file)
    end
  end
  if cfg.group_search_as ~= "user" and cfg.group_search_as ~= "bind_dn" then
    return bad("OBLETH_LDAP_GROUP_SEARCH_AS", "user or bind_dn")
  end
  if cfg.group_search_as == "bind_dn" and not cfg.bind_dn then
    return bad("OBLETH_LDAP_GROUP_SEARCH_AS", "bind_dn needs OBLETH_LDAP_BIND_DN (and its password file)")
  end
  if cfg.user_dn and not cfg.user_dn:find("{user}", 1, true) then
    return bad("OBLETH_LDAP_USER_DN", "a template naming {user}, e.g. uid={user},ou=people,dc=example,dc=org")
  end
  if not cfg.user_dn and not cfg.user_base then
    return bad("OBLETH_LDAP_USER_DN", "set it (a template with {user}) or OBLETH_LDAP_USER_BASE")
  end
  if not cfg.user_dn and not cfg.user_filter:find("{user}", 1, true) then
    return bad("OBLETH_LDAP_USER_FILTER", "a filter naming {user}, e.g. (uid={user})")
  end
  if not cfg.timeout or cfg.timeout <= 0 or cfg.timeout > 300 then
    return bad("OBLETH_LDAP_TIMEOUT", "seconds, more than 0 and at most 300")
  end
  local pwfile = nonempty(getenv("OBLETH_LDAP_BIND_PASSWORD_FILE"))
  if cfg.bind_dn then
    if not pwfile then return bad("OBLETH_LDAP_BIND_PASSWORD_FILE", "needed with OBLETH_LDAP_BIND_DN") end
    local text, ferr = read_small(pwfile, M.MAX_PASSWORD_FILE)
    if not text then return bad("OBLETH_LDAP_BIND_PASSWORD_FILE", ferr.message) end
    local pw = text:gsub("[\r\n]+$", "")
    if pw == "" then return bad("OBLETH_LDAP_BIND_PASSWORD_FILE", "the file is empty") end
    cfg.bind_password = pw
  end
  return cfg
end

--- Put escaped values in a template: {user} and {dn}.
local function fill(template, values, escape)
  return (template:gsub("{(%a+)}", function(k) return values[k] and escape(values[k]) or nil end))
end

local function fail(code, message) return nil, { code = code, message = message } end

--- Sign `user` in with `password`.
---@param cfg table from from_env
---@param user string
---@param password string
---@return table|nil who {user, groups, dn}, table|nil err {code = "invalid_credentials" (wrong password, or
---  nobody by that name) | "unavailable" (the directory cannot be reached or failed), message}
function M.signin(cfg, user, password)
  local ldap = require "obleth.ldap"
  -- no ':' in a user name: "token:admin" and the like name tokens, never a user (obleth.api.access)
  if type(user) ~= "string" or user == "" or #user > M.MAX_USER or user:find("%c") or user:find(":", 1, true) then
    return fail("invalid_credentials", "no such user, or a wrong password")
  end
  if type(password) ~= "string" or password == "" then
    return fail("invalid_credentials", "no such user, or a wrong password")
  end
  local conn, err = ldap.open(cfg.url, { timeout = cfg.timeout, starttls = cfg.starttls, ca_file = cfg.ca_file })
  if not conn then return fail("unavailable", "the directory: " .. err.message) end
  local function unavailable(e)
    conn:close()
    if e.code == "invalid_credentials" and cfg.bind_dn then
      return fail("unavailable", "the directory refused OBLETH_LDAP_BIND_DN's password")
    end
    return fail("unavailable", "the directory: " .. e.message)
  end
  local dn
  local name = user
  if cfg.user_dn then
    dn = fill(cfg.user_dn, { user = user }, ldap.escape_dn)
  else
    if cfg.bind_dn then
      local ok, berr = conn:bind(cfg.bind_dn, cfg.bind_password)
      if not ok then return unavailable(berr) end
    end
    local found, serr = conn:search(cfg.user_base, "sub", fill(cfg.user_filter, { user = user }, ldap.escape_filter),
      { "uid" }, { limit = 2 })
    if not found then return unavailable(serr) end
    if #found ~= 1 then -- nobody, or a name that is not one person's
      conn:close()
      return fail("invalid_credentials", "no such user, or a wrong password")
    end
    dn = found[1].dn
  end
  local ok, berr = conn:bind(dn, password)
  if not ok then
    conn:close()
    if berr.code == "invalid_credentials" then return fail("invalid_credentials", "no such user, or a wrong password") end
    return fail("unavailable", "the directory: " .. berr.message)
  end
  -- the name as the directory spells it (Alice and alice bind alike; the audit trail says one)
  local me = conn:search(dn, "base", "(objectClass=*)", { "uid" }, { limit = 1 })
  local uid = me and me[1] and me[1].attrs.uid and me[1].attrs.uid[1]
  if uid and uid:lower() == user:lower() then name = uid end
  local groups = {}
  if cfg.group_base then
    if cfg.group_search_as == "bind_dn" then -- the user proved who they are; the service account reads
      local gok, gerr = conn:bind(cfg.bind_dn, cfg.bind_password)
      if not gok then return unavailable(gerr) end
    end
    local filter = cfg.group_filter:gsub("{(%a+)}", function(k)
      if k == "dn" then return ldap.escape_filter(dn) end
      if k == "user" then return ldap.escape_filter(name) end
      return nil
    end)
    local found, serr = conn:search(cfg.group_base, "sub", filter, { "cn" }, { limit = 1000 })
    if not found then return unavailable(serr) end
    for _, e in ipairs(found) do
      for _, cn in ipairs(e.attrs.cn or {}) do groups[#groups + 1] = cn end
    end
    table.sort(groups)
  end
  conn:close()
  return { user = name, groups = groups, dn = dn }
end

return M
