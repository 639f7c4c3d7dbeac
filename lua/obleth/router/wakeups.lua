--- obleth.router.wakeups — the router asks the provisioner for a pass now: a request came to an
-- autoscaled model with no replica (wake on demand, docs/autoscaling.md). A counter and the waiters of
-- GET /api/v1/provisioner/wait: a wake bumps the counter and wakes every waiter; a waiter that names
-- the counter it last saw returns at once when a wake came since, so none is lost between two waits.
-- One per obleth serve: obleth.serve makes it, as the context's `wakeups`. A shutdown closes it
-- (obleth.serve.context's drain): every wait and every `sleep` ends at once, and later ones do not wait,
-- so no long poll and no held request keeps the process from stopping.
local M = {}

local W = {}
W.__index = W

--- A new set.
---@return table
function M.new()
  -- waiters: the long polls, woken by a wake; sleepers: held requests, woken only by close
  return setmetatable({ seq = 0, waiters = {}, sleepers = {}, why = nil, closed = false }, W)
end

--- Ask for a pass now.
---@param why string|nil e.g. the model's name
---@param remote boolean|nil another obleth serve asked (not relayed again)
function W:wake(why, remote)
  self.seq = self.seq + 1
  self.why = why
  for n in pairs(self.waiters) do n:notify() end
  -- several obleth serve on one PostgreSQL: the provisioner may be waiting on another one
  if self.relay and not remote then self.relay(why) end
end

--- Wait (in a task) until a wake comes after `since`, or `timeout` seconds.
---@param since integer|nil the counter the caller last saw (nil: answer the counter at once)
---@param timeout number seconds
---@return integer seq the counter now
---@return boolean woken a wake came after `since`
---@return boolean closed the set was closed (shutdown): the wait ended for that
function W:wait(since, timeout)
  if since == nil then return self.seq, false, self.closed end
  if self.seq <= since and timeout > 0 and not self.closed then
    local n = require("obleth.loop").notifier()
    self.waiters[n] = true
    n:wait(timeout)
    self.waiters[n] = nil
  end
  return self.seq, self.seq > since, self.closed
end

--- Sleep (in a task) up to `seconds`, cut short when the set closes (a request the router holds).
---@param seconds number
---@return boolean closed
function W:sleep(seconds)
  if not self.closed and seconds > 0 then
    local n = require("obleth.loop").notifier()
    self.sleepers[n] = true
    n:wait(seconds)
    self.sleepers[n] = nil
  end
  return self.closed
end

--- Close the set (shutdown): every wait and sleep ends now, and later ones return at once.
function W:close()
  self.closed = true
  for n in pairs(self.waiters) do n:notify() end
  for n in pairs(self.sleepers) do n:notify() end
end

return M
