-- Helpers shared by the host and integration specs: temporary files, child
-- obleth processes, shell quoting. Child processes run under the same binary
-- as the spec run (so an ASan run tests ASan children too).
local M = {}

local sys = require("obleth.sys")

--- Quote a string for /bin/sh as one literal word.
---@param s string
---@return string
function M.shq(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- Write content to a new temporary file; returns its path.
---@param content string
---@param suffix string|nil
---@return string
function M.tmpfile(content, suffix)
  local path = os.tmpname() .. (suffix or ".lua")
  local fh = assert(io.open(path, "w"))
  fh:write(content)
  fh:close()
  return path
end

--- The obleth binary running this spec.
function M.obleth()
  return sys.paths.exe
end

--- The repository root (the share dir of a source-tree build).
function M.root()
  return sys.paths.share
end

local function cmdline(args)
  local parts = { M.shq(M.obleth()) }
  for _, a in ipairs(args) do parts[#parts + 1] = M.shq(a) end
  return table.concat(parts, " ")
end

--- The contents of the file at path, or "" when it cannot be read.
function M.slurp(path)
  local fh = io.open(path)
  if not fh then return "" end
  local s = fh:read("a")
  fh:close()
  return s
end
local slurp = M.slurp

--- Run obleth with args to completion (bounded by `timeout` seconds, default 30).
---@return integer status, string stdout, string stderr
function M.run_obleth(args, timeout)
  local errf = os.tmpname()
  local fh = assert(io.popen(("timeout %d %s 2>%s"):format(timeout or 30, cmdline(args), M.shq(errf))))
  local out = fh:read("a")
  local _, _, code = fh:close()
  local err = slurp(errf)
  os.remove(errf)
  return code, out, err
end

--- Start obleth with args in the background; stdout is read line by line.
--- Returns a process object: :wait_line(pattern, secs), :kill(sig), :wait(secs).
--- Reads block the calling task, so use it only where nothing else must run.
function M.spawn_obleth(args, timeout)
  local errf = os.tmpname()
  local cmd = ("sh -c 'echo $$; exec timeout --foreground %d \"$0\" \"$@\" 2>%s' %s"):format(
    timeout or 60, errf, cmdline(args))
  local fh = assert(io.popen(cmd))
  local pid = tonumber(fh:read("l"))
  local proc = { pid = pid, lines = {} }
  function proc.wait_line(_, plain)
    for line in fh:lines() do
      proc.lines[#proc.lines + 1] = line
      if line:find(plain, 1, true) then return line end
    end
    return nil
  end
  function proc.kill(_, sig)
    return sys.kill(pid, sig or "TERM")
  end
  function proc.wait()
    local rest = fh:read("a")
    local _, _, code = fh:close()
    local out = table.concat(proc.lines, "\n") .. "\n" .. rest
    local err = slurp(errf)
    os.remove(errf)
    return code, out, err
  end
  return proc
end

--- Sleep inside a task.
function M.sleep(s)
  require("obleth.loop").sleep(s)
end

--- Call fn until it returns a truthy first value (polling every 0.5 s inside
--- a task); returns fn's results. Raises after `secs` (default 60), naming
--- `what` and fn's second value (a hint) from the last try.
function M.wait_until(fn, secs, what)
  local loop = require "obleth.loop"
  local t_end = loop.monotonic() + (secs or 60)
  local last
  repeat
    local v = table.pack(fn())
    if v[1] then return table.unpack(v, 1, v.n) end
    last = v[2]
    loop.sleep(0.5)
  until loop.monotonic() > t_end
  error(("timed out after %d s waiting for %s%s"):format(secs or 60, what or "a condition",
    last and (": " .. tostring(last)) or ""), 2)
end

--- Run a shell command (stderr joined); returns exit status and output.
function M.sh(cmd)
  local fh = io.popen(cmd .. " 2>&1")
  local out = fh:read("a")
  local _, _, code = fh:close()
  return code, out
end

--- A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0), for a server a
--- spec starts (slapd, nginx, obleth serve): never a fixed number another run may hold.
function M.free_port()
  local probe = assert(require("obleth.http").server { host = "127.0.0.1", port = 0, handler = function() return 200 end })
  local port = probe:port()
  probe:close()
  return port
end

return M
