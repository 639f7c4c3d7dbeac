--- obleth-provisioner: keeps every managed model's replicas running on Slurm.
--
-- Each pass: read the snapshot from the Management API, list the cluster's
-- jobs once, decide (obleth.provisioner.plan), cancel and submit through
-- slurmrestd, health-check running replicas concurrently, and report the
-- pass. Settings and specs are read every pass, so changes apply on the next
-- one without a restart. A failed poll never marks a replica failed: the
-- pass is reported with its error and nothing else changes. The test-only crash points and faults
-- are hooks of obleth.provisioner.chaos (chaos.at), inert unless armed.
local loop = require "obleth.loop"
local http = require "obleth.http"
local log = require "obleth.log"
local sys = require "obleth.sys"
local cjson = require "cjson"
local slurm = require "obleth.slurm"
local plan = require "obleth.provisioner.plan"
local jobscript = require "obleth.job"
local tag = require "obleth.job.tag"
local chaos = require "obleth.provisioner.chaos"
local tables = require "obleth.util.tables"

local M = {}

local REPLICA_FIELDS = plan.REPORT_FIELDS
local CLEARABLE = { node = true, endpoint = true, problem = true, pending_reason = true, successor_of = true }

local function bindir()
  return (sys.paths.exe or ""):match("^(.*)/[^/]*$")
end

--- Seconds a lease lasts unless renewed: a few pass intervals, at least 15 s.
---@param interval number seconds between passes
function M.lease_ttl(interval) return math.min(3600, math.max(15, 3 * interval)) end

--- A daemon instance.
---@param opts {api: table, interval: number|nil, jitter: number|nil, policy: table|nil,
---  drain_seconds: number|nil, holder: string|nil, lease_ttl: number|nil,
---  backoff_max: number|nil, check_concurrency: integer|nil, log_report: {url: string, key: string}|nil}
---  log_report: the Management API's base URL as the compute nodes reach it and the key the per-replica
---  report tokens derive from (the admin token): each job gets OBLETH_LOG_URL and OBLETH_LOG_TOKEN
---  (docs/replicas-and-failures.md, "The job's last words"); nil: jobs report nothing;
---  holder: the name this process gives the lease (default "obleth-provisioner"; host and PID are added);
---  lease_ttl: seconds (default M.lease_ttl(interval)); backoff_max: the longest wait, in seconds,
---  between passes while slurmrestd or the Management API is unreachable (default 60);
---  check_concurrency: health checks in flight at most (default M.CHECK_CONCURRENCY)
function M.new(opts)
  local interval = opts.interval or 5
  local self = {
    api = opts.api, interval = interval, jitter = opts.jitter or 0.1,
    policy = opts.policy, drain_seconds = opts.drain_seconds,
    conn = nil, conn_key = nil, memory = {}, last_checked = {}, node_addr = {}, node_addr_at = 0,
    stopping = false, in_pass = false, failures = 0,
    identity = { holder = opts.holder or "obleth-provisioner", host = sys.hostname(), pid = sys.getpid() },
    lease_ttl = opts.lease_ttl or M.lease_ttl(interval), lease = nil,
    backoff_max = opts.backoff_max or 60, said = {}, check_concurrency = opts.check_concurrency,
    tokens = opts.tokens or require("obleth.slurm.token_source").new(),
    log_report = opts.log_report,
  }
  return setmetatable(self, { __index = M })
end

-- Log only when `what`'s state changes (the first time too): returns true when it changed.
function M:_changed(what, state)
  if self.said[what] == state then return false end
  self.said[what] = state
  return true
end

