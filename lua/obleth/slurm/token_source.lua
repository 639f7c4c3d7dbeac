--- Where obleth gets the Slurm JWT it sends to slurmrestd (settings `token_source`):
--   "static"    the token saved in the settings (`token`); it is never renewed
--   "key_file"  minted for the settings' `user` from the site's HS256 key (`token_key_file`, the
--               file slurmctld reads from AuthAltParameters=jwt_key=...), as `scontrol token
--               username=USER lifespan=token_lifespan` does; the file is read on the host of the
--               process that needs the token (the provisioner's, and obleth serve's for the test
--               and the resources it shows)
--   "command"   the output of `token_command` run by /bin/sh (a line `SLURM_JWT=...` or the bare
--               token), e.g. a wrapper that runs `scontrol token lifespan=3600` on a login node.
--               It runs on the event loop (obleth.proc: the daemon keeps serving), in a process
--               group killed after COMMAND_TIMEOUT seconds, with an environment of PATH, HOME, LANG
--               and COMMAND_ENV only (never an OBLETH_ variable), at most MAX_COMMAND_OUTPUT bytes
--               of output; its stderr is logged bounded and redacted.
--               Runs only where OBLETH_ALLOW_TOKEN_COMMAND=1 is set in the daemon's environment, so
--               the Management API alone cannot make a daemon run commands.
-- A renewable token is renewed once less than a third of its life (at least 30 s) is left. The
-- token is registered with the log as a secret and never returned by status().
local jwt = require "obleth.slurm.jwt"

local M = {}

M.DEFAULT_LIFESPAN = 1800 -- seconds, for minted tokens
--- Seconds token_command may run before its process group is killed: OBLETH_TOKEN_COMMAND_TIMEOUT
--- in the daemon's environment (1..600), else 30.
M.COMMAND_TIMEOUT = math.tointeger(tonumber(os.getenv("OBLETH_TOKEN_COMMAND_TIMEOUT") or ""))
if not M.COMMAND_TIMEOUT or M.COMMAND_TIMEOUT < 1 or M.COMMAND_TIMEOUT > 600 then M.COMMAND_TIMEOUT = 30 end
--- Seconds: a static token expiring sooner is warned about (obleth.schema.thresholds).
M.WARN_BEFORE = require("obleth.schema.thresholds").token_warn_before

--- Seconds before expiry at which a token issued at `iat` expiring at `exp` is renewed: a third
--- of its life, and at least 30 s (at most half its life, for very short tokens).
---@param iat number epoch seconds
---@param exp number epoch seconds
---@return number
function M.margin(iat, exp)
  local life = exp - iat
  return math.max(math.min(30, life / 2), life / 3)
end

--- The largest key file read (Slurm's jwt_key is a few dozen bytes; AuthAltParameters takes up to a
--- few hundred): a bigger file is not a JWT key.
M.MAX_KEY_FILE = 64 * 1024

