-- Start spec/support/raw_upstream.py (an endpoint that breaks HTTP on cue) in one mode.
--   local port, stop = require("spec.support.raw_upstream")("partial_headers")
local sys = require("obleth.sys")
local util = require("spec.support.util")

return function(mode)
  local fh = assert(io.popen(("exec sh -c 'echo $$; exec python3 %s %s'"):format(
    util.shq(util.root() .. "/spec/support/raw_upstream.py"), mode)))
  local pid = tonumber(fh:read("l"))
  local port = tonumber(fh:read("l"))
  assert(port, "raw_upstream.py did not start")
  return port, function()
    sys.kill(pid, "TERM")
    fh:close()
  end
end
