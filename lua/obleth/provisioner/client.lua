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
    body = type(body) == "string" and body or body and cjson.encode(body) or nil }
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

--- Everything one pass needs (settings with the JWT, specs, replicas), as a full snapshot.
--- The client holds the models of the last snapshot and its version, and asks only for what changed
--- since (`?since=`, docs/managed-spec.md "Snapshot versions"); the API answers a full snapshot
--- instead whenever it cannot make a delta from that version (obleth serve restarted, another lease
--- generation, a version it does not know). The models answered are the ones the client holds, not
--- copies (a deep copy of 10,000 replicas cost a tenth of a pass: docs/performance.md): the caller
--- reads them and never writes into them (a pass writes into its own copies of rows: plan.reconcile).
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
  for i, id in ipairs(ids) do out[i] = models[id] end
  doc.models, doc.removed, doc.load, doc.load_idle = out, nil, nil, nil
  return doc
end

--- Forget the held snapshot: the next snapshot is a full one.
function Client:resync() self.held = nil end

--- The body limit assumed of an obleth serve whose lease answer does not say it (its default).
M.BODY_LIMIT = 1048576

-- Room kept in each part for the HTTP layer's reading of the limit and the part's own fields.
local PART_SLACK = 512

--- A report's request bodies, each at most `limit` bytes when the rows allow it (docs/managed-spec.md,
--- "A report in parts"): the whole report when it fits; else parts with `more: true` carrying replica
--- rows (and the pass), then the last part with the remaining rows and everything else. A single row
--- larger than a part goes alone in its part (obleth serve answers 413 for it: nothing else helps).
---@param report table
---@param limit integer bytes
---@return string[] bodies, in the order to send
function M.report_parts(report, limit)
  local whole = cjson.encode(report)
  if #whole <= limit then return { whole } end
  local rows = report.replicas or {}
  local rest = {}
  for k, v in pairs(report) do rest[k] = v end
  rest.replicas = json.array()
  local head = cjson.encode { pass = report.pass, lease_generation = report.lease_generation, more = true }
  head = head:sub(1, -2) .. ',"replicas":['
  local budget = limit - #head - PART_SLACK
  local last_budget = limit - #cjson.encode(rest) - PART_SLACK
  local enc = {}
  for i, r in ipairs(rows) do enc[i] = cjson.encode(r) end
  local bodies, i, n = {}, 1, #enc
  while i <= n do
    -- the remaining rows fit beside the rest of the report: they are the last part
    local size, j = 0, i
    while j <= n and size + #enc[j] + 1 <= last_budget do size, j = size + #enc[j] + 1, j + 1 end
    if j > n then break end
    size, j = 0, i
    repeat size, j = size + #enc[j] + 1, j + 1 until j > n or size + #enc[j] + 1 > budget
    bodies[#bodies + 1] = head .. table.concat(enc, ",", i, j - 1) .. "]}"
    i = j
  end
  local tail = json.array()
  for k = i, n do tail[#tail + 1] = rows[k] end
  rest.replicas = tail
  bodies[#bodies + 1] = cjson.encode(rest)
  return bodies
end

--- Report one pass (report.lease_generation: the lease held; 409 code "lease_lost" when stale).
--- A report larger than obleth serve's body limit (its lease answer's body_limit) goes in parts,
--- each fenced by the lease like a whole one; a 413 all the same (a smaller limit than said) sends it
--- again in smaller parts (a part applied twice changes nothing more). Returns the last part's answer.
function Client:report(report)
  local limit = math.tointeger(self.body_limit) or M.BODY_LIMIT
  while true do
    local bodies = M.report_parts(report, limit)
    local res, err
    for _, body in ipairs(bodies) do
      res, err = self:_call("POST", "/api/v1/provisioner/report", body)
      if not res then break end
    end
    if res or err.status ~= 413 or limit <= 4096 then
      if res then res.parts = #bodies end
      return res, err
    end
    limit = limit // 2
  end
end

--- Acquire or renew the lease: req {holder, host, pid, ttl, generation|nil}.
--- Returns {lease = {holder, host, pid, generation, expires_at}, acquired, ttl}, or nil, err where
--- err.code "lease_held" and err.lease name the holder.
--- The token an acquisition answers is kept by the client (never in the result) and sent from then on.
function Client:lease(req)
  local res, err = self:_call("POST", "/api/v1/provisioner/lease", req)
  -- the largest request body obleth serve takes: a larger report goes in parts
  if res and math.tointeger(res.body_limit) then self.body_limit = res.body_limit end
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
