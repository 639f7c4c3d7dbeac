--- obleth.serve.load_share — the router's load window shared by every `obleth serve` on one PostgreSQL
-- database (docs/autoscaling.md "Several obleth serve"). Behind a load balancer each instance's router
-- counts only the requests sent to it; the scale policy must see them all. So each instance publishes
-- its window (obleth.router.load's export) every `interval` seconds: one upsert of one row, keyed by its
-- id (random per start), never a write per request; the same round reads the rows the others replaced
-- in the last `expiry` seconds. Reading the window (the provisioner's snapshot, /metrics, the deployment
-- page, the wake-on-demand path) adds this process's live counts and the others' last published ones
-- (obleth.router.load.combine), without I/O. An instance that stops deletes its row (SIGTERM); one that
-- dies stops counting `expiry` seconds after its last publish, and its row is deleted later by any other.
--
--   local share = load_share.new{window = w, store = store, now = loop.now, log = log}
--   share:begin("m") ... share:finish("m", 2.5)   -- counted in this process's window (as w's)
--   loop.every(share.interval, function() share:publish() end)   -- in a task: the store yields
--   share:view("m", since)   -- the sum over the live instances (w:view's shape)
--   share:withdraw()         -- at shutdown
--
-- Units: seconds; the counts are requests. Peers' counts are as old as their last publish (up to
-- `interval`) plus this instance's last read (up to `interval`).
local load = require "obleth.router.load"
local cjson = require "cjson"

local M = {}

--- Seconds between two publishes (and reads) of an instance.
M.INTERVAL = 5
--- Seconds after its last publish an instance stops counting.
M.EXPIRY = 15

local Share = {}
Share.__index = Share

--- A shared window over this process's own.
---@param opts {window: table, store: table, now: fun(): number, log: table|nil, interval: number|nil,
---  expiry: number|nil, instance: string|nil, host: string|nil, pid: integer|nil}
---  window: obleth.router.load (this process counts into it); store: obleth.store (load_share_put,
---  load_shares, load_shares_expire, load_share_delete); now: epoch seconds (the instances' clocks must
---  agree to within a few seconds, as for the buckets' times); interval, expiry: seconds (expiry at least
---  twice interval); instance: this process's id (default random)
---@return table share
function M.new(opts)
  local w = opts.window
  if type(w) ~= "table" or type(opts.store) ~= "table" or type(opts.now) ~= "function" then
    error("load_share.new: window, store and now are required", 2)
  end
  local interval, expiry = opts.interval or M.INTERVAL, opts.expiry or M.EXPIRY
  if not (type(interval) == "number" and interval > 0) or not (type(expiry) == "number" and expiry >= 2 * interval) then
    error("load_share.new: interval must be > 0 and expiry at least twice interval", 2)
  end
  local sys = require "obleth.sys"
  return setmetatable({ window = w, store = opts.store, now = opts.now, log = opts.log or require("obleth.log"),
    interval = interval, expiry = expiry, bucket = w.bucket, span = w.span,
    id = opts.instance or sys.random_hex(8),
    meta = { host = opts.host or sys.hostname(), pid = opts.pid or sys.getpid(), started_at = w.since },
    peers = {}, _bad = {} }, Share)
end

-- counting: this process's window
function Share:begin(...) return self.window:begin(...) end
function Share:hold(...) return self.window:hold(...) end
function Share:release(...) return self.window:release(...) end
function Share:finish(...) return self.window:finish(...) end
function Share:forget(...) return self.window:forget(...) end -- this instance's counts (the others' expire)

-- the parts to add: this process's window and the peers published within the expiry
function Share:_parts()
  local parts = { self.window }
  local from = self.now() - self.expiry
  for _, p in ipairs(self.peers) do
    if p.updated_at > from then parts[#parts + 1] = p end
  end
  return parts
end

--- A model's load summed over the live instances (obleth.router.load's `view`, same arguments and shape).
function Share:view(name, since, no_samples)
  local parts = self:_parts()
  if #parts == 1 then return self.window:view(name, since, no_samples) end
  return load.combine(parts, name):view(name, since, no_samples)
