--- The provisioner's client of the Management API (docs/managed-spec.md,
--- "Provisioner protocol"): one snapshot read and one report per pass.
local http = require "obleth.http"
local cjson = require "cjson"
local json = require "obleth.util.json"

local M = {}

--- A decoded JSON value as plain Lua data (obleth.util.json.plain).
M.plain = json.plain

-- Errors: nil, {code, message}; code is obleth.http's ("unreachable", "timeout", ...) when the API
-- did not answer, the API's own error code (e.g. "lease_held", "lease_lost"; "http" when the answer
-- had none) with status = the HTTP status when it answered with an error, or "bad_response".
local Client = {}
Client.__index = Client

---@param base_url string e.g. "http://127.0.0.1:8080"
---@param token string the admin token
function M.new(base_url, token, timeout)
  return setmetatable({ base = base_url:gsub("/+$", ""), token = token, timeout = timeout or 15 }, Client)
end

-- The lease token travels in this header on the lease, report, submits and release calls, once the
-- lease was acquired (the API answers it once, on acquisition; docs/managed-spec.md).
local TOKEN_HEADER = "Obleth-Lease-Token"

function Client:_call(method, path, body)
  local r, err = http.request { url = self.base .. path, method = method, timeout = self.timeout,
    headers = { Authorization = "Bearer " .. self.token, ["Content-Type"] = body and "application/json" or nil,
      Accept = "application/json", [TOKEN_HEADER] = self.lease_token },
    body = body and cjson.encode(body) or nil }
  if not r then return nil, { code = err.code, message = "Management API: " .. err.message } end
  local ok, doc = pcall(cjson.decode, r.body)
  if r.status ~= 200 then
    local e = ok and type(doc) == "table" and type(doc.error) == "table" and doc.error or {}
    local msg = e.message or r.body:sub(1, 200)
    return nil, { code = type(e.code) == "string" and e.code or "http", status = r.status,
      lease = e.lease and M.plain(e.lease),
      message = ("Management API %s %s: HTTP %d: %s"):format(method, path, r.status, tostring(msg)) }
  end
  if not ok then return nil, { code = "bad_response", message = "Management API answered with invalid JSON" } end
  return M.plain(doc)
end

-- A copy of plain data (the pass changes the tables it is given; the held models stay as served).
local copy = require("obleth.util.tables").deep_copy

--- Everything one pass needs (settings with the JWT, specs, replicas), as a full snapshot.
--- The client holds the models of the last snapshot and its version, and asks only for what changed
--- since (`?since=`, docs/managed-spec.md "Snapshot versions"); the API answers a full snapshot
--- instead whenever it cannot make a delta from that version (obleth serve restarted, another lease
--- generation, a version it does not know). Each call returns its own copy of every model.
---@param opts {ends: integer|nil}|nil ends: each slot's last job ends to include (the lost policy's
---  window, obleth.policy.lost.window); nil: the server's default (10). Another number than the held
---  models were read with asks for a full snapshot.
function Client:snapshot(opts)
  local ends = opts and math.tointeger(opts.ends)
  if self.held and self.held.ends ~= ends then self.held = nil end
  local held = self.held
  local q = {}
  if held then q[#q + 1] = "since=" .. held.version end
  if ends then q[#q + 1] = "ends=" .. ends end
  local path = "/api/v1/provisioner/snapshot" .. (#q > 0 and ("?" .. table.concat(q, "&")) or "")
  local doc, err = self:_call("GET", path)
  if not doc then return nil, err end
  local models = held and doc.delta and held.models or {}
  if not (held and doc.delta) then self.resyncs = (self.resyncs or 0) + 1 end
  for _, id in ipairs(doc.removed or {}) do models[id] = nil end
  if held and doc.delta then
    -- the router's load is live: a delta gives it for every model it leaves out (`load` by id for
    -- those the router has seen, else `load_idle`; neither when obleth serve has no router)
    local load, idle = doc.load or {}, doc.load_idle
    for id, m in pairs(models) do m.load = load[tostring(id)] or idle end
  end
  for _, m in ipairs(doc.models or {}) do models[m.id] = m end
  self.held = type(doc.version) == "string" and { version = doc.version, models = models, ends = ends } or nil
  local ids = {}
  for id in pairs(models) do ids[#ids + 1] = id end
  table.sort(ids)
  local out = {}
  for i, id in ipairs(ids) do out[i] = copy(models[id]) end
  doc.models, doc.removed, doc.load, doc.load_idle = out, nil, nil, nil
  return doc
end

--- Forget the held snapshot: the next snapshot is a full one.
function Client:resync() self.held = nil end

--- Report one pass (report.lease_generation: the lease held; 409 code "lease_lost" when stale).
function Client:report(report) return self:_call("POST", "/api/v1/provisioner/report", report) end

--- Acquire or renew the lease: req {holder, host, pid, ttl, generation|nil}.
--- Returns {lease = {holder, host, pid, generation, expires_at}, acquired, ttl}, or nil, err where
--- err.code "lease_held" and err.lease name the holder.
--- The token an acquisition answers is kept by the client (never in the result) and sent from then on.
function Client:lease(req)
  local res, err = self:_call("POST", "/api/v1/provisioner/lease", req)
  if res and res.token then
    self.held = nil -- a new lease: a full snapshot (docs/managed-spec.md, "Snapshot versions")
    self.lease_token = res.token
    res.token = nil
    -- never in this process's log, whatever prints an answer or a header
    local ok, log = pcall(require, "obleth.log")
    if ok and log.add_secret then log.add_secret(self.lease_token) end
  end
  return res, err
end

--- Wait between passes until the router asks for one (after `since`), or `timeout` seconds:
--- {seq, woken, why}. since nil answers the counter at once.
function Client:wait(since, timeout)
  local saved = self.timeout
  self.timeout = timeout + 10
  local res, err = self:_call("GET", ("/api/v1/provisioner/wait?timeout=%g%s"):format(timeout,
    since and ("&since=" .. math.tointeger(since)) or ""))
  self.timeout = saved
  return res, err
end

--- Give the lease up.
function Client:release(generation)
  return self:_call("DELETE", "/api/v1/provisioner/lease?generation=" .. math.tointeger(generation))
end

--- Record the replicas about to be submitted; nil, err (code "lease_lost") when the lease is not live.
function Client:submits(generation, rows)
  return self:_call("POST", "/api/v1/provisioner/submits", { lease_generation = generation, replicas = rows })
end

--- The Slurm settings saved in obleth serve (from OBLETH_ADMIN_BASE_URL + OBLETH_ADMIN_TOKEN), their
--- token registered as a secret; false when those variables are not set; nil, err when the API did
--- not answer (obleth.slurm.options.connect's `saved`).
---@return table|false|nil settings, table|nil err
function M.saved_slurm_settings()
  local base, admin = os.getenv("OBLETH_ADMIN_BASE_URL"), os.getenv("OBLETH_ADMIN_TOKEN")
  if not (base and admin) then return false end
  local snap, err = M.new(base, admin):snapshot()
  if not snap then return nil, err end
  local s = snap.settings or {}
  if type(s.token) == "string" then require("obleth.log").add_secret(s.token) end
  return s
end

return M
