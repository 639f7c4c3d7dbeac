--- obleth.router.wakeups — the router asks the provisioner for a pass now: a request came to an
-- autoscaled model with no replica (wake on demand, docs/autoscaling.md). A counter and the waiters of
-- GET /api/v1/provisioner/wait: a wake bumps the counter and wakes every waiter; a waiter that names
-- the counter it last saw returns at once when a wake came since, so none is lost between two waits.
-- One per obleth serve: obleth.serve makes it, as the context's `wakeups`.
local M = {}

local W = {}
W.__index = W

--- A new set.
---@return table
function M.new()
  return setmetatable({ seq = 0, waiters = {}, why = nil }, W)
end

--- Ask for a pass now.
---@param why string|nil e.g. the model's name
function W:wake(why)
  self.seq = self.seq + 1
  self.why = why
  for n in pairs(self.waiters) do n:notify() end
end

--- Wait (in a task) until a wake comes after `since`, or `timeout` seconds.
---@param since integer|nil the counter the caller last saw (nil: answer the counter at once)
---@param timeout number seconds
---@return integer seq the counter now
---@return boolean woken a wake came after `since`
function W:wait(since, timeout)
  if since == nil then return self.seq, false end
  if self.seq <= since and timeout > 0 then
    local n = require("obleth.loop").notifier()
    self.waiters[n] = true
    n:wait(timeout)
    self.waiters[n] = nil
  end
  return self.seq, self.seq > since
end

return M
