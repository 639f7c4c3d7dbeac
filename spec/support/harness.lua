-- The harness cluster for integration specs: a connection to its slurmrestd,
-- and obleth serve (temporary database) with the cluster's Slurm connection
-- saved, a job log directory the job user can write, and the installation id.
--   local h = harness.start{port_range = {21000, 21999}}
--   h.conn, h.srv, h.logdir, h.instance
--   h:live_jobs(model_id?, extra_states?) -> this installation's live tagged jobs
--   h:stop()  cancels every live job of this installation, stops the server, removes the log dir
local slurm = require "obleth.slurm"
local tag = require "obleth.job.tag"
local util = require "spec.support.util"
local server = require "spec.support.server"

local M = {}

M.URL, M.USER, M.TOKEN = os.getenv("OBLETH_SLURM_URL"), os.getenv("OBLETH_SLURM_USER"),
  os.getenv("OBLETH_SLURM_TOKEN")

--- The harness cluster's Slurm release ("22.05", "24.11" or "26.05": OBLETH_CLUSTER_RELEASE of its env
--- file), a Lua pattern matching its full version ("26.05.5"), and the API version obleth negotiates
--- there (OBLETH_SLURM_API_VERSION: the newest both slurmrestd and obleth's bindings speak).
M.RELEASE = os.getenv("OBLETH_CLUSTER_RELEASE") or "22.05"
M.RELEASE_PATTERN = "^" .. M.RELEASE:gsub("%.", "%%.") .. "%.%d+$"
M.API_VERSION = os.getenv("OBLETH_SLURM_API_VERSION") or "v0.0.38"

--- A Slurm client command (scontrol, squeue, sacct) against the harness cluster, run where that
--- release's clients are: on this machine for 22.05, chrooted into the cluster's root for the rooted
--- releases (24.11, 26.05), whose repository paths are the same inside. Returns exit status, output.
function M.cli(cmd)
  local dir = os.getenv("OBLETH_CLUSTER_DIR") or ""
  local fh = io.open(dir .. "/root/usr/bin/scontrol")
  if fh then
    fh:close()
    cmd = ("chroot %s /usr/bin/env SLURM_CONF=%s /bin/sh -c %s"):format(util.shq(dir .. "/root"),
      util.shq(os.getenv("SLURM_CONF") or ""), util.shq(cmd))
  end
  return util.sh(cmd)
end

--- Job states in which a job still holds or waits for resources.
M.LIVE = { PENDING = true, RUNNING = true, CONFIGURING = true }

local H = {}
H.__index = H

---@param opts {port_range: integer[], env: table|nil} env: more environment for obleth serve
function M.start(opts)
  local h = setmetatable({}, H)
  h.conn = assert(slurm.connect { url = M.URL, user = M.USER, token = M.TOKEN })
  h.logdir = os.tmpname()
  os.remove(h.logdir)
  os.execute("mkdir -p " .. util.shq(h.logdir) .. " && chmod 1777 " .. util.shq(h.logdir))
  h.srv = server.start { env = opts.env }
  local status, _, raw = h.srv:request("PUT", "/api/v1/settings/slurm", { enabled = true, url = M.URL,
    user = M.USER, token = M.TOKEN, defaults = { partition = "gpu", account = "research", log_dir = h.logdir,
      port_range = opts.port_range } })
  assert(status == 200, "saving the Slurm settings: " .. tostring(raw))
  local _, snap = h.srv:request("GET", "/api/v1/provisioner/snapshot")
  h.instance = snap.instance
  assert(type(h.instance) == "string" and h.instance:match("^%x%x%x%x%x%x%x%x$"), "no installation id")
  return h
end

--- Live jobs tagged by this installation (of one model when model_id is given);
--- extra_states adds states such as COMPLETING to the live ones.
function H:live_jobs(model_id, extra_states)
  local out = {}
  for _, j in ipairs(assert(self.conn:jobs())) do
    local t = tag.parse(j)
    local base = j.state.base
    if t and t.instance == self.instance and (model_id == nil or t.model_id == model_id)
      and (M.LIVE[base] or (extra_states and extra_states[base])) then
      out[#out + 1] = j
    end
  end
  return out
end

--- Leave no job behind, then stop the server and remove the log directory.
function H:stop()
  for _, j in ipairs(self:live_jobs()) do self.conn:cancel(j.id) end
  if self.srv then self.srv:stop(); self.srv:cleanup() end
  os.execute("rm -rf " .. util.shq(self.logdir))
end

return M