-- The HS256 key, as Slurm keeps its jwt_key: a regular file of 1 byte to MAX_KEY_FILE, owned by the
-- service user (this process's effective uid), readable or writable by nobody else (no group or
-- other bit of 0066), and never obleth's own database (nor its -wal / -shm) or a file under its state
-- directory (`protected`). Read with a bound, so a path (it comes through the API) can be neither a
-- FIFO that blocks the loop, nor /dev/zero, nor a huge file, nor /proc's size-0 files, nor /etc/shadow.
-- Returns the key | nil, {code = "token_source", field = "token_key_file", message = the reason}.
---@param path string
---@param protected {files: string[]|nil, dirs: string[]|nil}|nil paths the key may not be (or be under)
local function _read(path, protected)
  local function refused(why)
    return nil, { code = "token_source", field = "token_key_file",
      message = ("token_key_file %s: %s"):format(path, why) }
  end
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then return refused("must be an absolute path") end
  local ok, sys = pcall(require, "obleth.sys")
  if not ok then return refused("cannot be checked without the obleth host") end
  local st = sys.stat(path)
  if not st then return refused("does not exist, or this process cannot reach it") end
  if st.type ~= "file" then return refused("is not a regular file") end
  local real = sys.realpath(path) or path
  for _, f in ipairs(protected and protected.files or {}) do
    local fst = sys.stat(f)
    if (fst and fst.dev == st.dev and fst.ino == st.ino) or real == (sys.realpath(f) or f) then
      return refused("is obleth's own database, never a JWT key")
    end
  end
  for _, d in ipairs(protected and protected.dirs or {}) do
    local rd = (sys.realpath(d) or d):gsub("/+$", "")
    if rd ~= "" and real:sub(1, #rd + 1) == rd .. "/" then
      return refused(("is under obleth's state directory %s, never a JWT key"):format(rd))
    end
  end
  local euid = sys.geteuid()
  if st.uid ~= euid then
    return refused(("is owned by uid %d, not by the service user (uid %d): chown it"):format(st.uid, euid))
  end
  if st.mode & 0x36 ~= 0 then -- 0066: group or others may read or write it
    return refused(("is readable or writable by group or others (mode %04o): chmod 600 it"):format(st.mode))
  end
  if st.size == 0 or st.size > M.MAX_KEY_FILE then
    return refused(("must hold 1 byte to %d KiB (it has %d bytes)"):format(M.MAX_KEY_FILE // 1024, st.size))
  end
  local fh = io.open(path, "rb")
  if not fh then return refused("this process cannot read it") end
  local s = fh:read(M.MAX_KEY_FILE + 1)
  fh:close()
  if not s or #s == 0 or #s > M.MAX_KEY_FILE then return refused("changed while it was read") end
  return s
end
M.read_key_file = _read

--- The paths a key file may never be in this process: obleth's database (and its -wal, -shm), and
--- its state directories (systemd's STATE_DIRECTORY, colon-separated, as the units set it).
---@param db string|nil the database file
---@param state_dirs string|nil default: os.getenv("STATE_DIRECTORY")
---@return {files: string[], dirs: string[]}
function M.protected_paths(db, state_dirs)
  local p = { files = {}, dirs = {} }
  if db then
    for _, suffix in ipairs({ "", "-wal", "-shm", "-journal" }) do p.files[#p.files + 1] = db .. suffix end
  end
  for d in (state_dirs or os.getenv("STATE_DIRECTORY") or ""):gmatch("[^:]+") do p.dirs[#p.dirs + 1] = d end
  return p
end

--- The largest output of token_command kept (a JWT is a few hundred bytes): more kills the
--- command and is an error. Its stderr is kept up to MAX_COMMAND_STDERR bytes, for the log.
M.MAX_COMMAND_OUTPUT = 64 * 1024
M.MAX_COMMAND_STDERR = 2048
--- What token_command's environment holds besides PATH, HOME and LANG (never an OBLETH_ variable:
--- the child does not get the admin token or any other setting of the daemon).
M.COMMAND_ENV = { "USER", "LOGNAME", "SLURM_CONF", "KRB5CCNAME", "SSH_AUTH_SOCK" }

-- token_command by /bin/sh -c on the event loop (obleth.proc: the loop keeps serving while it
-- runs), killed with its process group after `timeout` seconds.
-- Returns stdout | nil, err; and the command's stderr (bounded), for the caller to log.
local function _run(cmd, timeout)
  local r, perr = require("obleth.proc").run { argv = { "/bin/sh", "-c", cmd }, timeout = timeout,
    stdout_limit = M.MAX_COMMAND_OUTPUT, stderr_limit = M.MAX_COMMAND_STDERR, inherit = M.COMMAND_ENV }
  if not r then return nil, { code = "token_source", field = "token_command", message = perr.message } end
  local msg
  if r.timed_out then msg = ("timed out after %d s (killed)"):format(timeout)
  elseif r.stdout_truncated then msg = ("printed more than %d KiB (killed)"):format(M.MAX_COMMAND_OUTPUT // 1024)
  elseif r.signal then msg = "was killed by SIG" .. r.signal
  elseif r.status ~= 0 then msg = ("exited with status %d"):format(r.status) end
  if msg then return nil, { code = "token_source", field = "token_command", message = msg }, r.stderr end
  return r.stdout, nil, r.stderr
end

--- The Slurm JWT's state as operators see it: {source, expires_at, renewed_at, warning}. A static
--- token's expiry is read from it; a renewed one's is what the provisioner last reported. The
--- warning says when a static token expires within M.WARN_BEFORE (or has), or renewal fails.
--- One answer for the Slurm card (GET /api/v1/settings/slurm) and /metrics.
---@param s table the Slurm settings (the serve context's slurm_settings())
---@param prov table|nil the provisioner's status (store:provisioner_status()): its `token` report
---@param now number epoch seconds
---@return table {source, expires_at?, renewed_at?, warning?}
function M.status(s, prov, now)
  local out = { source = s.token_source }
  now = math.floor(now)
  if s.token_source == "static" then
    if s.token then
      out.expires_at = jwt.token_expiry(s.token)
      local left = out.expires_at and out.expires_at - now
      if left and left <= 0 then
        out.warning = "the saved JWT has expired: every call to slurmrestd fails until it is replaced"
      elseif left and left < M.WARN_BEFORE then
        out.warning = ("the saved JWT expires in %d min and is not renewed (token_source static)"):format(left // 60)
      end
    end
  else
    local pt = prov and prov.token
    if type(pt) == "table" and pt.source == s.token_source then
      out.expires_at, out.renewed_at = pt.expires_at, pt.renewed_at
      if pt.error and pt.error ~= require("obleth.util.json").null then
        out.warning = "renewing the JWT fails: " .. tostring(pt.error)
      end
    end
  end
  return out
end

local Source = {}
Source.__index = Source

--- A token source (one per process: it caches the current token).
---@param opts {now: fun(): number|nil, read: fun(path: string): string|nil, table|nil,
---  run: fun(cmd: string, timeout: integer): string|nil, table|nil, log: table|nil,
---  allow_command: boolean|nil, hmac: function|nil}|nil  for tests; the defaults read files, run /bin/sh,
---  use obleth.log and obleth.crypto's HMAC
function M.new(opts)
  opts = opts or {}
  local allow = opts.allow_command
  if allow == nil then allow = os.getenv("OBLETH_ALLOW_TOKEN_COMMAND") == "1" end
  local protected = opts.protected or M.protected_paths(nil)
  local read = opts.read or function(path) return _read(path, protected) end
  return setmetatable({ now = opts.now or os.time, read = read, run = opts.run or _run, hmac = opts.hmac,
    log = opts.log or require("obleth.log"), allow_command = allow, cache = nil, err = nil }, Source)
end

local function _key(s)
  return table.concat({ tostring(s.token_source), tostring(s.token_key_file), tostring(s.token_command),
    tostring(s.user), tostring(s.token_lifespan) }, "\0")
end

function Source:_fetch(s, now)
  local src = s.token_source
  if src == "key_file" then
    if not s.user then
      return nil, { code = "token_source", field = "user", message = "token_source key_file needs the Slurm user" }
    end
    local key, rerr = self.read(s.token_key_file)
    if not key then
      return nil, { code = "token_source", field = "token_key_file",
        message = ("cannot read the JWT key on this host: %s"):format(rerr.message) }
    end
    return jwt.mint { key = key, user = s.user, lifespan = s.token_lifespan or M.DEFAULT_LIFESPAN,
      now = math.floor(now), hmac_sha256_hex = self.hmac }
  elseif src == "command" then
    if not self.allow_command then
      return nil, { code = "token_source", field = "token_command", message = "token_command is not run on this "
        .. "host: set OBLETH_ALLOW_TOKEN_COMMAND=1 in the daemon's environment to allow it" }
    end
    local out, cerr, stderr = self.run(s.token_command, M.COMMAND_TIMEOUT)
    if stderr and stderr ~= "" then
      -- bounded (MAX_COMMAND_STDERR), and redacted: every secret the log knows, and anything
      -- shaped like a JWT (the token it may have printed there too)
      local red = stderr:gsub("eyJ[%w_%-]*%.[%w_%-]+%.[%w_%-]*", "[redacted]")
      if self.log.redact then red = self.log.redact(red) end
      self.log.warn("slurm_token_command_stderr", { stderr = red })
    end
    if not out then
      return nil, { code = "token_source", field = "token_command", message = "token_command " .. cerr.message }
    end
    local tok
    for line in out:gmatch("[^\r\n]+") do
      local t = line:match("^%s*SLURM_JWT=(%S+)%s*$") or line:match("^%s*(%S+%.%S+%.%S+)%s*$")
      if t then tok = t end
    end
    if not tok then
      return nil, { code = "token_source", field = "token_command", message = "token_command printed no token "
        .. "(a line SLURM_JWT=... or the bare JWT)" }
    end
    return tok
  end
  return nil, { code = "token_source", field = "token_source", message = "unknown token_source " .. tostring(src) }
end

--- The token to send now for settings `s` (a table with token, token_source, token_key_file,
--- token_command, token_lifespan, user). Static: s.token. Renewable: the cached token until its
--- renewal time, then a new one; when renewing fails, the previous token while it is still valid.
---@return string|nil token, table|nil err {code = "token_source", field, message}
function Source:token(s)
  local src = s.token_source or "static"
  if src == "static" then
    self.cache, self.err = nil, nil
    return s.token
  end
  local now = self.now()
  local key = _key(s)
  local c = self.cache
  if c and c.key ~= key then c = nil end
  if c and now < c.renew_at then return c.token end
  local tok, err = self:_fetch(s, now)
  local exp
  if tok then
    self.log.add_secret(tok)
    local e
    exp, e = jwt.token_expiry(tok)
    if not exp then
      tok, err = nil, { code = "token_source", field = src == "command" and "token_command" or "token_key_file",
        message = "the new token has no expiry: " .. tostring(e and e.message) }
    end
  end
  if not tok then
    if not self.err or self.err.message ~= err.message then
      self.log.warn("slurm_token_renewal_failed", { source = src, error = err.message })
    end
    self.err = err
    if c and now < c.exp then return c.token end
    return nil, err
  end
  if self.err then self.log.info("slurm_token_renewed", { source = src, after_error = true }) end
  self.err = nil
  self.cache = { key = key, token = tok, exp = exp, renewed_at = now, renew_at = exp - M.margin(now, exp) }
  return tok
end

--- What may be shown of the current token: {source, expires_at, renewed_at, error} (never the token).
---@param s table the settings
function Source:status(s)
  local src = s.token_source or "static"
  local out = { source = src }
  if src == "static" then
    out.expires_at = s.token and jwt.token_expiry(s.token) or nil
  elseif self.cache and self.cache.key == _key(s) then
    out.expires_at, out.renewed_at = self.cache.exp, self.cache.renewed_at
  end
  out.error = self.err and self.err.message or nil
  return out
end

return M
