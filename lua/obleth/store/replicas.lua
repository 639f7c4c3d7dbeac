--- obleth.store.replicas — replicas, their logs, restarts and "try once more": methods of the store object
-- (obleth.store.base), in the SQL every backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now, _dec, _sqlv, LIVE_SQL = util.NULL, util.abort, util.now, util.dec, util.sqlv, util.LIVE_SQL

---------------------------------------------------------------------------
-- replicas
---------------------------------------------------------------------------

local function _replica_out(r)
  if not r then return nil end
  local function n(v) if v == nil then return NULL end return v end
  local e = NULL
  if r.end_state or r.end_reason or r.end_exit_code or r.end_signal or r.end_node then
    e = { state = n(r.end_state), reason = n(r.end_reason), exit_code = n(r.end_exit_code),
      signal = n(r.end_signal), node = n(r.end_node) }
  end
  return {
    id = r.id, model_id = r.model_id, slot = r.slot, nonce = r.nonce, state = r.state,
    generation = n(r.generation), job_id = n(r.job_id), node = n(r.node), port = n(r.port),
    endpoint = n(r.endpoint), submitted_at = n(r.submitted_at), started_at = n(r.started_at),
    healthy_at = n(r.healthy_at), ended_at = n(r.ended_at), check_failures = r.check_failures,
    problem = n(r.problem), pending_reason = n(r.pending_reason), successor_of = n(r.successor_of),
    launch_id = n(r.launch_id), ["end"] = e, restart_requested = r.restart_requested == 1,
    cancel_why = n(r.cancel_why),
    slurm = r.slurm and _dec(r.slurm) or NULL, updated_at = r.updated_at,
  }
end

