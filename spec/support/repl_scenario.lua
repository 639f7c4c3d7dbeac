-- A cluster in a state worth a dry run, made with the real daemons on the
-- harness cluster (used by spec/integration/repl_pass_spec.lua and to capture
-- docs/repl.md's output):
--   alpha: 2 replicas submitted by the provisioner, then the spec lowered to 1
--          (slot 2 is surplus: the next pass cancels its job);
--   beta:  a spec made while the provisioner was stopped (slot 1 is missing:
--          the next pass submits it);
--   gamma: 1 replica whose job was cancelled in Slurm before it became healthy
--          (the lost rule decides: with k = 3 it is resubmitted, with k = 1 lost).
-- The provisioner is stopped at the end, so nothing changes behind the REPL.
--   local s = scenario.start{port_range = {23500, 23599}}
--   s.h (harness), s.ids {alpha, beta, gamma}, s.jobs {alpha = {slot → job id}, gamma = job id}
--   s:stop()
local util = require "spec.support.util"
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"

local M = {}

local S = {}
S.__index = S

local function spec(over)
  local s = { replicas = 1, partition = "gpu", account = "research", time_limit = 10, nodes = 1, cpus_per_node = 1,
    memory_per_node = 200, launch_command = "obleth smoke-engine --startup-delay 30",
    health = { path = "/health", interval = 1, timeout = 1, startup_grace = 300, failure_threshold = 2 } }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

function S:ok(method, path, body)
  local status, doc, raw = self.h.srv:request(method, path, body)
  assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
  return doc
end

function S:model(name, over)
  local m = self:ok("POST", "/api/v1/models", { name = name })
  m = m.model or m
  self:ok("PUT", "/api/v1/models/" .. m.id .. "/managed", spec(over))
  return m.id
end

--- Replicas of a model the store has with a job id, by slot.
function S:recorded(mid)
  local doc = self:ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
  local by_slot = {}
  for _, r in ipairs(doc.replicas or doc) do
    if r.job_id then by_slot[r.slot] = r.job_id end
  end
  return by_slot
end

function M.start(opts)
  local self = setmetatable({ ids = {}, jobs = {} }, S)
  self.h = harness.start { port_range = opts.port_range }
  self.ids.alpha = self:model("alpha", { replicas = 2 })
  self.ids.gamma = self:model("gamma")
  local prov = provisioner.start { base = self.h.srv.base, token = self.h.srv.token }
  local ok, err = pcall(util.wait_until, function()
    local a, g = self:recorded(self.ids.alpha), self:recorded(self.ids.gamma)
    return a[1] and a[2] and g[1], "alpha and gamma submitted"
  end, 60, "the provisioner to submit alpha's 2 replicas and gamma's")
  prov:stop()
  if not ok then error(tostring(err) .. "\nprovisioner log:\n" .. prov:log()) end
  self.jobs.alpha = self:recorded(self.ids.alpha)
  self.jobs.gamma = self:recorded(self.ids.gamma)[1]
  self:ok("PUT", "/api/v1/models/" .. self.ids.alpha .. "/managed", spec({ replicas = 1 }))
  self.ids.beta = self:model("beta")
  assert(self.h.conn:cancel(self.jobs.gamma))
  util.wait_until(function()
    local j = self.h.conn:job(self.jobs.gamma)
    return j and not harness.LIVE[j.state.base] and j.state.base ~= "COMPLETING", j and j.state.base
  end, 30, "gamma's job to end")
  return self
end

function S:stop()
  self.h:stop()
end

return M
