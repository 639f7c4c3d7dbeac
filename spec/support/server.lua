-- Start `obleth serve` as a child process for integration specs: a free port,
-- a temporary database (or a given one, to restart on it), a fresh admin token.
--   local srv = server.start{db = path?, env = {K = V}?, port = n?}  (port: restart on the same one)
--   srv.base, srv.token, srv.db, srv.pid
--   srv:request(method, path, body_table_or_string?, headers?) -> status, decoded_json|nil, raw, headers
--   srv:log() -> the server's stderr so far;  srv:stop(sig?) -> exit code, stdout, stderr
local util = require "spec.support.util"
local sys = require "obleth.sys"
local http = require "obleth.http"
local cjson = require "cjson"

local M = {}

local slurp = util.slurp

--- A fresh database path (removed with its -wal/-shm by srv:cleanup()); with
--- OBLETH_TEST_STORE=postgresql, the URL of a fresh database on the PostgreSQL of spec.support.pg
--- instead (dropped by srv:cleanup(), or when the process ends): to run specs with serve on PostgreSQL.
local pg_drops = {}
function M.tmpdb()
  if os.getenv("OBLETH_TEST_STORE") == "postgresql" then
    local url, drop = require("spec.support.pg").database()
    pg_drops[url] = drop
    return url
  end
  local p = os.tmpname()
  os.remove(p)
  return p .. ".db"
end

local Srv = {}
Srv.__index = Srv

--- Start a server; raises when it does not come up within 10 s.
---@param opts {db: string|nil, token: string|nil, env: table|nil, args: string[]|nil,
---  exe: string|nil, port: integer|nil, nofile: integer|nil}|nil  exe: another obleth binary (e.g. an
---  installed copy); port: listen there instead of a free one (a restart that clients must find
---  again); nofile: the server's descriptor limit (ulimit -n)
function M.start(opts)
  opts = opts or {}
  local token = opts.token or sys.random_hex(24)
  local db = opts.db or M.tmpdb()
  local errf = os.tmpname()
  local env = { OBLETH_ADMIN_TOKEN = token, OBLETH_RECIPES_DIR = opts.recipes_dir }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local assigns = {}
  for k, v in pairs(env) do
    if v ~= false then assigns[#assigns + 1] = k .. "=" .. util.shq(v) end
  end
  local argv = { util.shq(opts.exe or util.obleth()), "serve", "--listen",
    "127.0.0.1:" .. math.tointeger(opts.port or 0), "--db", util.shq(db) }
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = util.shq(a) end
  local script = ("echo $$; %s%s exec %s 2>%s"):format(
    opts.nofile and ("ulimit -n %d && "):format(opts.nofile) or "", table.concat(assigns, " "),
    table.concat(argv, " "), util.shq(errf))
  local fh = assert(io.popen("exec sh -c " .. util.shq(script)))
  local pid = tonumber(fh:read("l"))
  local line = fh:read("l")
  local self = setmetatable({ pid = pid, fh = fh, errf = errf, token = token, db = db, lines = { line } }, Srv)
  local port = line and line:match("listening on http://127%.0%.0%.1:(%d+)")
  if not port then
    local _, _, code = fh:close()
    local err = slurp(errf)
    os.remove(errf)
    error(("obleth serve did not start (exit %s): %s %s"):format(tostring(code), tostring(line), err), 2)
  end
  self.port = tonumber(port)
  self.base = "http://127.0.0.1:" .. port
  return self
end

-- JSON numbers arrive as floats from cjson: integral ones become integers, so ids print as "3".
local function _ints(v)
  if type(v) == "number" then return math.tointeger(v) or v end
  if type(v) == "table" then
    for k, x in pairs(v) do v[k] = _ints(x) end
  end
  return v
end
M.ints = _ints

--- One request with the admin token (unless headers.Authorization is given, or false to send none).
function Srv:request(method, path, body, headers)
  local h = { Authorization = "Bearer " .. self.token }
  for k, v in pairs(headers or {}) do h[k] = v end
  if h.Authorization == false then h.Authorization = nil end
  if type(body) == "table" then body = cjson.encode(body); h["Content-Type"] = "application/json" end
  local r, err = http.request { url = self.base .. path, method = method, headers = h, body = body, timeout = 20 }
  if not r then return nil, err end
  local ok, doc = pcall(cjson.decode, r.body)
  return r.status, ok and _ints(doc) or nil, r.body, r.headers
end

function Srv:log()
  return slurp(self.errf)
end

--- Signal the server (default TERM) and wait for it; returns exit code, stdout rest, stderr.
function Srv:stop(sig)
  if not self.fh then return self.code, "", self.err end
  sys.kill(self.pid, sig or "TERM")
  local rest = self.fh:read("a")
  local _, _, code = self.fh:close()
  self.fh = nil
  self.code = code
  self.err = slurp(self.errf)
  os.remove(self.errf)
  return code, rest, self.err
end

--- Remove the database files (after stop).
function Srv:cleanup()
  if self.fh then self:stop("TERM") end
  if pg_drops[self.db] then
    pg_drops[self.db]()
    pg_drops[self.db] = nil
    return
  end
  for _, s in ipairs({ "", "-wal", "-shm" }) do os.remove(self.db .. s) end
end

return M