--- Acquire or renew the lease. Returns true while this process holds it; false, lease when another
--- provisioner does (logged once per holder); nil, err when the Management API could not answer.
function M:_hold()
  local t0 = loop.monotonic()
  local id = self.identity
  local res, err = self.api:lease { holder = id.holder, host = id.host, pid = id.pid, ttl = self.lease_ttl,
    generation = self.lease and self.lease.generation or nil }
  if res then
    local l = res.lease
    -- the local deadline counts from before the request: never later than the server's expiry
    self.lease = { generation = l.generation, expires_at = l.expires_at, deadline = t0 + (res.ttl or self.lease_ttl) }
    if res.acquired then
      log.info("lease_acquired", { generation = l.generation, ttl = res.ttl, expires_at = l.expires_at })
    end
    self:_changed("lease", "held:" .. l.generation)
    return true
  end
  if err.code == "lease_held" and err.lease then
    local l = err.lease
    if self.lease then log.warn("lease_lost", { generation = self.lease.generation, holder = l.holder }) end
    self.lease = nil
    if self:_changed("lease", ("waiting:%s:%s:%s:%s"):format(l.holder, l.host, l.pid, l.generation)) then
      log.warn("lease_held", { holder = l.holder, host = l.host, pid = l.pid, generation = l.generation,
        expires_at = l.expires_at, message = "another provisioner holds the lease; waiting for it to expire" })
    end
    return false, l
  end
  return nil, err
end

