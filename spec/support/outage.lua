-- What the outage specs share: taking one part of the running system away and giving it back
-- while replicas run on the harness cluster.
--   outage.SOAK                     OBLETH_SOAK_SECONDS (make soak) or nil
--   local f = outage.front(url)     a proxy standing in for slurmrestd on one fixed port:
--                                   f.url, f:down() (connections refused, as with a stopped
--                                   slurmrestd), f:up() (same port again)
--   outage.ctld("stop"|"start")     slurmctld alone (spec/cluster/ctld.sh): slurmd, slurmrestd and
--                                   slurmdbd stay up, and the jobs survive the restart
--   outage.engine_pid(port)         the pid of the process listening on 127.0.0.1:port (a replica's
--                                   engine, which the job script execs), or nil
--   outage.count(text, plain)       how many times plain occurs in text
local http = require "obleth.http"
local util = require "spec.support.util"

local M = {}

M.SOAK = tonumber(os.getenv("OBLETH_SOAK_SECONDS") or "")

local Front = {}
Front.__index = Front

function Front:up()
  local rest_port = self.rest_port
  self.srv = assert(http.server { host = "127.0.0.1", port = self.port or 0, handler = function(_, res)
    local st, why = res:proxy { host = "127.0.0.1", port = rest_port, timeout = 30 }
    if not st and not res:sent() then res:send(502, { ["Content-Type"] = "text/plain" }, tostring(why)) end
  end })
  self.port = self.srv:port()
  self.url = "http://127.0.0.1:" .. self.port
  return self
end

function Front:down()
  if self.srv then self.srv:close() end
  self.srv = nil
end

---@param rest_url string the real slurmrestd, "http://127.0.0.1:PORT"
function M.front(rest_url)
  local f = setmetatable({ rest_port = tonumber(rest_url:match(":(%d+)/?$")) }, Front)
  return f:up()
end

function M.ctld(verb)
  local code, out = util.sh(util.shq(util.root() .. "/spec/cluster/ctld.sh") .. " " .. verb)
  assert(code == 0, "spec/cluster/ctld.sh " .. verb .. ": " .. out)
end

function M.engine_pid(port)
  local _, out = util.sh(("ss -Hltnp 'sport = :%d'"):format(math.tointeger(port)))
  return tonumber(out:match("pid=(%d+)"))
end

function M.count(text, plain)
  return select(2, text:gsub(plain:gsub("%p", "%%%0"), ""))
end

return M