end

--- The names of the models with load seen by any live instance.
---@return string[]
function Share:names()
  local out, seen = {}, {}
  for _, p in ipairs(self:_parts()) do
    for n in pairs(p.models) do
      if not seen[n] then seen[n] = true; out[#out + 1] = n end
    end
  end
  table.sort(out)
  return out
end

--- The live instances whose load is counted, this one included.
---@return integer
function Share:instances()
  return #self:_parts()
end

--- Publish this window, read the others' (and delete the rows of instances gone for 2 × expiry).
--- Inside a task. A failure (the database unreachable) is logged once until it works again; the
--- others' last counts are used until they expire.
---@return true|nil ok
---@return {code: "busy"|"storage", message: string}|nil err busy: the previous round is not over
function Share:publish()
  if self._busy then return nil, { code = "busy", message = "the previous publish is not over" } end
  self._busy = true
  local now = self.now()
  local ok, err = pcall(function()
    local store = self.store
    store:load_share_put(self.id, cjson.encode(self.window:export()), now, self.meta)
    local peers = {}
    for _, r in ipairs(store:load_shares(now - self.expiry, self.id)) do
      local okd, doc = pcall(cjson.decode, r.doc)
      local part, perr
      if okd then part, perr = load.import(doc) else perr = { message = "not JSON" } end
      if part and part.bucket ~= self.window.bucket then
        part, perr = nil, { message = ("buckets of %s s, not %s s"):format(tostring(part.bucket),
          tostring(self.window.bucket)) }
      end
      if part then
        part.instance, part.updated_at, part.host, part.pid = r.instance, r.updated_at, r.host, r.pid
        peers[#peers + 1] = part
      elseif not self._bad[r.instance] then
        self._bad[r.instance] = true
        self.log.warn("load_share_unreadable", { instance = r.instance, host = r.host, pid = r.pid, error = perr.message })
      end
    end
    self.peers = peers
    if now - (self._expired_at or -math.huge) >= self.expiry then
      store:load_shares_expire(now - 2 * self.expiry)
      self._expired_at = now
    end
  end)
  self._busy = false
  if not ok then
    if not self._failing then
      self._failing = true
      self.log.warn("load_share_failed", { instance = self.id, error = type(err) == "table" and err.message or tostring(err) })
    end
    return nil, { code = "storage", message = type(err) == "table" and err.message or tostring(err) }
  end
  if self._failing then
    self._failing = nil
    self.log.info("load_share_restored", { instance = self.id, peers = #self.peers })
  end
  return true
end

--- A request held on this instance wakes a model: publish now (the held request in the counts), then
--- `notify(name)` tells the others (obleth.serve wires it to the change notices), which read the rows
--- again and wake the provisioner if it waits on them (`Share:woken`). At most one relay per model at a
--- time and per `interval`: a burst of held requests publishes once. In a task of its own.
---@param name string the model
---@param notify fun(name: string) sends the notice
function Share:relay_wake(name, notify)
  local t = self.now()
  self._relayed = self._relayed or {}
  if (self._relayed[name] or -math.huge) > t - self.interval then return end
  self._relayed[name] = t
  require("obleth.loop").spawn(function()
    local ok = self:publish()
    if not ok then self:publish() end -- the round in progress may predate the held request: once more
    notify(name)
  end)
end

--- Another instance relayed a wake: read the rows now (its held request among them), then `wake()`.
--- In a task of its own.
---@param wake fun() wakes this instance's waiters
function Share:woken(wake)
  require("obleth.loop").spawn(function()
    for _ = 1, 20 do
      if self:publish() then break end
      require("obleth.loop").sleep(0.05) -- a round in progress: wait for it
    end
    wake()
  end)
end

--- Delete this instance's row (at shutdown): the others stop counting it at once. Inside a task.
---@return true|nil ok
---@return {code: "storage", message: string}|nil err
function Share:withdraw()
  local ok, err = pcall(self.store.load_share_delete, self.store, self.id)
  if not ok then return nil, { code = "storage", message = type(err) == "table" and err.message or tostring(err) } end
  return true
end

return M
