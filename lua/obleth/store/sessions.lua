--- obleth.store.sessions — the dashboard's sign-in sessions and wrong-token counts, kept in the
-- store when it is shared by several obleth serve (PostgreSQL): a session made through one instance
-- is valid on every other, and the throttle counts wrong tokens from an address on all of them.
-- (On SQLite, one instance keeps them in memory: obleth.api.sessions.) Only the SHA-256 of a
-- session id is stored. Methods of the store object (obleth.store.base).
local base = require "obleth.store.base"

local Store = base.Store

--- Keep a new session; the expired ones go, and the ones closest to expiry while more than `max`.
---@param id_hash string SHA-256 hex of the session id
---@param bound string what binds it to the admin token (a hash)
---@param expires_at integer epoch seconds
---@param now integer
---@param max integer sessions kept at most
---@param who {user: string, groups: string[]}|nil a user signed in with the directory (nil: the admin token)
function Store:session_put(id_hash, bound, expires_at, now, max, who)
  local groups = who and require("obleth.util.json").encode(require("obleth.util.json").array(who.groups or {}))
  return self:transaction(function()
    self:_x("DELETE FROM dashboard_sessions WHERE expires_at <= ?", now)
    local n = self:_one("SELECT count(*) AS n FROM dashboard_sessions").n
    if n >= max then
      self:_x([[DELETE FROM dashboard_sessions WHERE id_hash IN (SELECT id_hash FROM dashboard_sessions
        ORDER BY expires_at LIMIT ?)]], n - max + 1)
    end
    self:_x("INSERT INTO dashboard_sessions (id_hash, bound, expires_at, username, groups) VALUES (?, ?, ?, ?, ?)",
      id_hash, bound, expires_at, who and who.user, groups)
    return true
  end)
end

--- The session {bound, expires_at, user, groups} with this id hash, or nil.
function Store:session_get(id_hash)
  local s = self:_one("SELECT bound, expires_at, username, groups FROM dashboard_sessions WHERE id_hash = ?", id_hash)
  if not s then return nil end
  local groups = s.groups and require("cjson").decode(s.groups) or nil
  return { bound = s.bound, expires_at = s.expires_at, user = s.username, groups = groups }
end

function Store:session_delete(id_hash)
  return self:transaction(function()
    self:_x("DELETE FROM dashboard_sessions WHERE id_hash = ?", id_hash)
    return true
  end)
end

--- Count one wrong token from `addr`: a count older than `window` seconds starts again.
function Store:signin_failed(addr, now, window)
  return self:transaction(function()
    self:_x("DELETE FROM signin_failures WHERE since < ?", now - window)
    self:_x([[INSERT INTO signin_failures (addr, n, since) VALUES (?, 1, ?)
      ON CONFLICT (addr) DO UPDATE SET n = signin_failures.n + 1]], addr, now)
    return true
  end)
end

--- Wrong tokens from `addr` {n, since}, or nil.
function Store:signin_failures(addr)
  return self:_one("SELECT n, since FROM signin_failures WHERE addr = ?", addr)
end
