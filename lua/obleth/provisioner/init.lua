--- obleth-provisioner: keeps every managed model's replicas running on Slurm.
--
-- Each pass: read the snapshot from the Management API, list the cluster's
-- jobs once, decide (obleth.provisioner.plan), cancel and submit through
-- slurmrestd, health-check running replicas concurrently, and report the
-- pass. Settings and specs are read every pass, so changes apply on the next
-- one without a restart. A failed poll never marks a replica failed: the
-- pass is reported with its error and nothing else changes.
local loop = require "obleth.loop"
local http = require "obleth.http"
local log = require "obleth.log"
local sys = require "obleth.sys"
local cjson = require "cjson"
local slurm = require "obleth.slurm"
local plan = require "obleth.provisioner.plan"
local jobscript = require "obleth.job"
local tag = require "obleth.job.tag"

local M = {}

local REPLICA_FIELDS = { "model_id", "slot", "nonce", "state", "job_id", "node", "port", "endpoint",
  "submitted_at", "started_at", "healthy_at", "ended_at", "check_failures", "problem", "pending_reason",
  "successor_of", "launch_id", "end", "generation", "slurm" }
local CLEARABLE = { node = true, endpoint = true, problem = true, pending_reason = true, successor_of = true }

local function bindir()
  return (sys.paths.exe or ""):match("^(.*)/[^/]*$")
end

--- A daemon instance.
---@param opts {api: table, interval: number|nil, jitter: number|nil, policy: table|nil,
---  fault: string|nil, drain_seconds: number|nil}
function M.new(opts)
  local self = {
    api = opts.api, interval = opts.interval or 5, jitter = opts.jitter or 0.1, fault = opts.fault,
    policy = opts.policy, drain_seconds = opts.drain_seconds,
    conn = nil, conn_key = nil, memory = {}, last_checked = {}, node_addr = {}, node_addr_at = 0,
    stopping = false, in_pass = false, failures = 0,
  }
  return setmetatable(self, { __index = M })
end

function M:_connection(settings)
  if not settings or not (settings.url or settings.socket) then
    return nil, { kind = "config", message = "no Slurm connection is saved (Settings → Slurm)" }
  end
  local key = table.concat({ tostring(settings.url), tostring(settings.socket), tostring(settings.user),
    tostring(settings.token), tostring(settings.api_version), tostring(settings.verify), tostring(settings.ca_file) }, "\0")
  if self.conn and self.conn_key == key then return self.conn end
  local conn, err = slurm.connect { url = settings.url, socket = settings.socket, user = settings.user,
    token = settings.token, version = settings.api_version or "auto", verify = settings.verify ~= false,
    ca_file = settings.ca_file, timeout = 15 }
  if not conn then return nil, err end
  log.info("slurm_connected", { version = conn:version(), url = settings.url or settings.socket })
  self.conn, self.conn_key = conn, key
  return conn
end

-- Node addresses (NodeAddr) for endpoints, refreshed at most every 60 s or
-- when a node is missing.
function M:_address(conn, node, now)
  if not self.node_addr[node] or now - self.node_addr_at > 60 then
    local nodes = conn:nodes()
    if nodes then
      self.node_addr = {}
      for _, n in ipairs(nodes) do self.node_addr[n.name] = n.address or n.hostname or n.name end
      self.node_addr_at = now
    end
  end
  return self.node_addr[node] or node
end

local function serialize(row)
  local o = {}
  for _, k in ipairs(REPLICA_FIELDS) do
    local v = row[k]
    if v == nil and CLEARABLE[k] then v = cjson.null end
    o[k] = v
  end
  return o
end

-- Health-check the due replicas concurrently; returns results by nonce.
local function check_all(due)
  local results, pending = {}, #due
  if pending == 0 then return results end
  for _, d in ipairs(due) do
    loop.spawn(function()
      local r, err = http.request { url = d.url, timeout = d.timeout, connect_timeout = math.min(d.timeout, 3) }
      if r then
        results[d.row.nonce] = { ok = r.status >= 200 and r.status < 300, status = r.status,
          error = (r.status < 200 or r.status >= 300) and ("HTTP " .. r.status) or nil }
      else
        results[d.row.nonce] = { ok = false, error = err.message }
      end
      pending = pending - 1
    end)
  end
  while pending > 0 do loop.sleep(0.01) end
  return results
end