--- Replicas, newest first within a model; opts {model_id=, live=true (not ended)}.
function Store:list_replicas(opts)
  opts = opts or {}
  local where, args = {}, {}
  if opts.model_id then where[#where + 1] = "model_id = ?"; args[#args + 1] = opts.model_id end
  if opts.live then where[#where + 1] = "state <> 'ended'" end
  local sql = "SELECT * FROM replicas" .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "")
    .. " ORDER BY model_id, slot, id DESC"
  local out = json.array()
  for _, r in ipairs(self:_q(sql, table.unpack(args))) do out[#out + 1] = _replica_out(r) end
  return out
end

--- How many replicas of each model are in one of `states` and succeed no other replica (a rollover's
--- successor takes its predecessor's place), counted by the database: {[model_id] = n}, models with none
--- left out. For obleth.deployment.scaling, which owns the list of states.
---@param states string[] replica states (e.g. {"pending", "healthy"})
---@param first integer|nil only models with an id from `first` ...
---@param last integer|nil ... to `last` (both given or neither)
---@return table<integer, integer>
function Store:replica_counts(states, first, last)
  local marks = {}
  for i = 1, #states do marks[i] = "?" end
  local args = { table.unpack(states) }
  local range = ""
  if first then
    range = " AND model_id BETWEEN ? AND ?"
    args[#args + 1], args[#args + 2] = first, last
  end
  local out = {}
  for _, r in ipairs(self:_q("SELECT model_id, count(*) AS n FROM replicas WHERE successor_of IS NULL AND state IN ("
      .. table.concat(marks, ", ") .. ")" .. range .. " GROUP BY model_id", table.unpack(args))) do
    out[r.model_id] = r.n
  end
  return out
end

function Store:get_replica(id)
  return _replica_out(self:_one("SELECT * FROM replicas WHERE id = ?", id))
end

--- The replica with this nonce (the job's own name for it), or nil.
function Store:replica_by_nonce(nonce)
  return _replica_out(self:_one("SELECT * FROM replicas WHERE nonce = ?", nonce))
end

--- Keep the tail of one stream of a replica's job output, as the job reported it (replaces the last).
---@param replica_id integer
---@param stream "stdout"|"stderr"
---@param tail string the text (already bounded and redacted by the caller)
---@param path string|nil where the job wrote the whole stream
---@param exit_code integer|nil the engine's exit code, when the job said it
---@return true|nil ok, table|nil err
function Store:put_replica_log(replica_id, stream, tail, path, exit_code, now)
  return self:transaction(function()
    self:_x([[INSERT INTO replica_logs (replica_id, stream, tail, path, exit_code, reported_at) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT (replica_id, stream) DO UPDATE SET tail = excluded.tail, path = excluded.path,
      exit_code = excluded.exit_code, reported_at = excluded.reported_at]],
      replica_id, stream, tail, path, exit_code, math.floor(now or _now()))
    return true
  end)
end

--- What the job reported of its output: {stdout = {tail, path, exit_code, reported_at}|nil, stderr = ...}.
function Store:replica_logs(replica_id)
  local out = {}
  for _, r in ipairs(self:_q("SELECT * FROM replica_logs WHERE replica_id = ?", replica_id)) do
    out[r.stream] = { tail = r.tail, path = r.path, exit_code = r.exit_code, reported_at = r.reported_at }
  end
  return out
end

function Store:_live_count(model_id)
  if model_id then
    return self:_one("SELECT count(*) AS n FROM replicas WHERE model_id = ? AND state IN " .. LIVE_SQL, model_id).n
  end
  return self:_one("SELECT count(*) AS n FROM replicas WHERE state IN " .. LIVE_SQL).n
end

--- Replicas that still hold (or wait for) a Slurm job, over all models or one.
function Store:count_live_replicas(model_id)
  return self:_live_count(model_id)
end

--- Ask for a replica's job to be cancelled and replaced (listed in the snapshot's `restart`).
function Store:request_restart(id)
  local ok, err = self:transaction(function()
    local r = self:_one("SELECT state FROM replicas WHERE id = ?", id)
    if not r then _abort("not_found", ("replica %s does not exist"):format(id)) end
    if r.state == "ended" or r.state == "lost" then
      _abort("conflict", ("replica %s has %s; nothing to restart"):format(id, r.state), nil, { state = r.state })
    end
    self:_x("UPDATE replicas SET restart_requested = 1, updated_at = ? WHERE id = ?", _now(), id)
    return true
  end)
  if not ok then return nil, err end
  return self:get_replica(id)
end

--- "Try once more": the provisioner clears the model's lost replicas on its next pass.
---@return table|nil {model_id, lost}, table|nil err
function Store:request_clear_lost(model_id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", model_id) then
      _abort("not_found", ("model %s does not exist"):format(model_id))
    end
    local lost = self:_one("SELECT count(*) AS n FROM replicas WHERE model_id = ? AND state = 'lost'", model_id).n
    self:_x([[INSERT INTO clear_lost_requests (model_id, requested_at) VALUES (?, ?)
      ON CONFLICT (model_id) DO UPDATE SET requested_at = excluded.requested_at]], model_id, _now())
    return { model_id = model_id, lost = lost }
  end)
end

local REPLICA_COLS = { "state", "generation", "job_id", "node", "port", "endpoint", "submitted_at", "started_at",
  "healthy_at", "ended_at", "check_failures", "problem", "pending_reason", "successor_of", "launch_id",
  "restart_requested", "slot", "cancel_why" }
local END_COLS = { state = "end_state", reason = "end_reason", exit_code = "end_exit_code",
  signal = "end_signal", node = "end_node" }

function Store:_launch_exists(id)
  return id ~= nil and id ~= NULL and self:_one("SELECT 1 AS x FROM launches WHERE id = ?", id) ~= nil
end

-- Whether the fields of `new` (a decoded object, or NULL) differ from the JSON text `old`.
local function _json_differs(old, new)
  if new == NULL then return old ~= nil end
  if old == nil then return true end
  local o = _dec(old)
  for k, v in pairs(new) do if o[k] ~= v then return true end end
  for k in pairs(o) do if new[k] == nil then return true end end
  return false
end

-- Insert or update one reported replica; returns its model id and whether anything of it changed
-- (nil when it was ignored).
function Store:_upsert_replica(r, now, ignored)
  local cur = self:_one("SELECT * FROM replicas WHERE nonce = ?", r.nonce)
  local changed = cur == nil
  if r.launch_id and r.launch_id ~= NULL and not self:_launch_exists(r.launch_id) then r.launch_id = NULL end
  if not cur then
    if not r.model_id or r.model_id == NULL then
      _abort("invalid", ("replica %s is new: model_id, slot and state are required"):format(r.nonce), "replicas")
    end
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", r.model_id) then
      ignored[#ignored + 1] = { nonce = r.nonce, model_id = r.model_id, reason = "no such model" }
      return nil
    end
    if not r.slot or r.slot == NULL or not r.state or r.state == NULL then
      _abort("invalid", ("replica %s is new: slot and state are required"):format(r.nonce), "replicas")
    end
    local launch = r.launch_id
    if launch == nil or launch == NULL then
      local l = self:_one("SELECT id FROM launches WHERE model_id = ? ORDER BY id DESC LIMIT 1", r.model_id)
      launch = l and l.id
    end
    local id = self:_insert([[INSERT INTO replicas (model_id, slot, nonce, state, launch_id, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?)]], r.model_id, r.slot, r.nonce, r.state, launch, now, now)
    cur = { id = id, model_id = r.model_id }
  elseif r.model_id and r.model_id ~= NULL and r.model_id ~= cur.model_id then
    _abort("invalid", ("replica %s belongs to model %d, not %d"):format(r.nonce, cur.model_id, r.model_id),
      "replicas")
  end
  local sets, args, n = {}, {}, 0
  for _, c in ipairs(REPLICA_COLS) do
    if r[c] ~= nil then
      if c == "state" and r[c] == NULL then _abort("invalid", "a replica's state cannot be null", "replicas") end
      if c == "check_failures" and r[c] == NULL then r[c] = 0 end
      if c == "restart_requested" and r[c] == NULL then r[c] = false end
      sets[#sets + 1] = c .. " = ?"
      n = n + 1 -- a JSON null clears the column: args may hold nil, so count explicitly
      args[n] = _sqlv(r[c])
      if not changed and cur[c] ~= args[n] then changed = true end
    end
  end
  local e = r["end"]
  if e == NULL then
    for _, col in pairs(END_COLS) do
      sets[#sets + 1] = col .. " = NULL"
      if not changed and cur[col] ~= nil then changed = true end
    end
  elseif type(e) == "table" then
    for k, col in pairs(END_COLS) do
      if e[k] ~= nil then
        sets[#sets + 1] = col .. " = ?"
        n = n + 1
        args[n] = _sqlv(e[k])
        if not changed and cur[col] ~= args[n] then changed = true end
      end
    end
  end
  local sl = r.slurm
  if sl ~= nil then
    if not changed and _json_differs(cur.slurm, sl) then changed = true end
    sets[#sets + 1] = "slurm = ?"
    n = n + 1
    args[n] = sl ~= NULL and json.encode(sl) or nil
  end
  sets[#sets + 1] = "updated_at = ?"
  args[n + 1] = now
  args[n + 2] = cur.id
  self:_x("UPDATE replicas SET " .. table.concat(sets, ", ") .. " WHERE id = ?", table.unpack(args, 1, n + 2))
  return cur.model_id, changed
end
