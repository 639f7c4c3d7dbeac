--- The Slurm connection of a command-line tool (`obleth slurm`, `obleth repl`): from flags, else
-- OBLETH_SLURM_URL / OBLETH_SLURM_SOCKET, OBLETH_SLURM_USER, OBLETH_SLURM_TOKEN (or
-- OBLETH_SLURM_TOKEN_FILE), else settings the caller reads (the connection saved in obleth serve).
local slurm = require "obleth.slurm"

local M = {}

--- Seconds per request when --timeout is not given. More than slurmrestd's own wait for a
--- slurmctld that does not answer (about 10 s on 26.05, then HTTP 502), so a stopped controller
--- is reported as such (slurmrestd's 502) and not as slurmrestd not answering in time.
M.DEFAULT_TIMEOUT = 20

M.connection_spec = {
  url = { kind = "string", help = "slurmrestd base URL (env OBLETH_SLURM_URL)" },
  socket = { kind = "string", help = "slurmrestd unix socket (env OBLETH_SLURM_SOCKET)" },
  user = { kind = "string", help = "user the JWT belongs to (env OBLETH_SLURM_USER)" },
  token_file = { kind = "string", help = "read the JWT from this file (env OBLETH_SLURM_TOKEN_FILE)" },
  api_version = { kind = "string", arg = "vX", help = "API version, default: the newest both sides know" },
  ca_file = { kind = "string", help = "CA bundle for https" },
  insecure = { kind = "boolean", help = "turn TLS verification off" },
  timeout = { kind = "number", help = "seconds per request (default 20: longer than slurmrestd waits for slurmctld)" },
}

--- Connection options from parsed flags and the environment. The token is
--- taken from OBLETH_SLURM_TOKEN or a token file, never from a flag (it would
--- show in the process list).
function M.connection_options(o)
  local token
  local tf = o.token_file or os.getenv("OBLETH_SLURM_TOKEN_FILE")
  if tf then
    local fh, err = io.open(tf)
    if not fh then
      return nil, { code = "token_file", message = "cannot read the token file: " .. err }
    end
    token = fh:read("a"):gsub("%s+$", "")
    fh:close()
  else
    token = os.getenv("OBLETH_SLURM_TOKEN")
  end
  local url = o.url or (not o.socket and os.getenv("OBLETH_SLURM_URL")) or nil
  local socket = o.socket or (not url and os.getenv("OBLETH_SLURM_SOCKET")) or nil
  if not url and not socket then
    return nil, { code = "not_configured", message = "no slurmrestd given: pass --url or --socket, set "
      .. "OBLETH_SLURM_URL, or set OBLETH_ADMIN_BASE_URL and OBLETH_ADMIN_TOKEN to use the connection saved in "
      .. "obleth serve" }
  end
  return {
    url = url, socket = socket, token = token,
    user = o.user or os.getenv("OBLETH_SLURM_USER"),
    version = o.api_version or os.getenv("OBLETH_SLURM_API_VERSION") or "auto",
    ca_file = o.ca_file, verify = not o.insecure, timeout = o.timeout or M.DEFAULT_TIMEOUT,
  }
end

--- Connect from flags, the environment, or else the settings `saved` returns (the command-line
--- tools pass obleth.provisioner.client.saved_slurm_settings: the connection saved in obleth serve).
---@param o table parsed flags (M.connection_spec)
---@param saved nil|fun(): table|false|nil, table|nil the saved settings; false: none to use; nil, err:
---  they could not be read
---@return table|nil conn, table|nil err {code, message, field?}: the Management API client's or
---  obleth.slurm's codes, "not_configured" or "token_file"
function M.connect(o, saved)
  local copts
  local s = false
  if not (o.url or o.socket or os.getenv("OBLETH_SLURM_URL") or os.getenv("OBLETH_SLURM_SOCKET")) then
    local err
    if saved then s, err = saved() end
    if s == nil then return nil, err end
  end
  if s then
    if not (s.url or s.socket) then
      return nil, { code = "not_configured", message = "the Management API has no Slurm connection saved" }
    end
    copts = { url = s.url, socket = s.socket, user = s.user, token = s.token, version = s.api_version or "auto",
      verify = s.verify ~= false, ca_file = s.ca_file, timeout = o.timeout or s.timeout or M.DEFAULT_TIMEOUT }
  else
    local e
    copts, e = M.connection_options(o)
    if not copts then return nil, e end
  end
  return slurm.connect(copts)
end

--- One line for an error: "code: message (field F)".
---@param err table|string {code, message, field?}
---@return string
function M.error_text(err)
  if type(err) ~= "table" then return tostring(err) end
  local s = ("%s: %s"):format(err.code or "error", err.message or "?")
  if err.field then s = s .. (" (field %s)"):format(err.field) end
  return s
end

return M
