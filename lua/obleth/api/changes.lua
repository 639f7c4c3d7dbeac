--- obleth.api.changes — change notices for the dashboard's live updates
-- (GET /api/v1/events, docs/dashboard.md).
--
-- After a store write, the server publishes what changed: a topic ("models",
-- "managed", "replicas", "settings", "provisioner", "launches", "keys",
-- "recipes") and, when the change belongs to one model, its id. Each event
-- stream subscribes; a subscriber collects the notices it has not sent yet,
-- one per (topic, model) pair however often it changed, and is woken to
-- send them. Nothing here knows HTTP.
--
--   local hub = events.new{max = 64}
--   local sub, err = hub:subscribe()     -- nil, {code = "too_many"} at the cap
--   hub:publish("replicas", 3)
--   local list = sub:next(15)            -- {{topic=, model_id=}, ...}, or {} after 15 s
--   hub:unsubscribe(sub)
local M = {}

--- The topics a notice may name.
M.TOPICS = { models = true, managed = true, replicas = true, settings = true, provisioner = true,
  launches = true, keys = true, recipes = true }

--- Concurrent streams allowed unless told otherwise.
M.MAX = 64

local Hub = {}
Hub.__index = Hub
local Sub = {}
Sub.__index = Sub

--- A hub.
---@param opts {max: integer|nil, notifier: function|nil}|nil notifier: makes a wake-up
---  flag (default obleth.loop.notifier)
function M.new(opts)
  opts = opts or {}
  return setmetatable({ subs = {}, count = 0, max = opts.max or M.MAX,
    notifier = opts.notifier or function() return require("obleth.loop").notifier() end }, Hub)
end

--- A new subscriber, or nil and {code = "too_many", message} when `max` streams are open.
function Hub:subscribe()
  if self.count >= self.max then
    return nil, { code = "too_many", message = ("at most %d event streams may be open at once"):format(self.max) }
  end
  local sub = setmetatable({ pending = {}, order = {}, wake = self.notifier(), closed = false }, Sub)
  self.subs[sub] = true
  self.count = self.count + 1
  return sub
end

function Hub:unsubscribe(sub)
  if self.subs[sub] then
    self.subs[sub] = nil
    self.count = self.count - 1
  end
  sub.closed = true
  sub.wake:notify()
end

--- Tell every subscriber that `topic` changed (for model `model_id`, when given).
---@param topic string one of M.TOPICS
---@param model_id integer|nil
function Hub:publish(topic, model_id)
  if not M.TOPICS[topic] then error("events.publish: unknown topic " .. tostring(topic), 2) end
  local key = topic .. "\0" .. tostring(model_id)
  for sub in pairs(self.subs) do
    if not sub.pending[key] then
      sub.pending[key] = true
      sub.order[#sub.order + 1] = { topic = topic, model_id = model_id }
    end
    sub.wake:notify()
  end
end

--- Wake every subscriber so it can see that it is closed (shutdown).
function Hub:close_all()
  for sub in pairs(self.subs) do self:unsubscribe(sub) end
end

--- Close the subscribers whose `owner` (set by whoever subscribed) is `owner`.
function Hub:close_owned(owner)
  for sub in pairs(self.subs) do
    if sub.owner == owner then self:unsubscribe(sub) end
  end
end

--- Notices not yet taken, in the order they first happened; waits up to
--- `timeout` seconds for one. Returns {} on timeout or once closed.
---@param timeout number
---@return table[] {{topic, model_id}, ...}
function Sub:next(timeout)
  if #self.order == 0 and not self.closed then self.wake:wait(timeout) end
  local out = self.order
  self.order, self.pending = {}, {}
  return out
end

return M
