--- obleth.router.limits — a client key's limits (docs/router.md "Limits and usage"):
-- requests_per_minute over a sliding window (at most that many requests admitted in
-- any WINDOW seconds) and max_concurrent (requests being answered at once).
--
--   local lim = require("obleth.router.limits").new{window = 60}
--   local ok, retry_after, which = lim:admit(key_id, {requests_per_minute = 5, max_concurrent = 2}, now)
--   ... answer the request ...
--   lim:release(key_id)            -- only after an admitted request
--
-- Pure: the caller gives the time (seconds, any monotonic clock), so a spec moves it
-- instead of waiting. No module state: every limiter is independent. The state is kept
-- per router process (each obleth serve counts its own requests).
local M = {}

--- Seconds of the requests_per_minute window.
M.WINDOW = 60

local Limiter = {}
Limiter.__index = Limiter

--- A new limiter.
---@param opts {window: number|nil}|nil window: seconds (default M.WINDOW; a spec may shorten it)
function M.new(opts)
  opts = opts or {}
  return setmetatable({ window = opts.window or M.WINDOW, _keys = {} }, Limiter)
end

-- The state of a key: times = a ring of the admission times in the window (oldest at head).
function Limiter:_state(id)
  local s = self._keys[id]
  if not s then
    s = { times = {}, head = 1, n = 0, inflight = 0 }
    self._keys[id] = s
  end
  return s
end

-- Drop admission times older than the window.
local function _expire(s, cap, now, window)
  while s.n > 0 and s.times[s.head] <= now - window do
    s.times[s.head] = nil
    s.head = s.head % cap + 1
    s.n = s.n - 1
  end
end

--- Admit one request of key id under its limits, or say why not and when to try again.
---@param id integer the key's id
---@param limits {requests_per_minute: integer|nil, max_concurrent: integer|nil}
---@param now number seconds
---@return boolean ok, integer|nil retry_after whole seconds (>= 1) when refused,
---  "requests_per_minute"|"max_concurrent"|nil which limit refused it, integer|nil the limit
function Limiter:admit(id, limits, now)
  local rpm, maxc = limits.requests_per_minute, limits.max_concurrent
  if not rpm and not maxc then return true end
  local s = self:_state(id)
  if maxc and s.inflight >= maxc then
    -- nothing says when a request in flight ends: try again in a second
    return false, 1, "max_concurrent", maxc
  end
  if rpm then
    if s.cap ~= rpm then -- the limit changed (or is new): keep the newest times that fit
      local kept = {}
      for i = math.max(1, s.n - rpm + 1), s.n do kept[#kept + 1] = s.times[(s.head + i - 2) % (s.cap or 1) + 1] end
      s.times, s.head, s.n, s.cap = kept, 1, #kept, rpm
    end
    _expire(s, rpm, now, self.window)
    if s.n >= rpm then
      -- the oldest admission in the window leaves it at times[head] + window
      local wait = s.times[s.head] + self.window - now
      return false, math.max(1, math.ceil(wait)), "requests_per_minute", rpm
    end
    s.times[(s.head + s.n - 1) % rpm + 1] = now
    s.n = s.n + 1
  end
  s.inflight = s.inflight + 1
  return true
end

--- An admitted request of key id is over.
---@param id integer
function Limiter:release(id)
  local s = self._keys[id]
  if s and s.inflight > 0 then s.inflight = s.inflight - 1 end
end

--- How many requests of key id the window holds and how many are in flight (for specs and /metrics).
---@return integer in_window, integer inflight
function Limiter:count(id, now)
  local s = self._keys[id]
  if not s then return 0, 0 end
  if s.cap then _expire(s, s.cap, now, self.window) end
  return s.n, s.inflight
end

--- Forget keys with nothing in flight and no admission in the window (bounded memory).
function Limiter:prune(now)
  for id, s in pairs(self._keys) do
    if s.cap then _expire(s, s.cap, now, self.window) end
    if s.inflight == 0 and s.n == 0 then self._keys[id] = nil end
  end
end

return M