-- True while this process surely holds the lease: more than half its ttl is left by the local
-- clock, or a renewal says so now. Monotonic time runs on while the process is stopped, so a
-- paused-then-resumed provisioner asks the Management API before it submits or cancels anything.
---@return boolean|nil held, table|nil err {code = "lease_lost"|the API client's codes, message}
function M:_fresh()
  if not self.lease then return nil, { code = "lease_lost", message = "no lease" } end
  if loop.monotonic() < self.lease.deadline - self.lease_ttl / 2 then return true end
  local held, err = self:_hold()
  if held then return true end
  if held == false then
    return nil, { code = "lease_lost", message = ("the lease is now held by %s on %s (pid %s): nothing more is done")
      :format(tostring(err.holder), tostring(err.host), tostring(err.pid)) }
  end
  return nil, err
end

-- The server refused something because the lease is gone: forget it (logged once).
function M:_lost(err)
  if self.lease then
    log.warn("lease_lost", { generation = self.lease.generation, message = err and err.message or nil })
  end
  self.lease = nil
  self:_changed("lease", "lost")
end

-- The policy error to report: the first broken override (by name) as {file, line, message, since},
-- or cjson.null; logged once per change.
function M:_policy_error()
  if not self.policy then return nil end
  self.policy.reload()
  local errs = self.policy.errors()
  local names = {}
  for name in pairs(errs or {}) do names[#names + 1] = name end
  table.sort(names)
  local e = names[1] and errs[names[1]]
  if not e then
    if self:_changed("policy", "ok") and self.said.policy_seen then log.info("policy_ok", {}) end
    self.said.policy_seen = true
    return cjson.null
  end
  local msg = type(e) == "table" and tostring(e.message) or tostring(e)
  local file = type(e) == "table" and e.path or nil
  local line = file and tonumber(msg:match(":(%d+):")) or nil
  local pe = { file = file or names[1], line = line and math.tointeger(line) or nil, message = msg,
    since = type(e) == "table" and e.at or loop.now() }
  self.said.policy_seen = true
  if self:_changed("policy", msg) then
    log.warn("policy_error", { file = pe.file, line = pe.line, message = msg,
      note = "the previous version of this policy stays in use" })
  end
  return pe
end

function M:_connection(settings)
  if not settings or not (settings.url or settings.socket) then
    return nil, { code = "not_configured", message = "no Slurm connection is saved: set it up as the Slurm "
      .. "connection on Deployments (Set up Slurm on the Slurm card)" }
  end
  -- the token: the saved one, or this host's renewed one (obleth.slurm.token_source)
  local token, terr = self.tokens:token(settings)
  if not token and (settings.token_source or "static") ~= "static" then
    return nil, { code = "auth", message = "Slurm JWT: " .. terr.message }
  end
  local key = table.concat({ tostring(settings.url), tostring(settings.socket), tostring(settings.user),
    tostring(settings.api_version), tostring(settings.verify), tostring(settings.ca_file), tostring(token == nil) }, "\0")
  if self.conn and self.conn_key == key then
    if token ~= self.conn_token then
      self.conn:set_token(token)
      self.conn_token = token
    end
    return self.conn
  end
  local conn, err = slurm.connect { url = settings.url, socket = settings.socket, user = settings.user,
    token = token, version = settings.api_version or "auto", verify = settings.verify ~= false,
    ca_file = settings.ca_file, timeout = 15 }
  if not conn then return nil, err end
  log.info("slurm_connected", { version = conn:version(), url = settings.url or settings.socket })
  self.conn, self.conn_key, self.conn_token = conn, key, token
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

--- Checks in flight at once unless told otherwise (OBLETH_HEALTH_CONCURRENCY).
M.CHECK_CONCURRENCY = 64

--- Health-check the due replicas concurrently, at most `limit` in flight at once: a few tasks
--- take the next due check as each finishes, so a pass with 10,000 due checks never opens 10,000
--- sockets at once (past the process's file limit, or the listen backlog of an engine that serves
--- many replicas, the prober itself would fail checks). A check's timeout counts from its own
--- start, not from the pass's. Connections are reused: every check goes through the one libcurl
--- multi handle of obleth.http, whose cache keeps a kept-alive connection to an endpoint for the
--- next check of the same endpoint (a later pass too, while the engine keeps it open).
---@param due {row: table, url: string, timeout: number}[] plan.due_checks' list
---@param limit integer|nil checks in flight at most (default M.CHECK_CONCURRENCY)
---@return table<string, {ok: boolean, status: integer|nil, error: string|nil}> results by row.nonce
function M.check_all(due, limit)
  local results, n = {}, #due
  if n == 0 then return results end
  local workers = math.max(1, math.min(n, math.tointeger(limit) or M.CHECK_CONCURRENCY))
  local next_i, running = 1, workers
  local done = loop.notifier()
  for _ = 1, workers do
    loop.spawn(function()
      while next_i <= n do
        local d = due[next_i]
        next_i = next_i + 1
        local okc, r, err = pcall(http.request, { url = d.url, timeout = d.timeout,
          connect_timeout = math.min(d.timeout, 3) })
        if not okc then
          results[d.row.nonce] = { ok = false, error = tostring(r) }
        elseif r then
          results[d.row.nonce] = { ok = r.status >= 200 and r.status < 300, status = r.status,
            error = (r.status < 200 or r.status >= 300) and ("HTTP " .. r.status) or nil }
        else
          results[d.row.nonce] = { ok = false, error = err.message }
        end
      end
      running = running - 1
      if running == 0 then done:notify() end
    end)
  end
  done:wait()
  return results
end

--- Which raw records of Slurm's job listing a pass normalizes: those named with this installation's
--- tag prefix (`obleth-<instance>-`), and any job a stored replica records (whatever its name now);
--- a record whose name is not a plain string is kept too. Every other job of the cluster is never
--- touched by the plan (docs/managed-spec.md, "Job tag"), so it costs a name comparison, not a
--- normalization. nil (keep all) without a well-formed instance: the pass then stops with no_instance.
---@param snap table the Management API snapshot
---@return (fun(raw: table): boolean, boolean)|nil keep, (fun(text: string): boolean)|nil prefilter the
---  same question of the job's JSON text (false only where keep is false), for obleth.slurm's cached
---  listing; keep's second value is true when its answer depends on the job's text alone
function M.own_jobs(snap)
  if not (type(snap.instance) == "string" and snap.instance:match("^%x%x%x%x%x%x%x%x$")) then return nil end
  local prefix = "obleth-" .. snap.instance .. "-"
  local n = #prefix
  local recorded = {}
  for _, m in ipairs(snap.models or {}) do
    for _, r in ipairs(m.replicas or {}) do
      if type(r.job_id) == "number" then recorded[r.job_id] = true end
    end
  end
  local count = require("obleth.slurm.normalize").count
  local function keep(j)
    local name = j.name
    -- the second value: the answer holds for this job whatever the store records (by its name)
    if type(name) ~= "string" or name:sub(1, n) == prefix then return true, true end
    local ok, id = pcall(count, j.job_id)
    return ok and id ~= nil and recorded[id] == true
  end
  -- the same question of a job's JSON text, without decoding it: false only where keep says false
  local fields = require("obleth.jsonscan").fields
  local any = next(recorded) ~= nil
  local function prefilter(text)
    local ok, name, id = fields(text, "name", "job_id")
    if not ok or type(name) ~= "string" or name:sub(1, n) == prefix then return true end
    if not any then return false end
    if math.type(id) ~= "integer" then return true end -- another form: decoded, keep tells
    return recorded[id] == true
  end
  return keep, prefilter
end

--- The rest of the live facts a pass decides from, besides the snapshot and
--- the one job listing: for each recorded job the listing no longer shows,
--- one accounting lookup (conn:job). Reads only. A job Slurm says it does not know is left out
--- (the plan ends its replica as UNKNOWN); a lookup that failed (slurmrestd, slurmctld or
--- slurmdbd not answering) is an error: a failed poll must not end a replica.
---@param conn table an obleth.slurm connection
---@param snap table the Management API snapshot
---@param jobs table[] conn:jobs()
---@return table|nil job_by_id job id → job, or nil when the snapshot has no installation id or a
---  lookup failed
---@return table|nil err {code = "no_instance" | the lookup's code, message}: why nothing may be decided
---  (nothing is submitted or cancelled then)
function M.lookup_jobs(conn, snap, jobs)
  if not (type(snap.instance) == "string" and snap.instance:match("^%x%x%x%x%x%x%x%x$")) then
    return nil, { code = "no_instance",
      message = "the Management API gave no installation id (snapshot.instance): nothing is submitted or cancelled" }
  end
  local listed = {}
  for _, j in ipairs(jobs) do listed[j.id] = true end
  local job_by_id = {}
  for _, m in ipairs(snap.models or {}) do
    for _, r in ipairs(m.replicas or {}) do
      if r.job_id and not listed[r.job_id] and r.state ~= "lost" then
        local j, jerr = conn:job(r.job_id)
        if j then
          job_by_id[r.job_id] = j
        elseif jerr.code ~= "refused" then
          return nil, { code = jerr.code, message = ("looking up job %d: %s"):format(r.job_id, tostring(jerr.message)) }
        end
      end
    end
  end
  return job_by_id
end

--- The lost, rollover and scale rules a pass applies: the policy set's current
--- versions (reloaded first: edits in the override directory apply on the
--- next pass; a broken edit keeps the previous version), or the built-in
--- ones without a set.
---@param policy table|nil an obleth.policy set
---@return function|nil lost, function|nil rollover (nil: plan's built-in rule)
---@return string|nil err "policy (previous version kept): NAME: message; ..." when a file failed
---@return function|nil scale the scale policy's decide (nil: plan's built-in rule)
---@return integer window ends per slot the lost rule reads (the snapshot is asked for that many)
function M.rules(policy)
  if not policy then return nil, nil, nil, nil, require("obleth.policy.lost").window() end
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
  local lost = policy.get("lost")
  return lost.check, policy.get("rollover").plan, perr, policy.get("scale").decide, lost.window()
end

-- The job listing and the lookups of the jobs it no longer shows; nil and why when Slurm could not
-- be read (slurm_down: slurmrestd or slurmctld does not answer, passes back off).
---@return table[]|nil jobs, table|nil job_by_id, string|nil pass_error, boolean|nil slurm_down
function M:_read_jobs(conn, cerr, snap)
  if not conn then
    if not next(snap.models or {}) then return nil end
    return nil, nil, cerr.message, cerr.code == "unreachable" or cerr.code == "timeout"
  end
  -- an unchanged job is not decoded again (its text is in the cache: docs/performance.md)
  local keep, prefilter = M.own_jobs(snap)
  self.job_cache = self.job_cache or {}
  local jobs, jerr = conn:jobs { keep = keep, prefilter = prefilter, cache = self.job_cache }
  if not jobs then
    local pass_error = "listing jobs: " .. tostring(jerr.message)
    local slurm_down = jerr.code == "unreachable" or jerr.code == "timeout"
    if not slurm_down and (jerr.http_status or 0) >= 500 then
      -- slurmrestd answered for slurmctld with a 5xx: slurmctld is stopped or restarting, unless
      -- it rejected the JWT, which Slurm 22.05 words the same way ("Unspecified error"); slurmdbd
      -- accepting the same token tells the two apart
      if jerr.code ~= "auth" then
        slurm_down = true
      elseif conn:clusters() then
        slurm_down = true
        pass_error = ("listing jobs: slurmctld does not answer (slurmrestd: HTTP %d; slurmdbd accepts the token)")
          :format(jerr.http_status)
      end
    end
    return nil, nil, pass_error, slurm_down
  end
  local job_by_id, ierr = M.lookup_jobs(conn, snap, jobs)
  if not job_by_id then return nil, nil, ierr.message, false end
  return jobs, job_by_id
end

-- Log slurmrestd going away and coming back, once per change.
function M:_say_slurm(settings, slurm_down, pass_error)
  local at = settings.url or settings.socket
  if not slurm_down and self:_changed("slurm", "up") and self.slurm_down_since then
    log.info("slurm_reachable", { url = at, down_for = math.floor(loop.monotonic() - self.slurm_down_since) })
    self.slurm_down_since = nil
  elseif slurm_down and self:_changed("slurm", "down") then
    self.slurm_down_since = loop.monotonic()
    log.warn("slurm_unreachable", { url = at, error = pass_error,
      note = "passes back off until slurmrestd and slurmctld answer; replicas are left as they are" })
  end
end

-- Fencing: the replicas about to be submitted are recorded first, under the lease; a stale lease is
-- refused there, and a lease this process may have lost (it was paused) stops the pass here.
-- Returns true, or nil, err (the pass stops), or false, message (nothing is submitted this pass).
function M:_record(submits)
  if #submits == 0 then return true end
  local rows = {}
  for i, s in ipairs(submits) do rows[i] = serialize(s.row) end
  local fresh, ferr = self:_fresh()
  if not fresh then return nil, ferr end
  local t1 = loop.monotonic()
  chaos.at("before_record")
  local rec, rerr = self.api:submits(self.lease.generation, rows)
  if rec then
    self.lease.deadline = t1 + self.lease_ttl
    chaos.at("after_record")
    return true
  elseif rerr.code == "lease_lost" then
    self:_lost(rerr)
    return nil, { code = "lease_lost", message = rerr.message }
  end
  return false, "recording submits: " .. tostring(rerr.message)
end

-- Send the cancels (each under a lease known to be held). A cancel Slurm refused (another user's
-- job, a job it does not know: HTTP 200 with a per-job error on 26.05) is a failed one: the row
-- stays ending with its job live, and the next pass sends it again. nil, err when the lease is gone.
function M:_cancel(conn, cancels)
  for _, c in ipairs(cancels) do
    local fresh, ferr = self:_fresh()
    if not fresh then return nil, ferr end
    chaos.at("before_cancel")
    local ok, e = conn:cancel(c.job_id)
    if ok then chaos.at("after_cancel") end
    local say = ok and log.info or log.warn
    say("job_cancel", { job_id = c.job_id, why = c.why, ok = ok and true or false,
      error = e and e.message or nil, slurm_code = e and e.slurm_code or nil })
    if c.row then c.row.cancel_sent = true end
  end
  return true
end

-- Submit the decided replicas. A refused submit ends its row and is kept on the spec
-- (report.provision_errors); transport trouble leaves the row pending for the next pass.
---@return true|nil ok, table|string|nil err_or_pass_error (a table: the lease is gone, the pass stops)
function M:_submit(conn, submits, snap, report)
  local defaults, pass_error = (snap.settings or {}).defaults or {}, nil
  if #submits > 0 then chaos.at("before_submits", { generation = self.lease.generation }) end
  for _, s in ipairs(submits) do
    local fresh, ferr = self:_fresh()
    if not fresh then return nil, ferr end
    s.model.instance = snap.instance
    local desc = jobscript.desc(s.model, s.row, s.spec, defaults, bindir(), sys.paths.exe)
    if self.log_report then -- the job's last words: where to send them and its own token for it
      desc.environment.OBLETH_LOG_URL = self.log_report.url .. "/api/v1/replica-logs/" .. s.row.nonce
      desc.environment.OBLETH_LOG_TOKEN = jobscript.log_token(self.log_report.key, s.row.nonce)
    end
    chaos.at("before_submit")
    local id, res = conn:submit(desc)
    if id then
      s.row.job_id, s.row.state, s.row.submitted_at = id, "submitted", loop.now()
      if res and #res > 0 then s.row.problem = "Slurm: " .. tostring(res[1].message) end
      log.info("job_submit", { model = s.model.name, slot = s.row.slot, job_id = id, nonce = s.row.nonce,
        port = s.row.port })
      chaos.at("after_submit", { job_id = id })
    elseif res.code == "refused" or res.code == "unsupported" then
      s.row.state, s.row.ended_at = "ended", loop.now()
      s.row["end"] = { state = "REFUSED", reason = res.message }
      report.provision_errors[tostring(s.model.id)] = { message = res.message, field = res.field,
        code = res.code, slurm_code = res.slurm_code, generation = s.spec.generation, at = loop.now() }
      log.warn("job_refused", { model = s.model.name, field = res.field, code = res.code, slurm_code = res.slurm_code,
        message = res.message })
    else
      s.row.state = "pending"
      pass_error = "submit: " .. tostring(res.message)
    end
  end
  return true, pass_error
end

-- The endpoint of each replica that started: its node's address and its port.
function M:_endpoints(conn, state, now)
  for _, mm in ipairs(state.models) do
    for _, row in ipairs(mm.rows) do
      if row.node and row.port and not row.endpoint and (row.state == "starting" or row.state == "healthy") then
        row.endpoint = ("http://%s:%d"):format(self:_address(conn, row.node, now), row.port)
        row._touched = true
      end
    end
  end
end

-- The rows that changed go into the report; what only this process knows of a live row (drain
-- deadlines, sent cancels) is kept for the next pass, and forgotten once the row ends.
function M:_remember(state, baseline, report)
  for _, row in ipairs(state.rows) do
    if plan.changed(baseline[row.nonce], row) then report.replicas[#report.replicas + 1] = serialize(row) end
    if row.state == "ended" or row.state == "lost" then
      self.memory[row.nonce] = nil
      self.last_checked[row.nonce] = nil
    else
      self.memory[row.nonce] = { cancel_at = row.cancel_at, cancel_sent = row.cancel_sent,
        unhealthy_since = row.unhealthy_since, cancel_why = row.cancel_why }
    end
  end
end

--- One pass. Returns the report it sent (or would have sent), or nil, err. err.code "lease_held"
--- (another provisioner holds the lease: nothing was done), "lease_lost" (refused as stale),
--- "slurm" (slurmrestd could not be reached), "pass" (the pass ran with an error), or the
--- Management API client's codes (err.status set when the API answered with an HTTP error).
function M:pass()
  local t0, started = loop.monotonic(), loop.now()
  chaos.at("pass_start")
  local held, herr = self:_hold()
  if held == false then
    return nil, { code = "lease_held", lease = herr, message = ("the provisioner lease is held by %s on %s (pid %s)")
      :format(tostring(herr.holder), tostring(herr.host), tostring(herr.pid)) }
  elseif not held then
    return nil, herr
  end
  chaos.at("after_lease")
  -- the lost rule decides how many of each slot's ends it reads: the snapshot carries that many
  -- (a broken policy edit keeps the previous version and is reported as pass.policy_error, not as
  -- a failed pass)
  local lost_rule, rollover_rule, _, scale_rule, window = M.rules(self.policy)
  local snap, err = self.api:snapshot { ends = window }
  if not snap then return nil, err end
  local settings = snap.settings or {}
  if type(settings.token) == "string" then log.add_secret(settings.token) end
  if settings.defaults and type(settings.defaults.hf_token) == "string" then log.add_secret(settings.defaults.hf_token) end
  local now = loop.now()

  -- what the snapshot says of each replica: the report carries only the rows that change from it
  local baseline = plan.baseline(snap)
  -- carry what only this process remembers (drain deadlines, sent cancels), into copies of the rows:
  -- the snapshot's models are the client's held ones, read-only
  for i, m in ipairs(snap.models or {}) do
    local mine
    for j, r in ipairs(m.replicas or {}) do
      local mem = self.memory[r.nonce]
      if mem and next(mem) then
        if not mine then
          mine = tables.copy(m)
          mine.replicas = table.move(m.replicas, 1, #m.replicas, 1, {})
          snap.models[i] = mine
        end
        local row = tables.copy(r)
        for k, v in pairs(mem) do if row[k] == nil then row[k] = v end end
        mine.replicas[j] = row
      end
    end
  end

  local report = { pass = { started_at = started, policy_error = self:_policy_error() }, replicas = {},
    outcomes = {}, endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} },
    lease_generation = self.lease.generation }
  local conn, cerr = self:_connection(settings)
  local jobs, job_by_id, pass_error, slurm_down = self:_read_jobs(conn, cerr, snap)
  if conn or slurm_down then self:_say_slurm(settings, slurm_down, pass_error) end
  report.pass.token = self.tokens:status(settings)
  chaos.at("after_snapshot")

  if jobs then
    -- decide (pure), then do what was decided: record, cancel, submit, check, report
    local state = plan.reconcile { now = now, snapshot = snap, jobs = jobs, job_by_id = job_by_id,
      nonce = function() return sys.random_hex(8) end,
      rand = function(lo, hi) return math.random(lo, hi) end,
      lost = lost_rule, rollover = rollover_rule, scale = scale_rule, drain_seconds = self.drain_seconds }
    local ok, e = self:_record(state.submits)
    if ok == nil then return nil, e end
    if ok == false then pass_error, state.submits = e, {} end
    ok, e = self:_cancel(conn, state.cancels)
    if not ok then return nil, e end
    ok, e = self:_submit(conn, state.submits, snap, report)
    if not ok then return nil, e end
    pass_error = e or pass_error
    self:_endpoints(conn, state, now)

    local results = M.check_all(plan.due_checks(state, self.last_checked, loop.now()), self.check_concurrency)
    for nonce in pairs(results) do self.last_checked[nonce] = loop.now() end
    local endpoints, restarts = plan.health(state, results, loop.now())
    ok, e = self:_cancel(conn, restarts)
    if not ok then return nil, e end

    report.endpoints = plan.changed_endpoints(snap, endpoints)
    report.outcomes, report.acknowledged = state.outcomes, state.ack
    self:_remember(state, baseline, report)
    for _, a in ipairs(state.adopted) do
      log.info("job_adopted", { job_id = a.job_id, nonce = a.nonce, model_id = a.model_id })
    end
  end

  report.pass.duration = loop.monotonic() - t0
  report.pass.error = pass_error
  chaos.at("before_report")
  local ok, rerr = self.api:report(report)
  if not ok then
    if rerr.code == "lease_lost" then
      self:_lost(rerr)
      return nil, { code = "lease_lost", message = rerr.message }
    end
    return nil, rerr
  end
  chaos.at("after_report")
  if pass_error then return nil, { code = slurm_down and "slurm" or "pass", message = pass_error }, report end
  return report
end

--- Between passes: collect what the pass left (its decoded job listing is most of it) and give the
--- freed heap back to the system, so the process's resident memory between passes is what it keeps
--- (the held snapshot, the caches), not the pass's peak (docs/performance.md).
function M.tidy()
  collectgarbage("collect")
  sys.trim_memory()
end

--- Whether the daemon's loop is alive: between passes, or in a pass that started less than
--- `max_pass` seconds ago (default 900). The watchdog is fed only then.
function M:alive(max_pass)
  return not self.in_pass or loop.monotonic() - (self.pass_started or 0) < (max_pass or 900)
end

--- Feed the systemd watchdog from a timer while the loop is alive, also while passes fail:
--- every third of WATCHDOG_USEC when systemd set it for this process. Returns the period or nil.
function M:watchdog()
  local usec = tonumber(os.getenv("WATCHDOG_USEC") or "")
  local wpid = tonumber(os.getenv("WATCHDOG_PID") or "")
  if not usec or usec <= 0 or (wpid and wpid ~= sys.getpid()) then return nil end
  local period = usec / 1e6 / 3
  sys.sd_notify("WATCHDOG=1")
  self.watchdog_timer = loop.every(period, function()
    if self:alive() then sys.sd_notify("WATCHDOG=1") end
  end)
  return period
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
  local wd = self:watchdog()
  log.info("provisioner_start", { api = self.api.base, interval = self.interval, holder = self.identity.holder,
    host = self.identity.host, pid = self.identity.pid, lease_ttl = self.lease_ttl, watchdog = wd })
  local backoff = self.interval
  while not self.stopping do
    self.in_pass, self.pass_started = true, loop.monotonic()
    local ok, err = self:pass()
    self.in_pass = false
    M.tidy()
    local wait = self.interval
    if ok then
      backoff = self.interval
      if self.failures > 0 then log.info("pass_ok", { after_failures = self.failures }) end
      self.failures = 0
      self:_changed("pass", "ok")
    elseif err.code == "lease_held" or err.code == "lease_lost" then
      -- waiting for the lease is no failure: try again each interval (it expires a few intervals ahead)
      backoff = self.interval
    else
      self.failures = self.failures + 1
      local code = err.code
      if code == "unreachable" or code == "timeout" or code == "slurm" or err.status then
        -- slurmrestd or the Management API is down: back off, capped
        backoff = math.min(self.backoff_max, math.max(self.interval, backoff * 2))
        wait = backoff
      end
      -- once per change of state, not once per pass (an outage of slurmrestd is logged as such; the
      -- Management API not answering is one state, whatever each try's message says)
      local state = (code == "unreachable" or code == "timeout") and code
        or tostring(code) .. ":" .. tostring(err.message)
      if self:_changed("pass", state) and code ~= "slurm" then
        log.warn("pass_failed", { error = err.message or tostring(err), code = code, failures = self.failures,
          next_in = math.floor(wait * 10 + 0.5) / 10 })
      end
    end
    wait = wait * (1 + self.jitter * (2 * math.random() - 1))
    local t_end = loop.monotonic() + wait
    local woken = self:_wait_for_wake(ok, t_end)
    while not self.stopping and not woken.yes and loop.monotonic() < t_end do loop.sleep(0.1) end
  end
  if self.lease then
    local ok, err = self.api:release(self.lease.generation)
    log.info("lease_released", { generation = self.lease.generation, ok = ok and true or false,
      error = err and err.message or nil })
    self.lease = nil
  end
  if self.watchdog_timer then self.watchdog_timer:cancel() end
  log.info("provisioner_stop", {})
  return 0
end

-- After a pass that went through, wait on GET /api/v1/provisioner/wait in a task: a request to an
-- autoscaled model with no replica (the router's wake) ends the wait, so the next pass submits at
-- once. Returns a flag table whose `yes` the task sets. An API without the route (an older obleth
-- serve) or an error leaves the plain interval. The counter seen last is kept, so a wake that came
-- during a pass ends the next wait at once.
function M:_wait_for_wake(pass_ok, t_end)
  local flag = {}
  if not pass_ok or type(self.api.wait) ~= "function" then return flag end
  loop.spawn(function()
    while not self.stopping do
      local left = t_end - loop.monotonic()
      if left <= 0.05 then return end
      local res = self.api:wait(self.wake_seq, left)
      if type(res) ~= "table" or math.type(res.seq) ~= "integer" then return end
      local known = self.wake_seq ~= nil
      self.wake_seq = res.seq
      if res.woken == true and known then flag.yes = true return end
    end
  end)
  return flag
end

M.tag = tag
return M
