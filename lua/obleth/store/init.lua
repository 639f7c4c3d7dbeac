--- obleth.store — the Management API's durable store, behind one interface. The semantics live in
-- obleth.store.base and its table-group modules (models, specs, replicas, settings, provisioner,
-- launches, recipes, keys), written once, as are the migrations (obleth.store.migrations); a backend
-- (obleth.store.sqlite, obleth.store.pg) brings the connection and the transactions, and its words of
-- SQL are obleth.store.dialect's. Callers see tables shaped like the API's JSON
-- (see docs/api.md and docs/managed-spec.md).
--
-- Errors: expected failures return nil, err with err.code one of
--   "not_found"  the model / replica / recipe does not exist
--   "conflict"   a unique name is taken, or the change is refused in this state (err.field)
--   "storage"    the database refused the write (busy, full, I/O); nothing was written; or
--                it cannot be opened or migrated (open)
--   "unsupported" open: a location this build has no backend for
--   "invalid"    open / locate: the location is neither a path, sqlite:PATH nor a postgresql:// URI
-- Misuse raises.
local M = {}

for _, group in ipairs({ "models", "specs", "replicas", "settings", "provisioner", "launches", "recipes", "keys",
  "sessions", "audit", "tokens", "load_shares" }) do
  require("obleth.store." .. group)
end

local function _decode(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

--- What a database location names, by allowlist: `sqlite:PATH`, a plain file path (":memory:" for
--- tests), or a `postgresql://` / `postgres://` URI. Anything else (a libpq keyword string
--- `host=... password=...`, a near-miss like `postgresql:/...`, another scheme) is refused, and the
--- error never quotes the value (it may hold a password).
---@param location string
---@return {backend: "sqlite"|"postgresql", path: string|nil, url: string|nil, masked: string, secrets: string[]}|nil
---@return {code: "invalid", message: string}|nil err
function M.locate(location)
  if type(location) ~= "string" or location == "" then
    return nil, { code = "invalid", message = "the database location is empty" }
  end
  local scheme, rest = location:match("^(postgres%a*)://(.*)$")
  if scheme == "postgresql" or scheme == "postgres" then
    if rest:find("%%") and (rest:gsub("%%%x%x", "")):find("%%") then
      return nil, { code = "invalid", message = "the database URI " .. scheme
        .. "://... has a malformed percent-encoding (a % not followed by two hex digits); its value is not shown" }
    end
    local authority, path, query = rest:match("^([^/?]*)(/?[^?]*)%??(.*)$")
    local userinfo, hostport = authority:match("^(.*)@([^@]*)$")
    if not userinfo then userinfo, hostport = "", authority end
    local user, password = userinfo:match("^([^:]*):(.*)$")
    if not user then user = userinfo end
    local secrets = { location }
    if password and password ~= "" then secrets[#secrets + 1] = password; secrets[#secrets + 1] = _decode(password) end
    local params = {}
    for k, v in query:gmatch("([^&=]*)=?([^&]*)") do
      if k ~= "" then
        params[_decode(k)] = _decode(v)
        if v ~= "" and k ~= "host" and k ~= "port" and k ~= "dbname" and k ~= "user" then
          secrets[#secrets + 1] = v; secrets[#secrets + 1] = _decode(v)
        end
      end
    end
    local function safe(s) return s and s:match("^[%w%.%-_%[%]:,/~]*$") and s or "?" end
    user = safe(_decode(user))
    local host = safe(_decode(hostport))
    local dbname = safe(_decode(path:sub(2)))
    local masked = scheme .. "://" .. (user ~= "" and user .. "@" or "") .. host .. "/" .. dbname
    local extra = {}
    for _, k in ipairs({ "host", "port", "dbname", "user" }) do
      if params[k] then extra[#extra + 1] = k .. "=" .. safe(params[k]) end
    end
    if #extra > 0 then masked = masked .. "?" .. table.concat(extra, "&") end
    table.sort(secrets, function(a, b) return #a > #b end) -- the longest first: a secret inside another
    return { backend = "postgresql", url = location, masked = masked, secrets = secrets }
  end
  local path = location:match("^sqlite:(.+)$")
  if path then return { backend = "sqlite", path = path, masked = path, secrets = {} } end
  if location:find("=", 1, true) or location:find("://", 1, true) or location:match("^%a[%w+.-]*:") then
    return nil, { code = "invalid", message = "the database location is neither a file path, sqlite:PATH nor a "
      .. "postgresql://USER:PASSWORD@HOST:PORT/DB URI (a libpq keyword string host=... is not accepted); "
      .. "its value is not shown, as it may hold a password" }
  end
  return { backend = "sqlite", path = location, masked = location, secrets = {} }
end

--- Text with every secret part of a location (see locate) replaced by ***: for a message that may
--- quote it (libpq's errors can).
---@param loc table from locate
---@param text string
---@return string
function M.mask(loc, text)
  text = tostring(text)
  for _, s in ipairs(loc.secrets) do
    if #s >= 1 then
      local i, j = text:find(s, 1, true)
      while i do
        text = text:sub(1, i - 1) .. "***" .. text:sub(j + 1)
        i, j = text:find(s, i + 3, true)
      end
    end
  end
  return text
end

--- Open a store.
---@param location string see locate: a file path (or sqlite:PATH) for SQLite (":memory:" for tests), or
---  postgresql://... (or postgres://...) for PostgreSQL (from a task: the backend waits on the event loop)
---@param opts table|nil {busy_timeout = ms (SQLite), pool = connections (PostgreSQL), log = obleth.log}
---@return table|nil store
---@return {code: "unsupported"|"storage"|"invalid", message: string}|nil err
function M.open(location, opts)
  if type(location) ~= "string" or location == "" then error("store.open: expects a path", 2) end
  local loc, err = M.locate(location)
  if not loc then return nil, err end
  if opts and opts.log and opts.log.add_secret then
    for _, s in ipairs(loc.secrets) do if s ~= location and #s >= 4 then opts.log.add_secret(s) end end
  end
  if loc.backend == "postgresql" then return require("obleth.store.pg").open(location, opts, loc) end
  return require("obleth.store.sqlite").open(loc.path, opts)
end

return M