--- The rest of the live facts a pass decides from, besides the snapshot and
--- the one job listing: for each recorded job the listing no longer shows,
--- one accounting lookup (conn:job). Reads only.
---@param conn table an obleth.slurm connection
---@param snap table the Management API snapshot
---@param jobs table[] conn:jobs()
---@return table|nil job_by_id job id → job, or nil when the snapshot has no installation id
---@return string|nil err why nothing may be decided (nothing is submitted or cancelled then)
function M.lookup_jobs(conn, snap, jobs)
  if not (type(snap.instance) == "string" and snap.instance:match("^%x%x%x%x%x%x%x%x$")) then
    return nil, "the Management API gave no installation id (snapshot.instance): nothing is submitted or cancelled"
  end
  local listed = {}
  for _, j in ipairs(jobs) do listed[j.id] = true end
  local job_by_id = {}
  for _, m in ipairs(snap.models or {}) do
    for _, r in ipairs(m.replicas or {}) do
      if r.job_id and not listed[r.job_id] and r.state ~= "lost" then
        local j = conn:job(r.job_id)
        if j then job_by_id[r.job_id] = j end
      end
    end
  end
  return job_by_id
end

--- The lost and rollover rules a pass applies: the policy set's current
--- versions (reloaded first: edits in the override directory apply on the
--- next pass; a broken edit keeps the previous version), or the built-in
--- ones without a set.
---@param policy table|nil an obleth.policy set
---@return function|nil lost, function|nil rollover (nil: plan's built-in rule)
---@return string|nil err "policy (previous version kept): NAME: message; ..." when a file failed
function M.rules(policy)
  if not policy then return nil, nil, nil end
  policy.reload()
  local perr
  local perrs = policy.errors()
  if perrs and next(perrs) then
    local msgs = {}
    for name, e in pairs(perrs) do
      msgs[#msgs + 1] = ("%s: %s"):format(name, type(e) == "table" and e.message or tostring(e))
    end
    table.sort(msgs)
    perr = "policy (previous version kept): " .. table.concat(msgs, "; ")
  end
  return policy.get("lost").check, policy.get("rollover").plan, perr
end

--- One pass. Returns the report it sent (or would have sent), or nil, err.
function M:pass()
  local t0, started = loop.monotonic(), loop.now()
  local snap, err = self.api:snapshot()
  if not snap then return nil, err end
  local settings = snap.settings or {}
  if type(settings.token) == "string" then log.add_secret(settings.token) end
  if settings.defaults and type(settings.defaults.hf_token) == "string" then log.add_secret(settings.defaults.hf_token) end
  local now = loop.now()

  -- carry what only this process remembers (drain deadlines, sent cancels)
  for _, m in ipairs(snap.models or {}) do
    for _, r in ipairs(m.replicas or {}) do
      local mem = self.memory[r.nonce]
      if mem then for k, v in pairs(mem) do if r[k] == nil then r[k] = v end end end
    end
  end

  local report = { pass = { started_at = started }, replicas = {}, outcomes = {}, endpoints = {},
    provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }
  local pass_error
  local conn, cerr = self:_connection(settings)
  local jobs, job_by_id
  if conn then
    local jerr
    jobs, jerr = conn:jobs()
    if not jobs then pass_error = "listing jobs: " .. tostring(jerr.message) end
  elseif next(snap.models or {}) then
    pass_error = cerr.message
  end

  if jobs then
    local ierr
    job_by_id, ierr = M.lookup_jobs(conn, snap, jobs)
    if not job_by_id then pass_error, jobs = ierr, nil end
  end
  if jobs then
    local lost_rule, rollover_rule, perr = M.rules(self.policy)
    if perr then pass_error = perr end
    local state = plan.reconcile { now = now, snapshot = snap, jobs = jobs, job_by_id = job_by_id,
      nonce = function() return sys.random_hex(8) end,
      rand = function(lo, hi) return math.random(lo, hi) end,
      lost = lost_rule, rollover = rollover_rule, drain_seconds = self.drain_seconds }

    for _, c in ipairs(state.cancels) do
      local ok, e = conn:cancel(c.job_id)
      log.info("job_cancel", { job_id = c.job_id, why = c.why, ok = ok and true or false,
        error = e and e.message or nil })
      if c.row then c.row.cancel_sent = true end
    end

    for _, s in ipairs(state.submits) do
      s.model.instance = snap.instance
      local desc = jobscript.desc(s.model, s.row, s.spec, settings.defaults or {}, bindir(), sys.paths.exe)
      local id, res = conn:submit(desc)
      if id then
        s.row.job_id, s.row.state, s.row.submitted_at = id, "submitted", loop.now()
        if res and #res > 0 then s.row.problem = "Slurm: " .. tostring(res[1].message) end
        log.info("job_submit", { model = s.model.name, slot = s.row.slot, job_id = id, nonce = s.row.nonce,
          port = s.row.port })
        -- fault-injection points for the specs (OBLETH_FAULT)
        if self.fault == "exit_after_submit" then
          log.warn("fault_injection", { point = "exit_after_submit", job_id = id })
          sys.exit_now(137)
        elseif self.fault == "pause_after_submit" then
          log.warn("fault_injection", { point = "pause_after_submit", job_id = id })
          loop.sleep(3)
        end
      elseif res.kind == "refused" or res.kind == "unsupported" then
        s.row.state, s.row.ended_at = "ended", loop.now()
        s.row["end"] = { state = "REFUSED", reason = res.message }
        report.provision_errors[tostring(s.model.id)] = { message = res.message, field = res.field,
          code = res.code, generation = s.spec.generation, at = loop.now() }
        log.warn("job_refused", { model = s.model.name, field = res.field, code = res.code, message = res.message })
      else
        -- transport trouble: the row stays pending and is tried next pass
        s.row.state = "pending"
        pass_error = "submit: " .. tostring(res.message)
      end
    end

    -- endpoints of replicas that started
    for _, mm in ipairs(state.models) do
      for _, row in ipairs(mm.rows) do
        if row.node and row.port and not row.endpoint and (row.state == "starting" or row.state == "healthy") then
          row.endpoint = ("http://%s:%d"):format(self:_address(conn, row.node, now), row.port)
          row._touched = true
        end
      end
    end

    local due = plan.due_checks(state, self.last_checked, loop.now())
    local results = check_all(due)
    for nonce in pairs(results) do self.last_checked[nonce] = loop.now() end
    local endpoints, hcancels = plan.health(state, results, loop.now())
    for _, c in ipairs(hcancels) do
      local ok = conn:cancel(c.job_id)
      log.info("job_cancel", { job_id = c.job_id, why = c.why, ok = ok and true or false })
      c.row.cancel_sent = true
    end
    report.endpoints = endpoints
    report.outcomes = state.outcomes
    report.acknowledged = state.ack
    for _, row in ipairs(state.rows) do
      report.replicas[#report.replicas + 1] = serialize(row)
      if row.state == "ended" or row.state == "lost" then
        self.memory[row.nonce] = nil
        self.last_checked[row.nonce] = nil
      else
        self.memory[row.nonce] = { cancel_at = row.cancel_at, cancel_sent = row.cancel_sent,
          unhealthy_since = row.unhealthy_since, cancel_why = row.cancel_why }
      end
    end
    for _, a in ipairs(state.adopted) do
      log.info("job_adopted", { job_id = a.job_id, nonce = a.nonce, model_id = a.model_id })
    end
  end

  report.pass.duration = loop.monotonic() - t0
  report.pass.error = pass_error
  local ok, rerr = self.api:report(report)
  if not ok then return nil, rerr end
  if pass_error then return nil, { kind = "pass", message = pass_error }, report end
  return report
end

--- Run passes until stopped. SIGTERM/SIGINT finish the pass in progress,
--- report it, and return 0; SIGHUP reloads the policy.
function M:run()
  local function stop(sig)
    log.info("signal", { signal = sig, in_pass = self.in_pass })
    self.stopping = true
    sys.sd_notify("STOPPING=1")
  end
  loop.on_signal("TERM", stop)
  loop.on_signal("INT", stop)
  loop.on_signal("HUP", function()
    if self.policy then
      self.policy.reload()
      local errs = self.policy.errors()
      log.info("policy_reload", { ok = not (errs and next(errs)), errors = errs and next(errs) and
        require("cjson").encode(require("obleth.util.format").jsonable(errs)) or nil })
    end
  end)
  sys.sd_notify("READY=1")
  log.info("provisioner_start", { api = self.api.base, interval = self.interval })
  local backoff = 1
  while not self.stopping do
    self.in_pass = true
    local ok, err = self:pass()
    self.in_pass = false
    local wait = self.interval
    if ok then
      backoff = 1
      self.failures = 0
      sys.sd_notify("WATCHDOG=1")
    else
      self.failures = self.failures + 1
      log.warn("pass_failed", { error = err and err.message or tostring(err), failures = self.failures })
      if err and (err.kind == "unreachable" or err.kind == "timeout" or err.kind == "http") then
        wait = math.min(60, backoff)
        backoff = backoff * 2
      end
    end
    wait = wait * (1 + self.jitter * (2 * math.random() - 1))
    local t_end = loop.monotonic() + wait
    while not self.stopping and loop.monotonic() < t_end do loop.sleep(0.1) end
  end
  log.info("provisioner_stop", {})
  return 0
end

M.tag = tag
return M
