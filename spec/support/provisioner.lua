-- Start `obleth provisioner` as a child process for integration specs.
--   local p = provisioner.start{base = srv.base, token = srv.token, env = {OBLETH_FAULT = ...}}
--   p:log() -> stderr so far;  p:stop(sig?) -> exit code;  p:wait() -> exit code (process ends by itself)
local util = require "spec.support.util"
local sys = require "obleth.sys"

local M = {}

local P = {}
P.__index = P

function M.start(opts)
  local errf = os.tmpname()
  local env = { OBLETH_ADMIN_BASE_URL = opts.base, OBLETH_ADMIN_TOKEN = opts.token,
    OBLETH_PASS_INTERVAL = opts.interval or "1", OBLETH_DRAIN_SECONDS = "2" }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local assigns = {}
  for k, v in pairs(env) do assigns[#assigns + 1] = k .. "=" .. util.shq(v) end
  local script = ("echo $$; %s exec %s provisioner 2>%s"):format(table.concat(assigns, " "),
    util.shq(util.obleth()), util.shq(errf))
  local fh = assert(io.popen("sh -c " .. util.shq(script)))
  local pid = tonumber(fh:read("l"))
  return setmetatable({ pid = pid, fh = fh, errf = errf }, P)
end

function P:log()
  local fh = io.open(self.errf)
  if not fh then return self.err or "" end
  local s = fh:read("a")
  fh:close()
  return s
end

function P:wait()
  if not self.fh then return self.code end
  self.fh:read("a")
  local _, _, code = self.fh:close()
  self.fh, self.code = nil, code
  self.err = self:log()
  os.remove(self.errf)
  return code
end

function P:stop(sig)
  if not self.fh then return self.code end
  sys.kill(self.pid, sig or "TERM")
  return self:wait()
end

function P:alive()
  return self.fh ~= nil and sys.kill(self.pid, 0) == true
end

return M
