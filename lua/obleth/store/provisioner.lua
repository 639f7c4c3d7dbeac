--- obleth.store.provisioner — the provisioner: its status, lease, submits, snapshot and reports: methods of
-- the store object (obleth.store.base), in the SQL every backend speaks (obleth.store.sqlite,
-- obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _dec, _sqlv, LIVE_SQL = util.NULL, util.abort, util.dec, util.sqlv, util.LIVE_SQL

--- {checked_in_at, last_pass_started_at, last_pass_duration, failed_passes, last_error, last_error_at, passes,
---  policy_error = {file, line, message, since}|null, lease = {holder, host, pid, generation, acquired_at,
---  expires_at}|null, token = {source, expires_at, renewed_at, error}|null (the provisioner's Slurm JWT)}
function Store:provisioner_status()
  local r = self:_one("SELECT * FROM provisioner_status WHERE id = 1") or {}
  local function n(v) if v == nil then return NULL end return v end
  local l = self:lease()
  return {
    checked_in_at = n(r.checked_in_at), last_pass_started_at = n(r.last_pass_started_at),
    last_pass_duration = n(r.last_pass_duration), failed_passes = r.failed_passes or 0,
    last_error = n(r.last_error), last_error_at = n(r.last_error_at), passes = r.passes or 0,
    policy_error = r.policy_error and _dec(r.policy_error) or NULL,
    token = r.token_status and _dec(r.token_status) or NULL,
    lease = l and { holder = l.holder, host = l.host, pid = l.pid, generation = l.generation,
      acquired_at = l.acquired_at, expires_at = l.expires_at } or NULL,
  }
end

---------------------------------------------------------------------------
-- the provisioner lease: one provisioner at a time, fenced by generation
---------------------------------------------------------------------------

--- The lease row {holder, host, pid, generation, ttl, acquired_at, renewed_at, expires_at}, or nil
--- when no provisioner ever held it. An expired lease keeps its row: the generation only grows.
function Store:lease()
  return self:_one("SELECT * FROM provisioner_lease WHERE id = 1")
end

-- True when `proof` (the SHA-256 hex of the token a caller presents) is the lease holder's.
local function _proves(l, proof)
  return l ~= nil and type(l.token_hash) == "string" and type(proof) == "string" and proof == l.token_hash
end

-- Inside a transaction: refuse (abort "lease_lost") unless `generation` is the current one and
-- `proof` (SHA-256 hex of the caller's lease token) is its holder's; with `live`, the lease must
-- also not have expired. Renews the expiry by the lease's ttl.
function Store:_fence(generation, proof, now, live)
  local l = self:lease()
  if not l or l.generation ~= generation or not _proves(l, proof) or (live and l.expires_at <= now) then
    local msg
    if not l then
      msg = "no provisioner holds the lease"
    elseif l.generation ~= generation then
      msg = ("lease generation %d is stale: %s on %s (pid %d) holds generation %d"):format(generation,
        l.holder, l.host, l.pid, l.generation)
    elseif not _proves(l, proof) then
      msg = ("lease generation %d is held by %s on %s (pid %d), and this request does not carry its lease "
        .. "token"):format(generation, l.holder, l.host, l.pid)
    else
      msg = ("lease generation %d expired at %.0f"):format(generation, l.expires_at)
    end
    _abort("lease_lost", msg, "lease_generation", { lease = l })
  end
  self:_x("UPDATE provisioner_lease SET renewed_at = ?, expires_at = ? WHERE id = 1", now, now + l.ttl)
end

--- Acquire or renew the provisioner lease.
--- Granted when nobody holds it (never held, expired or released), or when `generation` is the current
--- one (a renewal, also after expiry as long as nobody took over). A new holder gets generation + 1.
--- A renewal must prove it is the holder's: `proof` is the SHA-256 hex of the token the holder got
--- when it acquired the lease; the generation alone (public: GET settings, the 409 body) renews nothing.
---@param req {holder: string, host: string, pid: integer, ttl: number, generation: integer|nil,
---  proof: string|nil, token_hash: string} token_hash: the hash of the new token, kept when this acquires
---@param now number epoch seconds
---@return table|nil {lease = row, acquired = boolean, previous = row|nil}
---@return table|nil err {code = "lease_held", message, lease = row} | {code = "storage"}
function Store:acquire_lease(req, now)
  return self:transaction(function()
    local cur = self:lease()
    if cur and req.generation == cur.generation and _proves(cur, req.proof) then
      self:_x([[UPDATE provisioner_lease SET ttl = ?, renewed_at = ?, expires_at = ? WHERE id = 1]],
        req.ttl, now, now + req.ttl)
      return { lease = self:lease(), acquired = false }
    end
    if cur and cur.expires_at > now then
      _abort("lease_held", ("the provisioner lease is held by %s on %s (pid %d) until %.0f"):format(cur.holder,
        cur.host, cur.pid, cur.expires_at), nil, { lease = cur })
    end
    if type(req.token_hash) ~= "string" or #req.token_hash ~= 64 then
      error("acquire_lease: req.token_hash must be the SHA-256 hex of the new lease token", 2)
    end
    self:_x([[INSERT INTO provisioner_lease (id, holder, host, pid, generation, ttl, acquired_at,
      renewed_at, expires_at, token_hash) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, host = excluded.host, pid = excluded.pid,
      generation = excluded.generation, ttl = excluded.ttl, acquired_at = excluded.acquired_at,
      renewed_at = excluded.renewed_at, expires_at = excluded.expires_at, token_hash = excluded.token_hash]],
      req.holder, req.host, req.pid, (cur and cur.generation or 0) + 1, req.ttl, now, now, now + req.ttl, req.token_hash)
    return { lease = self:lease(), acquired = true, previous = cur }
  end)
end

--- Give the lease up (a clean stop), so a waiting provisioner takes over on its next try.
---@param proof string|nil SHA-256 hex of the holder's lease token
---@return boolean released false when `generation` is not the current one or `proof` not its holder's
function Store:release_lease(generation, proof, now)
  return self:transaction(function()
    if not _proves(self:lease(), proof) then return false end
    local changes = self:_x("UPDATE provisioner_lease SET expires_at = ?, renewed_at = ? WHERE id = 1"
      .. " AND generation = ?"
      .. " AND expires_at > ?", now, now, generation, now)
    return changes > 0
  end)
end

--- Record replicas about to be submitted (state `pending`, nonce fixed), before the provisioner asks Slurm:
--- refused ("lease_lost") unless `generation` holds a live lease, so a provisioner that lost its
--- lease (paused, then resumed) submits nothing. Renews the lease.
---@param generation integer
---@param rows table[] replica rows {nonce, model_id, slot, state = "pending", port, generation, ...}
---@param now number epoch seconds
---@param proof string|nil SHA-256 hex of the holder's lease token
---@return table|nil {ok = true, ignored = [...]}, table|nil err
function Store:record_submits(generation, rows, now, proof)
  return self:transaction(function()
    self:_fence(generation, proof, now, true)
    local ignored = json.array()
    for _, r in ipairs(rows) do self:_upsert_replica(r, now, ignored) end
    return { ok = true, ignored = ignored }
  end)
end

---------------------------------------------------------------------------
-- provisioner protocol
---------------------------------------------------------------------------

--- Everything one provisioner pass needs (see docs/managed-spec.md). Secrets in clear.
---@param now number epoch seconds
--- The installation id: 8 hex characters created with the store.
---@return string
function Store:instance()
  local r = self:_one("SELECT instance FROM installation WHERE id = 1")
  return r and r.instance
end

--- The ids of the models that have replicas (any state), in order: GET /api/v1/replicas lists them
--- model by model.
---@return integer[]
function Store:replica_model_ids()
  local out = {}
  for _, r in ipairs(self:_q("SELECT DISTINCT model_id FROM replicas ORDER BY model_id")) do out[#out + 1] = r.model_id end
  return out
end

--- The models a provisioner snapshot lists, in id order: every model with a managed spec, and every
--- model with live replicas whose spec was deleted (docs/managed-spec.md).
--- With `since` (a snapshot version, Store:snapshot_version()), only those changed after it.
---@param since integer|nil
---@return table[] model rows
function Store:snapshot_models(since)
  local sql = [[SELECT m.* FROM models m WHERE
      (EXISTS (SELECT 1 FROM managed_specs s WHERE s.model_id = m.id)
      OR EXISTS (SELECT 1 FROM replicas r WHERE r.model_id = m.id AND r.state IN ]] .. LIVE_SQL .. [[))]]
  if since then
    return self:_q(sql .. [[ AND m.id IN (SELECT model_id FROM model_versions WHERE version > ?) ORDER BY m.id]], since)
  end
  return self:_q(sql .. " ORDER BY m.id")
end

--- The snapshot version: a counter every write to a model's snapshot entry bumps (the backend's
--- migration 11: triggers). Read it before the entries, so a write made while they are read is sent
--- again next time.
---@return integer
function Store:snapshot_version()
  return self:_one("SELECT version FROM sync_version WHERE id = 1").version
end

--- The ids of the models whose snapshot entry changed after version `since`, listed or not (a
--- deleted model, one whose spec was deleted and whose last replica ended), in id order.
---@param since integer
---@return integer[]
function Store:snapshot_changed(since)
  local out = {}
  for _, r in ipairs(self:_q("SELECT model_id FROM model_versions WHERE version > ? ORDER BY model_id", since)) do
    out[#out + 1] = r.model_id
  end
  return out
end

--- Ends per slot a snapshot carries unless asked for another number (the lost rule's built-in window).
Store.SNAPSHOT_ENDS = 10

--- One model's entry in the provisioner snapshot: {id, name, status, spec, replicas, recent_ends, endpoints}.
--- recent_ends: each slot's last `ends` job outcomes (newest first), every one of them: which count is
--- the lost policy's decision (obleth.policy.lost), so each carries its exit code and cancel_why.
---@param m table a row of Store:snapshot_models()
---@param ends integer|nil ends per slot (default Store.SNAPSHOT_ENDS)
function Store:snapshot_model(m, ends)
  local rows = json.array()
  for _, e in ipairs(self:_q([[SELECT slot, state, healthy, exit_code, cancel_why, coalesce(ended_at, recorded_at) AS at
      FROM (SELECT o.*, row_number() OVER (PARTITION BY slot ORDER BY id DESC) AS k
      FROM job_outcomes o WHERE model_id = ?) AS ranked WHERE k <= ? ORDER BY at DESC, slot]], m.id,
      math.tointeger(ends) or Store.SNAPSHOT_ENDS)) do
    rows[#rows + 1] = { slot = e.slot or NULL, state = e.state, healthy = e.healthy == 1, at = e.at,
      exit_code = e.exit_code, -- present when Slurm gave one
      cancel_why = e.cancel_why } -- present only when obleth cancelled the job
  end
  return {
    id = m.id, name = m.name, status = m.status,
    spec = self:get_spec(m.id) or NULL,
    replicas = self:list_replicas({ model_id = m.id, live = true }),
    recent_ends = rows,
    endpoints = self:_endpoints(m.id),
  }
end

--- The snapshot without its models: {now, instance, restart, clear_lost}.
function Store:snapshot_head(now)
  local restart, clear = json.array(), json.array()
  for _, r in ipairs(self:_q("SELECT id FROM replicas WHERE restart_requested = 1 ORDER BY id")) do
    restart[#restart + 1] = r.id
  end
  for _, r in ipairs(self:_q("SELECT model_id FROM clear_lost_requests ORDER BY model_id")) do
    clear[#clear + 1] = r.model_id
  end
  return { now = now, instance = self:instance(), restart = restart, clear_lost = clear }
end

--- The whole provisioner snapshot in one table (GET /api/v1/provisioner/snapshot streams the same
--- document in parts: obleth.api.provisioner).
---@param now number epoch seconds
---@param ends integer|nil ends per slot (Store:snapshot_model)
function Store:snapshot(now, ends)
  local models = json.array()
  for _, m in ipairs(self:snapshot_models()) do models[#models + 1] = self:snapshot_model(m, ends) end
  local doc = self:snapshot_head(now)
  doc.models = models
  return doc
end

--- Apply one pass's report in one transaction (see docs/managed-spec.md).
---@param rep table validated by obleth.deployment.input.report, plus lease_proof (SHA-256 hex of the
---  lease token the request carried) when it has lease_generation
---@param now number
---@return table|nil {ok = true, ignored = [...], changes = {replicas = {[model_id] = true}, models = ...,
---  managed = ..., launches = ...}} (what the report changed, for the event streams), table|nil err
function Store:apply_report(rep, now)
  return self:transaction(function()
    local ignored = json.array()
    local changes = { replicas = {}, models = {}, managed = {}, launches = {} }
    if rep.lease_generation then
      self:_fence(rep.lease_generation, rep.lease_proof, now, false)
    else
      -- a report without a lease (a script, a test) only while no provisioner holds it
      local l = self:lease()
      if l and l.expires_at > now then
        _abort("lease_lost", ("the provisioner lease is held by %s on %s (pid %d): a report must carry its "
          .. "lease_generation"):format(l.holder, l.host, l.pid), "lease_generation", { lease = l })
      end
    end
    if rep.more then
      -- a part of a report that follows in several (docs/managed-spec.md, "A report in parts"): its
      -- rows only, under the same fence; the check-in and the rest come with the last part. Each row
      -- is upserted by its nonce, so a part sent again changes nothing more.
      for _, r in ipairs(rep.replicas) do
        local mid, changed = self:_upsert_replica(r, now, ignored)
        if changed then changes.replicas[mid] = true end
      end
      return { ok = true, ignored = ignored, changes = changes, more = true }
    end
    local p = rep.pass
    local perr = p.error
    if perr == NULL then perr = nil end
    if p.token ~= nil then
      self:_x("UPDATE provisioner_status SET token_status = ? WHERE id = 1",
        p.token ~= NULL and json.encode(p.token) or nil)
    end
    if p.policy_error ~= nil then
      self:_x("UPDATE provisioner_status SET policy_error = ? WHERE id = 1",
        p.policy_error ~= NULL and json.encode(p.policy_error) or nil)
    end
    if perr then
      self:_x([[UPDATE provisioner_status SET checked_in_at = ?, last_pass_started_at = ?, last_pass_duration = ?,
        failed_passes = failed_passes + 1, last_error = ?, last_error_at = ?, passes = passes + 1 WHERE id = 1]],
        now, _sqlv(p.started_at), _sqlv(p.duration), perr, now)
    else
      self:_x([[UPDATE provisioner_status SET checked_in_at = ?, last_pass_started_at = ?, last_pass_duration = ?,
        failed_passes = 0, passes = passes + 1 WHERE id = 1]], now, _sqlv(p.started_at), _sqlv(p.duration))
    end
    for _, r in ipairs(rep.replicas) do
      local mid, changed = self:_upsert_replica(r, now, ignored)
      if changed then changes.replicas[mid] = true end
    end
    for _, o in ipairs(rep.outcomes) do
      if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", o.model_id) then
        ignored[#ignored + 1] = { outcome_job_id = _sqlv(o.job_id), model_id = o.model_id, reason = "no such model" }
      else
        local rep_row = o.nonce and o.nonce ~= NULL and
          self:_one("SELECT id, slot, launch_id, healthy_at FROM replicas WHERE nonce = ?", o.nonce) or nil
        local healthy = o.healthy
        if healthy == nil or healthy == NULL then healthy = rep_row ~= nil and rep_row.healthy_at ~= nil end
        local slot = _sqlv(o.slot) or (rep_row and rep_row.slot)
        local why = _sqlv(o.cancel_why)
        if why == nil and rep_row then why = rep_row.cancel_why end
        self:_x([[INSERT INTO job_outcomes (model_id, replica_id, launch_id, nonce, slot, job_id, state, reason,
            exit_code, signal, node, healthy, started_at, ended_at, recorded_at, cancel_why)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)]],
          o.model_id, rep_row and rep_row.id, rep_row and rep_row.launch_id, _sqlv(o.nonce), slot,
          _sqlv(o.job_id), o.state, _sqlv(o.reason), _sqlv(o.exit_code), _sqlv(o.signal), _sqlv(o.node),
          healthy and 1 or 0, _sqlv(o.started_at), _sqlv(o.ended_at), now, why)
        changes.launches[o.model_id] = true
      end
    end
    for id, urls in pairs(rep.endpoints) do
      if self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
        local before = self:_endpoints(id)
        if #before ~= #urls then changes.models[id] = true end
        for i, u in ipairs(urls) do if before[i] ~= u then changes.models[id] = true end end
        self:_set_endpoints(id, urls)
      else
        ignored[#ignored + 1] = { endpoints_model_id = id, reason = "no such model" }
      end
    end
    for id, pe in pairs(rep.provision_errors) do
      if self:_one("SELECT 1 AS x FROM managed_specs WHERE model_id = ?", id) then
        local text
        local old = self:_one("SELECT provision_error FROM managed_specs WHERE model_id = ?", id).provision_error
        if pe ~= NULL or old ~= nil then changes.managed[id] = true end
        if pe ~= NULL then
          local t = {}
          for k, v in pairs(pe) do t[k] = v end
          if t.at == nil or t.at == NULL then t.at = now end
          text = json.encode(t)
        end
        self:_x("UPDATE managed_specs SET provision_error = ? WHERE model_id = ?", text, id)
      else
        ignored[#ignored + 1] = { provision_error_model_id = id, reason = "no managed spec" }
      end
    end
    for _, id in ipairs(rep.acknowledged.restart) do
      self:_x("UPDATE replicas SET restart_requested = 0, updated_at = ? WHERE id = ?", now, id)
    end
    for _, id in ipairs(rep.acknowledged.clear_lost) do
      self:_x("DELETE FROM clear_lost_requests WHERE model_id = ?", id)
    end
    return { ok = true, ignored = ignored, changes = changes }
  end)
end
