--- obleth.router.balancer — which endpoint gets the next request.
--
-- Fewest requests in flight wins; ties go round robin (a per-model cursor that
-- moves past the endpoint it picked). An endpoint whose connection just failed
-- is *cooling down* for a few seconds: it is picked only when every candidate
-- is cooling down, so a dead replica costs at most one failed connection per
-- cool-down until the provisioner takes it out of the endpoints.
--
-- Pure bookkeeping, no I/O: the caller passes the endpoint list it read from
-- the store for this request (so endpoint changes take effect at once, and an
-- endpoint that left keeps its in-flight count until those requests finish).
--
--   local b = balancer.new{cooldown = 5}
--   local url = b:pick("model", {"http://a", "http://b"}, {["http://a"] = true} --[[exclude]], now)
--   b:acquire(url) ... b:release(url)
--   b:failed(url, now)
--
-- It is the router's only balancer (lua/obleth/router/init.lua): one event loop, so
-- one set of counts for every request.
local M = {}

--- Seconds an endpoint whose connection failed is avoided.
M.COOLDOWN = 5

local Balancer = {}
Balancer.__index = Balancer

---@param opts {cooldown: number|nil}|nil
function M.new(opts)
  opts = opts or {}
  return setmetatable({
    cooldown = opts.cooldown or M.COOLDOWN,
    inflight = {},   -- url -> requests in flight
    down_until = {}, -- url -> monotonic time the cool-down ends
    cursor = {},     -- model -> round-robin position (1-based, into the endpoint list)
  }, Balancer)
end

--- Pick an endpoint for a request to `model`, or nil when every endpoint is excluded.
---@param model string the key of the round-robin cursor
---@param endpoints string[] the model's endpoints, in their stored order
---@param exclude table|nil set of urls not to pick (already tried for this request)
---@param now number monotonic seconds (for the cool-down)
---@return string|nil url
function Balancer:pick(model, endpoints, exclude, now)
  local n = #endpoints
  if n == 0 then return nil end
  local start = self.cursor[model] or 1
  if start > n then start = 1 end
  local best, best_i, best_load, best_cool
  for k = 0, n - 1 do
    local i = (start - 1 + k) % n + 1
    local url = endpoints[i]
    if not (exclude and exclude[url]) then
      local du = self.down_until[url]
      local cool = du ~= nil and du > (now or 0)
      if du and not cool then self.down_until[url] = nil end
      local load = self.inflight[url] or 0
      -- a cooling endpoint loses to any warm one; among equals fewer in flight wins,
      -- and the first from the cursor on wins a tie
      if not best or (best_cool and not cool) or (cool == best_cool and load < best_load) then
        best, best_i, best_load, best_cool = url, i, load, cool
      end
    end
  end
  if best then self.cursor[model] = best_i % n + 1 end
  return best
end

--- A request to url started.
function Balancer:acquire(url)
  self.inflight[url] = (self.inflight[url] or 0) + 1
end

--- A request to url ended (whatever its outcome).
function Balancer:release(url)
  local v = (self.inflight[url] or 1) - 1
  self.inflight[url] = v > 0 and v or nil
end

--- The connection to url failed before any answer: avoid it for the cool-down.
function Balancer:failed(url, now)
  self.down_until[url] = (now or 0) + self.cooldown
end

--- Requests in flight to url.
function Balancer:load(url)
  return self.inflight[url] or 0
end

return M
