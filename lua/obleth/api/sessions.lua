--- obleth.api.sessions — the dashboard's sign-in sessions (docs/dashboard.md).
--
-- The admin token, typed once on /signin, is exchanged for a session: a random
-- id (32 bytes, hex) sent back as the HttpOnly cookie `obleth_session`. Sessions
-- live in memory (a restart signs everyone out), or, when several obleth serve
-- share a PostgreSQL store, in the store (obleth.store.sessions: only the SHA-256
-- of an id), so a session made on one instance is valid on all and the throttle
-- counts wrong tokens across them. Either way they are bound to the admin token
-- they were made with: once the server runs with another token, they no longer
-- count. Nothing here knows HTTP.
local sys = require "obleth.sys"
local crypto = require "obleth.crypto"

local M = {}

M.COOKIE = "obleth_session"
--- Seconds a session lasts (12 hours); sign-in again after.
M.TTL = 43200
--- Sessions kept at most; the one closest to expiry goes first.
M.MAX = 1000
--- Failed sign-ins allowed per client address within WINDOW seconds.
M.FAILURES = 10
M.WINDOW = 60

local Sessions = {}
Sessions.__index = Sessions

local Shared = {}
Shared.__index = Shared

---@param opts {now: function, store: table|nil}  now(): epoch seconds; store: keep the sessions in this
---  store (one shared by several instances) instead of in memory
function M.new(opts)
  if opts.store then return setmetatable({ store = opts.store, now = opts.now }, Shared) end
  return setmetatable({ by_id = {}, count = 0, now = opts.now, failures = {} }, Sessions)
end

local function _bind(token) return crypto.sha256_hex("obleth-session\0" .. token) end

--- A new session for the admin token now in force, or, with `who`, for a user signed in with the
--- directory (obleth.api.ldap): the session carries their name and groups (the role is the access
--- policy's, read on each request). Either is bound to the admin token in force.
---@param token string
---@param who {user: string, groups: string[]}|nil
---@return string id, integer expires_at
function Sessions:create(token, who)
  local now = math.floor(self.now())
  self:_sweep(now)
  if self.count >= M.MAX then
    local oldest, at
    for id, s in pairs(self.by_id) do
      if not at or s.expires_at < at then oldest, at = id, s.expires_at end
    end
    self:revoke(oldest)
  end
  local id = sys.random_hex(32)
  local s = { expires_at = now + M.TTL, bound = _bind(token), user = who and who.user,
    groups = who and who.groups }
  self.by_id[id] = s
  self.count = self.count + 1
  return id, s.expires_at
end

--- The session named by `id` if it is live and was made with `token`.
---@return table|nil {expires_at, user, groups} (user nil: signed in with the admin token)
function Sessions:check(id, token)
  if type(id) ~= "string" or not id:match("^%x+$") or #id ~= 64 then return nil end
  local s = self.by_id[id]
  if not s then return nil end
  if s.expires_at <= self.now() or not sys.consteq(s.bound, _bind(token)) then
    self:revoke(id)
    return nil
  end
  return s
end

function Sessions:revoke(id)
  if id and self.by_id[id] then
    self.by_id[id] = nil
    self.count = self.count - 1
  end
end

function Sessions:_sweep(now)
  for id, s in pairs(self.by_id) do
    if s.expires_at <= now then self:revoke(id) end
  end
  for addr, f in pairs(self.failures) do
    if now - f.since > M.WINDOW then self.failures[addr] = nil end
  end
end

--- Seconds to wait before `addr` may try another token, or nil when it may now.
function Sessions:throttled(addr)
  local f = self.failures[addr or "?"]
  if not f then return nil end
  local now = self.now()
  if now - f.since > M.WINDOW then
    self.failures[addr or "?"] = nil
    return nil
  end
  if f.n >= M.FAILURES then return math.max(1, math.ceil(f.since + M.WINDOW - now)) end
  return nil
end

--- Addresses whose wrong tokens are remembered at most (a sweep of stale ones first).
M.MAX_ADDRESSES = 10000

--- Count a wrong token from `addr`.
function Sessions:failed(addr)
  addr = addr or "?"
  local f = self.failures[addr]
  local now = self.now()
  if not f or now - f.since > M.WINDOW then
    if not f then
      self.nfailures = (self.nfailures or 0) + 1
      if self.nfailures > M.MAX_ADDRESSES then
        self:_sweep(now)
        local n = 0
        for _ in pairs(self.failures) do n = n + 1 end
        if n >= M.MAX_ADDRESSES then self.failures = {}; n = 0 end
        self.nfailures = n + 1
      end
    end
    f = { n = 0, since = now }
    self.failures[addr] = f
  end
  f.n = f.n + 1
end

-- The same in the shared store. A store that fails makes a sign-in fail (create raises) and a
-- session not count (check answers nil); a throttle that cannot be read lets the try through.
local function _id_hash(id) return crypto.sha256_hex(id) end

function Shared:create(token, who)
  local now = math.floor(self.now())
  local id = sys.random_hex(32)
  local expires_at = now + M.TTL
  assert(self.store:session_put(_id_hash(id), _bind(token), expires_at, now, M.MAX, who))
  return id, expires_at
end

function Shared:check(id, token)
  if type(id) ~= "string" or not id:match("^%x+$") or #id ~= 64 then return nil end
  local ok, s = pcall(self.store.session_get, self.store, _id_hash(id))
  if not ok or not s then return nil end
  if s.expires_at <= self.now() or not sys.consteq(s.bound, _bind(token)) then
    self:revoke(id)
    return nil
  end
  return { expires_at = s.expires_at, user = s.user, groups = s.groups }
end

function Shared:revoke(id)
  if type(id) == "string" then self.store:session_delete(_id_hash(id)) end
end

function Shared:throttled(addr)
  local ok, f = pcall(self.store.signin_failures, self.store, addr or "?")
  if not ok or not f then return nil end
  local now = self.now()
  if now - f.since > M.WINDOW then return nil end
  if f.n >= M.FAILURES then return math.max(1, math.ceil(f.since + M.WINDOW - now)) end
  return nil
end

function Shared:failed(addr)
  self.store:signin_failed(addr or "?", self.now(), M.WINDOW)
end

--- The value of cookie `name` in a Cookie header, or nil.
---@param header string|nil
---@param name string
function M.cookie(header, name)
  if type(header) ~= "string" then return nil end
  for pair in (header .. ";"):gmatch("([^;]*);") do
    local k, v = pair:match("^%s*([^=%s]+)%s*=%s*(.-)%s*$")
    if k == name then return v end
  end
  return nil
end

--- The Set-Cookie value for a session (`id` nil: clear the cookie).
---@param id string|nil
---@param secure boolean
function M.set_cookie(id, secure)
  local v = id and (M.COOKIE .. "=" .. id .. "; Path=/; HttpOnly; SameSite=Strict; Max-Age=" .. M.TTL)
    or (M.COOKIE .. "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
  if secure then v = v .. "; Secure" end
  return v
end

return M
