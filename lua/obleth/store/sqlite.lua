--- SQLite backend of obleth.store (WAL, foreign keys, synchronous=FULL).
-- Every write runs in one transaction (BEGIN IMMEDIATE); schema migrations are
-- numbered below and applied at open.
local sqlite = require "obleth.sqlite"
local cjson = require "cjson"
local json = require "obleth.util.json"

local NULL = cjson.null

local M = {}

--- Schema migrations, applied in order; PRAGMA user_version holds the last applied.
M.migrations = {
  -- 1: models, endpoints, managed specs, replicas, job outcomes, settings, launches, recipes
  [1] = [[
    CREATE TABLE models (
      id INTEGER PRIMARY KEY,
      name TEXT NOT NULL UNIQUE,
      description TEXT,
      status TEXT NOT NULL DEFAULT 'staged' CHECK (status IN ('staged', 'active')),
      generation INTEGER NOT NULL DEFAULT 0,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    );
    CREATE TABLE endpoints (
      model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE CASCADE,
      url TEXT NOT NULL,
      position INTEGER NOT NULL,
      added_at INTEGER NOT NULL,
      PRIMARY KEY (model_id, url)
    );
    CREATE TABLE managed_specs (
      model_id INTEGER PRIMARY KEY REFERENCES models(id) ON DELETE CASCADE,
      spec TEXT NOT NULL,
      generation INTEGER NOT NULL,
      provision_error TEXT,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    );
    CREATE TABLE launches (
      id INTEGER PRIMARY KEY,
      model_id INTEGER REFERENCES models(id) ON DELETE SET NULL,
      recipe_id TEXT,
      settings TEXT NOT NULL,
      created_by TEXT,
      created_at INTEGER NOT NULL
    );
    CREATE INDEX launches_model ON launches(model_id, id);
    CREATE INDEX launches_recipe ON launches(recipe_id, id);
    CREATE TABLE replicas (
      id INTEGER PRIMARY KEY,
      model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE CASCADE,
      slot INTEGER NOT NULL,
      nonce TEXT NOT NULL UNIQUE,
      state TEXT NOT NULL CHECK (state IN ('pending', 'submitted', 'starting', 'healthy', 'unhealthy',
                                           'ending', 'ended', 'lost')),
      generation INTEGER,
      job_id INTEGER, node TEXT, port INTEGER, endpoint TEXT,
      submitted_at REAL, started_at REAL, healthy_at REAL, ended_at REAL,
      check_failures INTEGER NOT NULL DEFAULT 0,
      problem TEXT, pending_reason TEXT,
      successor_of INTEGER,
      launch_id INTEGER REFERENCES launches(id) ON DELETE SET NULL,
      end_state TEXT, end_reason TEXT, end_exit_code INTEGER, end_signal, end_node TEXT,
      restart_requested INTEGER NOT NULL DEFAULT 0,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    );
    CREATE INDEX replicas_model ON replicas(model_id, state);
    CREATE TABLE job_outcomes (
      id INTEGER PRIMARY KEY,
      model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE CASCADE,
      replica_id INTEGER REFERENCES replicas(id) ON DELETE SET NULL,
      launch_id INTEGER REFERENCES launches(id) ON DELETE SET NULL,
      nonce TEXT, slot INTEGER, job_id INTEGER,
      state TEXT NOT NULL, reason TEXT, exit_code INTEGER, signal, node TEXT,
      healthy INTEGER NOT NULL DEFAULT 0,
      started_at REAL, ended_at REAL,
      recorded_at INTEGER NOT NULL
    );
    CREATE INDEX job_outcomes_model ON job_outcomes(model_id, slot, id);
    CREATE INDEX job_outcomes_launch ON job_outcomes(launch_id);
    CREATE TABLE clear_lost_requests (
      model_id INTEGER PRIMARY KEY REFERENCES models(id) ON DELETE CASCADE,
      requested_at INTEGER NOT NULL
    );
    CREATE TABLE settings (
      name TEXT PRIMARY KEY,
      value TEXT NOT NULL,
      updated_at INTEGER NOT NULL
    );
    CREATE TABLE provisioner_status (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      checked_in_at REAL,
      last_pass_started_at REAL,
      last_pass_duration REAL,
      failed_passes INTEGER NOT NULL DEFAULT 0,
      last_error TEXT,
      last_error_at REAL,
      passes INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO provisioner_status (id) VALUES (1);
    CREATE TABLE recipes (
      id TEXT PRIMARY KEY,
      name TEXT,
      body TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    );
  ]],
  -- 2: the installation id, written into every job tag so two installations
  -- sharing a cluster never touch each other's jobs (docs/managed-spec.md)
  [2] = [[
    CREATE TABLE installation (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      instance TEXT NOT NULL CHECK (length(instance) = 8)
    );
    INSERT INTO installation (id, instance) VALUES (1, lower(hex(randomblob(4))));
  ]],
  -- 3: client API keys for the OpenAI-compatible router (docs/router.md): only the
  -- SHA-256 of a key is kept; keyless access is the `router` row of settings
  [3] = [[
    CREATE TABLE api_keys (
      id INTEGER PRIMARY KEY,
      name TEXT NOT NULL,
      prefix TEXT NOT NULL,
      hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
      created_at INTEGER NOT NULL,
      revoked_at INTEGER
    );
  ]],
  -- 4: each replica's job as Slurm last showed it (state, reason, start/end times, time
  -- limit; for a pending job the start is Slurm's estimate), JSON, for the deployment page
  [4] = [[
    ALTER TABLE replicas ADD COLUMN slurm TEXT;
  ]],
  -- 5: the provisioner lease (one provisioner at a time, fenced by generation;
  -- docs/managed-spec.md "Provisioner lease"), and the policy error the
  -- provisioner reports (a broken policy edit is not a failed pass)
  [5] = [[
    CREATE TABLE provisioner_lease (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      holder TEXT NOT NULL,
      host TEXT NOT NULL,
      pid INTEGER NOT NULL,
      generation INTEGER NOT NULL,
      ttl REAL NOT NULL,
      acquired_at REAL NOT NULL,
      renewed_at REAL NOT NULL,
      expires_at REAL NOT NULL
    );
    ALTER TABLE provisioner_status ADD COLUMN policy_error TEXT;
    ALTER TABLE provisioner_status ADD COLUMN token_status TEXT;
  ]],
  -- 6: why obleth cancelled a replica's job (restart asked, spec paused, Slurm turned off, ...),
  -- as the provisioner reports it (docs/replicas-and-failures.md)
  [6] = [[
    ALTER TABLE replicas ADD COLUMN cancel_why TEXT;
    ALTER TABLE job_outcomes ADD COLUMN cancel_why TEXT;
  ]],
  -- 7: the last lines of a replica's job output as the job reported them when it exited
  -- (PUT /api/v1/replica-logs/{nonce}/{stream}, docs/replicas-and-failures.md "The job's last words")
  [7] = [[
    CREATE TABLE replica_logs (
      replica_id INTEGER NOT NULL REFERENCES replicas(id) ON DELETE CASCADE,
      stream TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
      tail TEXT NOT NULL,
      path TEXT,
      exit_code INTEGER,
      reported_at INTEGER NOT NULL,
      PRIMARY KEY (replica_id, stream)
    );
  ]],
  -- 8: the lease holder's secret, hashed (SHA-256 hex): the holder proves itself with the token it
  -- got when it acquired the lease; the generation stays public, as the fence
  [8] = [[
    ALTER TABLE provisioner_lease ADD COLUMN token_hash TEXT;
  ]],
  -- 9: the versioned provisioner snapshot (docs/managed-spec.md, "Snapshot versions"): one counter
  -- bumped by every write to what a model's snapshot entry is made of (the model, its spec, replicas,
  -- endpoints, job outcomes, launches), and per model the counter's value at its last such write.
  -- model_versions keeps a deleted model's row (no foreign key), so a delta can say it was removed.
  -- Triggers, so that no write path can forget it (PostgreSQL: the same with a trigger function).
  [9] = [[
    CREATE TABLE sync_version (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      version INTEGER NOT NULL
    );
    INSERT INTO sync_version (id, version) VALUES (1, 0);
    CREATE TABLE model_versions (
      model_id INTEGER PRIMARY KEY,
      version INTEGER NOT NULL
    );
    CREATE INDEX model_versions_version ON model_versions(version);
    CREATE TRIGGER sync_models_update AFTER UPDATE ON models BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_models_delete AFTER DELETE ON models BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT OLD.id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_managed_specs_insert AFTER INSERT ON managed_specs BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_managed_specs_update AFTER UPDATE ON managed_specs BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_managed_specs_delete AFTER DELETE ON managed_specs BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT OLD.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_replicas_insert AFTER INSERT ON replicas BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_replicas_update AFTER UPDATE ON replicas BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_replicas_delete AFTER DELETE ON replicas BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT OLD.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_endpoints_insert AFTER INSERT ON endpoints BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_endpoints_update AFTER UPDATE ON endpoints BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_endpoints_delete AFTER DELETE ON endpoints BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT OLD.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_job_outcomes_insert AFTER INSERT ON job_outcomes BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_job_outcomes_update AFTER UPDATE ON job_outcomes BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_job_outcomes_delete AFTER DELETE ON job_outcomes BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT OLD.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER sync_launches_insert AFTER INSERT ON launches WHEN NEW.model_id IS NOT NULL BEGIN
      UPDATE sync_version SET version = version + 1 WHERE id = 1;
      INSERT INTO model_versions (model_id, version) SELECT NEW.model_id, version FROM sync_version WHERE id = 1
        ON CONFLICT (model_id) DO UPDATE SET version = excluded.version;
    END;
  ]],
}

local Store = {}
Store.__index = Store

-- An expected failure raised inside a transaction (rolls it back).
local ERR = { __name = "obleth.store.error" }
local function _abort(code, message, field, extra)
  local e = setmetatable({ code = code, message = message, field = field }, ERR)
  for k, v in pairs(extra or {}) do e[k] = v end
  error(e, 0)
end

local function _now() return os.time() end

local function _dec(s)
  if s == nil then return nil end
  return cjson.decode(s)
end

---------------------------------------------------------------------------
-- low-level helpers (raise the SQLite error table on failure)
---------------------------------------------------------------------------

function Store:_q(sql, ...)
  local rows, err = self.db:query(sql, ...)
  if not rows then error(err, 0) end
  return rows
end

function Store:_one(sql, ...)
  local row, err = self.db:first(sql, ...)
  if err then error(err, 0) end
  return row
end

function Store:_x(sql, ...)
  local changes, rowid = self.db:execute(sql, ...)
  if not changes then error(rowid, 0) end
  return changes, rowid
end

--- Run fn(...) in one transaction (nested calls become savepoints).
--- Returns fn's results, or nil, err (err.code "storage" for database failures).
function Store:transaction(fn, ...)
  local res = table.pack(self.db:transaction(fn, ...))
  if res[1] == nil and res.n >= 2 and res[2] ~= nil then
    local e = res[2]
    if getmetatable(e) == ERR then return nil, e end
    if type(e) == "table" and e.code and e.sqlite_code then
      return nil, { code = "storage", message = "the database refused the write: " .. tostring(e.message),
        sqlite = e.code }
    end
    error(e, 0)
  end
  return table.unpack(res, 1, res.n)
end

---------------------------------------------------------------------------
-- open / migrate
---------------------------------------------------------------------------

-- An expected failure: {code, message} (message formatted from fmt and its values).
local function _err(code, fmt, ...)
  return { code = code, message = fmt:format(...) }
end

function M.open(path, opts)
  opts = opts or {}
  local db, err = sqlite.open(path, { wal = true, foreign_keys = true, synchronous = "FULL",
    busy_timeout = opts.busy_timeout or 5000 })
  if not db then
    return nil, _err("storage", "cannot open the database %s: %s", path, err and err.message or "?")
  end
  if path ~= ":memory:" then
    -- it holds the JWT and the Hugging Face token: owner only
    local sys = require "obleth.sys"
    for _, suffix in ipairs({ "", "-wal", "-shm" }) do
      if sys.stat(path .. suffix) then sys.chmod(path .. suffix, tonumber("600", 8)) end
    end
  end
  local self = setmetatable({ db = db, path = path, log = opts.log }, Store)
  local ok, merr = self:migrate()
  if not ok then
    db:close()
    return nil, merr
  end
  return self
end

--- Apply the migrations not yet applied, each in its own transaction.
---@return true|nil ok
---@return {code: "storage", message: string}|nil err
function Store:migrate()
  local cur = self:_one("PRAGMA user_version").user_version
  local last = #M.migrations
  if cur > last then
    return nil, _err("storage", "the database %s has schema version %d, newer than this obleth knows (%d)",
      self.path, cur, last)
  end
  for v = cur + 1, last do
    local ok, err = self.db:transaction(function()
      assert(self.db:exec(M.migrations[v]))
      assert(self.db:exec(("PRAGMA user_version = %d"):format(v)))
      return true
    end)
    if not ok then return nil, _err("storage", "migration %d failed: %s", v, tostring(err and err.message or err)) end
    if self.log then self.log.info("store_migrated", { version = v }) end
  end
  return true
end

--- The schema version (the last migration applied).
function Store:schema_version()
  return self:_one("PRAGMA user_version").user_version
end

function Store:close()
  if self.db then self.db:close() end
  self.db = nil
end

---------------------------------------------------------------------------
-- models and endpoints
---------------------------------------------------------------------------

function Store:_endpoints(model_id)
  local out = json.array()
  for _, r in ipairs(self:_q("SELECT url FROM endpoints WHERE model_id = ? ORDER BY position, url", model_id)) do
    out[#out + 1] = r.url
  end
  return out
end

function Store:_model_out(row)
  if not row then return nil end
  return {
    id = row.id, name = row.name, description = row.description or NULL, status = row.status,
    endpoints = self:_endpoints(row.id), managed = row.managed == 1,
    created_at = row.created_at, updated_at = row.updated_at,
  }
end

local MODEL_SELECT = [[SELECT m.*, EXISTS (SELECT 1 FROM managed_specs s WHERE s.model_id = m.id) AS managed
  FROM models m]]

--- Every model, by id.
function Store:list_models()
  local out = json.array()
  for _, r in ipairs(self:_q(MODEL_SELECT .. " ORDER BY m.id")) do out[#out + 1] = self:_model_out(r) end
  return out
end

---@return table|nil model
function Store:get_model(id)
  return self:_model_out(self:_one(MODEL_SELECT .. " WHERE m.id = ?", id))
end

---@return table|nil model
function Store:model_by_name(name)
  return self:_model_out(self:_one(MODEL_SELECT .. " WHERE m.name = ?", name))
end

local function _name_taken(name)
  _abort("conflict", ("a model named %q already exists"):format(name), "name")
end

--- Create a model (staged, no endpoints).
---@param m {name: string, description: string|nil}
---@return table|nil model, table|nil err
function Store:create_model(m)
  return self:transaction(function()
    if self:_one("SELECT 1 AS x FROM models WHERE name = ?", m.name) then _name_taken(m.name) end
    local now = _now()
    local desc = m.description
    if desc == NULL then desc = nil end
    local _, id = self:_x("INSERT INTO models (name, description, created_at, updated_at) VALUES (?, ?, ?, ?)",
      m.name, desc, now, now)
    return self:get_model(id)
  end)
end

--- Change a model's name / description.
function Store:update_model(id, m)
  return self:transaction(function()
    local cur = self:_one("SELECT * FROM models WHERE id = ?", id)
    if not cur then _abort("not_found", ("model %s does not exist"):format(id)) end
    if m.name and m.name ~= cur.name then
      if self:_one("SELECT 1 AS x FROM models WHERE name = ?", m.name) then _name_taken(m.name) end
      self:_x("UPDATE models SET name = ? WHERE id = ?", m.name, id)
    end
    if m.description ~= nil then
      local d = m.description
      if d == NULL then d = nil end
      self:_x("UPDATE models SET description = ? WHERE id = ?", d, id)
    end
    self:_x("UPDATE models SET updated_at = ? WHERE id = ?", _now(), id)
    return self:get_model(id)
  end)
end

--- Delete a model. Refused while it has a managed spec or live replicas
--- (their jobs must be cancelled first: delete the spec and wait).
function Store:delete_model(id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
      _abort("not_found", ("model %s does not exist"):format(id))
    end
    if self:_one("SELECT 1 AS x FROM managed_specs WHERE model_id = ?", id) then
      _abort("conflict", "the model has a managed spec: delete it first (DELETE /api/v1/models/" .. id ..
        "/managed) and wait for its replicas to end")
    end
    local live = self:_live_count(id)
    if live > 0 then
      _abort("conflict", ("the model still has %d live replica%s; wait for the provisioner to end them"):format(
        live, live == 1 and "" or "s"), nil, { running = live })
    end
    self:_x("DELETE FROM models WHERE id = ?", id)
    return true
  end)
end

function Store:_set_status(id)
  local n = self:_one("SELECT count(*) AS n FROM endpoints WHERE model_id = ?", id).n
  self:_x("UPDATE models SET status = ?, updated_at = ? WHERE id = ?", n > 0 and "active" or "staged", _now(), id)
end

--- Add an endpoint (idempotent); the model becomes active.
function Store:add_endpoint(id, url)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
      _abort("not_found", ("model %s does not exist"):format(id))
    end
    local pos = self:_one("SELECT coalesce(max(position), 0) + 1 AS p FROM endpoints WHERE model_id = ?", id).p
    self:_x("INSERT OR IGNORE INTO endpoints (model_id, url, position, added_at) VALUES (?, ?, ?, ?)",
      id, url, pos, _now())
    self:_set_status(id)
    return self:get_model(id)
  end)
end

--- Remove an endpoint; the model is staged when none is left.
function Store:remove_endpoint(id, url)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", id) then
      _abort("not_found", ("model %s does not exist"):format(id))
    end
    if self:_x("DELETE FROM endpoints WHERE model_id = ? AND url = ?", id, url) == 0 then
      _abort("not_found", ("model %s has no endpoint %s"):format(id, url), "url")
    end
    self:_set_status(id)
    return self:get_model(id)
  end)
end

function Store:_set_endpoints(id, urls)
  self:_x("DELETE FROM endpoints WHERE model_id = ?", id)
  local now = _now()
  for i, u in ipairs(urls) do
    self:_x("INSERT OR IGNORE INTO endpoints (model_id, url, position, added_at) VALUES (?, ?, ?, ?)", id, u, i, now)
  end
  self:_set_status(id)
end

---------------------------------------------------------------------------
-- managed specs
---------------------------------------------------------------------------

local SPEC_ARRAYS = { "preamble" }

local function _spec_out(row)
  if not row then return nil end
  local spec = _dec(row.spec)
  for _, k in ipairs(SPEC_ARRAYS) do spec[k] = json.array(spec[k] or {}) end
  spec.generation = row.generation
  spec.provision_error = row.provision_error and _dec(row.provision_error) or NULL
  spec.model_id = row.model_id
  spec.launch_id = row.launch_id or NULL
  spec.model_name = row.model_name
  spec.created_at = row.created_at
  spec.updated_at = row.updated_at
  return spec
end

local function _spec_text(spec)
  local t = {}
  for k, v in pairs(spec) do t[k] = v end
  for _, k in ipairs(SPEC_ARRAYS) do t[k] = json.array(t[k] or {}) end
  return json.encode(t)
end

-- The spec row, its model's name and the model's latest launch (the provisioner tags replicas with it).
local SPEC_SELECT = [[SELECT s.*, m.name AS model_name,
    (SELECT max(l.id) FROM launches l WHERE l.model_id = s.model_id) AS launch_id
  FROM managed_specs s JOIN models m ON m.id = s.model_id]]

--- A model's managed spec (with generation, provision_error, launch_id), or nil.
function Store:get_spec(model_id)
  return _spec_out(self:_one(SPEC_SELECT .. " WHERE s.model_id = ?", model_id))
end

--- Every managed spec, with its model's name.
function Store:list_specs()
  local out = json.array()
  for _, r in ipairs(self:_q(SPEC_SELECT .. " ORDER BY s.model_id")) do
    out[#out + 1] = _spec_out(r)
  end
  return out
end

--- Create or replace a model's managed spec (validated by obleth.deployment.input).
--- The generation is bumped when the spec changes (it never goes back, even
--- across a DELETE and a new PUT).
---@return {spec: table, created: boolean}|nil put the stored spec; created = there was none before
---@return table|nil err {code = "not_found"|..., message}
function Store:put_spec(model_id, spec)
  local res, err = self:transaction(function()
    local m = self:_one("SELECT generation FROM models WHERE id = ?", model_id)
    if not m then _abort("not_found", ("model %s does not exist"):format(model_id)) end
    local text = _spec_text(spec)
    local cur = self:_one("SELECT spec, generation FROM managed_specs WHERE model_id = ?", model_id)
    local now = _now()
    if cur and cur.spec == text then return { created = false } end
    local gen = m.generation + 1
    self:_x("UPDATE models SET generation = ?, updated_at = ? WHERE id = ?", gen, now, model_id)
    if cur then
      self:_x("UPDATE managed_specs SET spec = ?, generation = ?, updated_at = ? WHERE model_id = ?",
        text, gen, now, model_id)
    else
      self:_x([[INSERT INTO managed_specs (model_id, spec, generation, created_at, updated_at)
        VALUES (?, ?, ?, ?, ?)]], model_id, text, gen, now, now)
    end
    return { created = cur == nil }
  end)
  if not res then return nil, err end
  return { spec = self:get_spec(model_id), created = res.created }
end

--- Delete a model's spec: nothing more is launched; live replicas are
--- cancelled by the provisioner (the snapshot lists the model with spec null).
---@return true|nil, table|nil err
function Store:delete_spec(model_id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM models WHERE id = ?", model_id) then
      _abort("not_found", ("model %s does not exist"):format(model_id))
    end
    if self:_x("DELETE FROM managed_specs WHERE model_id = ?", model_id) == 0 then
      _abort("not_found", ("model %s has no managed spec"):format(model_id))
    end
    self:_x("UPDATE models SET generation = generation + 1, updated_at = ? WHERE id = ?", _now(), model_id)
    return true
  end)
end

--- Dismiss the last refused-job message of a spec.
function Store:dismiss_provision_error(model_id)
  local ok, err = self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM managed_specs WHERE model_id = ?", model_id) then
      _abort("not_found", ("model %s has no managed spec"):format(model_id))
    end
    self:_x("UPDATE managed_specs SET provision_error = NULL WHERE model_id = ?", model_id)
    return true
  end)
  if not ok then return nil, err end
  return self:get_spec(model_id)
end

---------------------------------------------------------------------------
-- replicas
---------------------------------------------------------------------------

local LIVE_SQL = "('pending', 'submitted', 'starting', 'healthy', 'unhealthy', 'ending')"

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
    self:_x("INSERT OR REPLACE INTO clear_lost_requests (model_id, requested_at) VALUES (?, ?)", model_id, _now())
    return { model_id = model_id, lost = lost }
  end)
end

---------------------------------------------------------------------------
-- settings and provisioner status
---------------------------------------------------------------------------

--- The stored Slurm settings (secrets in clear), or nil when never saved.
function Store:get_settings(name)
  local r = self:_one("SELECT value, updated_at FROM settings WHERE name = ?", name or "slurm")
  if not r then return nil end
  local s = _dec(r.value)
  s.updated_at = r.updated_at
  return s
end

--- Replace the Slurm settings. check(current) runs inside the transaction and
--- may return nil, err to refuse (e.g. disabling while replicas run).
function Store:put_settings(value, check, name)
  name = name or "slurm"
  return self:transaction(function()
    if check then
      local ok, err = check(self:get_settings(name), self)
      if not ok then _abort(err.code, err.message, err.field, err.extra) end
    end
    local v = {}
    for k, x in pairs(value) do if k ~= "updated_at" then v[k] = x end end
    self:_x("INSERT OR REPLACE INTO settings (name, value, updated_at) VALUES (?, ?, ?)", name, json.encode(v), _now())
    return self:get_settings(name)
  end)
end

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
    self:_x([[INSERT OR REPLACE INTO provisioner_lease (id, holder, host, pid, generation, ttl, acquired_at,
      renewed_at, expires_at, token_hash) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)]], req.holder, req.host, req.pid,
      (cur and cur.generation or 0) + 1, req.ttl, now, now, now + req.ttl, req.token_hash)
    return { lease = self:lease(), acquired = true, previous = cur }
  end)
end

--- Give the lease up (a clean stop), so a waiting provisioner takes over on its next try.
---@param proof string|nil SHA-256 hex of the holder's lease token
---@return boolean released false when `generation` is not the current one or `proof` not its holder's
function Store:release_lease(generation, proof, now)
  return self:transaction(function()
    if not _proves(self:lease(), proof) then return false end
    local changes = self:_x("UPDATE provisioner_lease SET expires_at = ?, renewed_at = ? WHERE id = 1 AND generation = ?"
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

--- The snapshot version: a counter every write to a model's snapshot entry bumps (migration 9).
--- Read it before the entries, so a write made while they are read is sent again next time.
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

--- One model's entry in the provisioner snapshot: {id, name, status, spec, replicas, recent_ends, endpoints}.
---@param m table a row of Store:snapshot_models()
function Store:snapshot_model(m)
  local ends = json.array()
  for _, e in ipairs(self:_q([[SELECT slot, state, healthy, cancel_why, coalesce(ended_at, recorded_at) AS at FROM (
      SELECT o.*, row_number() OVER (PARTITION BY slot ORDER BY id DESC) AS k
      FROM job_outcomes o WHERE model_id = ?) WHERE k <= 10 ORDER BY at DESC, slot]], m.id)) do
    ends[#ends + 1] = { slot = e.slot or NULL, state = e.state, healthy = e.healthy == 1, at = e.at,
      cancel_why = e.cancel_why } -- present only when obleth cancelled the job
  end
  return {
    id = m.id, name = m.name, status = m.status,
    spec = self:get_spec(m.id) or NULL,
    replicas = self:list_replicas({ model_id = m.id, live = true }),
    recent_ends = ends,
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
function Store:snapshot(now)
  local models = json.array()
  for _, m in ipairs(self:snapshot_models()) do models[#models + 1] = self:snapshot_model(m) end
  local doc = self:snapshot_head(now)
  doc.models = models
  return doc
end

local REPLICA_COLS = { "state", "generation", "job_id", "node", "port", "endpoint", "submitted_at", "started_at",
  "healthy_at", "ended_at", "check_failures", "problem", "pending_reason", "successor_of", "launch_id",
  "restart_requested", "slot", "cancel_why" }
local END_COLS = { state = "end_state", reason = "end_reason", exit_code = "end_exit_code",
  signal = "end_signal", node = "end_node" }

local function _sqlv(v)
  if v == NULL then return nil end
  if type(v) == "boolean" then return v and 1 or 0 end
  return v
end

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
    local _, id = self:_x([[INSERT INTO replicas (model_id, slot, nonce, state, launch_id, created_at, updated_at)
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

---------------------------------------------------------------------------
-- launches
---------------------------------------------------------------------------

--- Record one launch (the launch flow calls this, inside its own transaction if it likes).
---@param l {model_id: integer|nil, recipe_id: string|nil, settings: table, created_by: string|nil, created_at: integer|nil}
---@return integer|nil id, table|nil err
function Store:add_launch(l)
  if type(l) ~= "table" or type(l.settings) ~= "table" then error("add_launch: settings must be a table", 2) end
  return self:transaction(function()
    local _, id = self:_x([[INSERT INTO launches (model_id, recipe_id, settings, created_by, created_at)
      VALUES (?, ?, ?, ?, ?)]], l.model_id, l.recipe_id, json.encode(l.settings), l.created_by,
      l.created_at or _now())
    return id
  end)
end

--- Launch history, newest first, each with the job outcomes of its replicas.
---@param q {model_id: integer|nil, recipe_id: string|nil, limit: integer}
function Store:list_launches(q)
  local where, args = {}, {}
  if q.model_id then where[#where + 1] = "model_id = ?"; args[#args + 1] = q.model_id end
  if q.recipe_id then where[#where + 1] = "recipe_id = ?"; args[#args + 1] = q.recipe_id end
  args[#args + 1] = q.limit or 50
  local sql = "SELECT * FROM launches" .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "")
    .. " ORDER BY created_at DESC, id DESC LIMIT ?"
  local out = json.array()
  for _, r in ipairs(self:_q(sql, table.unpack(args))) do
    local outcomes = json.array()
    for _, o in ipairs(self:_q([[SELECT replica_id, nonce, slot, job_id, state, reason, exit_code, signal, node,
        healthy, started_at, ended_at FROM job_outcomes WHERE launch_id = ? ORDER BY id]], r.id)) do
      o.healthy = o.healthy == 1
      outcomes[#outcomes + 1] = o
    end
    out[#out + 1] = {
      id = r.id, model_id = r.model_id or NULL, recipe_id = r.recipe_id or NULL, settings = _dec(r.settings),
      created_by = r.created_by or NULL, created_at = r.created_at, outcomes = outcomes,
    }
  end
  return out
end

---------------------------------------------------------------------------
-- saved recipes
---------------------------------------------------------------------------

local function _recipe_out(r)
  if not r then return nil end
  return { id = r.id, name = r.name or NULL, source = "saved", recipe = json.raw(r.body),
    created_at = r.created_at, updated_at = r.updated_at }
end

function Store:list_recipes()
  local out = json.array()
  for _, r in ipairs(self:_q("SELECT * FROM recipes ORDER BY id")) do out[#out + 1] = _recipe_out(r) end
  return out
end

function Store:get_recipe(id)
  return _recipe_out(self:_one("SELECT * FROM recipes WHERE id = ?", id))
end

--- Create (create_only = true: conflict when it exists) or replace a saved recipe.
---@param id string
---@param name string|nil
---@param body string the recipe as JSON text
---@return {recipe: table, created: boolean}|nil put the stored recipe; created = there was none before
---@return table|nil err {code = "conflict"|"storage", message, field?}
function Store:put_recipe(id, name, body, create_only)
  local res, err = self:transaction(function()
    local now = _now()
    local cur = self:_one("SELECT 1 AS x FROM recipes WHERE id = ?", id)
    if cur and create_only then _abort("conflict", ("a saved recipe %q already exists"):format(id), "id") end
    if cur then
      self:_x("UPDATE recipes SET name = ?, body = ?, updated_at = ? WHERE id = ?", name, body, now, id)
    else
      self:_x("INSERT INTO recipes (id, name, body, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        id, name, body, now, now)
    end
    return { created = not cur }
  end)
  if not res then return nil, err end
  return { recipe = self:get_recipe(id), created = res.created }
end

function Store:delete_recipe(id)
  return self:transaction(function()
    if self:_x("DELETE FROM recipes WHERE id = ?", id) == 0 then
      _abort("not_found", ("saved recipe %q does not exist"):format(id))
    end
    return true
  end)
end

---------------------------------------------------------------------------
-- client API keys and routing reads (obleth.router, obleth.api.keys)
---------------------------------------------------------------------------

local function _key_out(r)
  if not r then return nil end
  return { id = r.id, name = r.name, prefix = r.prefix, created_at = r.created_at, revoked_at = r.revoked_at or NULL }
end

--- Store a new client key (its hash only; the key itself is never stored).
---@param k {name: string, prefix: string, hash: string} hash = SHA-256 hex of the key
---@return table|nil key {id, name, prefix, created_at, revoked_at}, table|nil err
function Store:create_api_key(k)
  return self:transaction(function()
    local _, id = self:_x("INSERT INTO api_keys (name, prefix, hash, created_at) VALUES (?, ?, ?, ?)",
      k.name, k.prefix, k.hash, _now())
    return _key_out(self:_one("SELECT * FROM api_keys WHERE id = ?", id))
  end)
end

--- Every client key, without secrets, by id.
function Store:list_api_keys()
  local out = json.array()
  for _, r in ipairs(self:_q("SELECT * FROM api_keys ORDER BY id")) do out[#out + 1] = _key_out(r) end
  return out
end

--- Revoke a key (idempotent: a revoked key keeps its first revoked_at).
---@return table|nil key, table|nil err (not_found)
function Store:revoke_api_key(id)
  return self:transaction(function()
    if not self:_one("SELECT 1 AS x FROM api_keys WHERE id = ?", id) then
      _abort("not_found", ("API key %s does not exist"):format(tostring(id)))
    end
    self:_x("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", _now(), id)
    return _key_out(self:_one("SELECT * FROM api_keys WHERE id = ?", id))
  end)
end

--- The id of the unrevoked key with this hash, or nil.
---@param hash string SHA-256 hex of the presented key
---@return integer|nil
function Store:api_key_id(hash)
  local r = self:_one("SELECT id FROM api_keys WHERE hash = ? AND revoked_at IS NULL", hash)
  return r and r.id
end

--- What the router needs to send one request: the model's id, status and endpoints
--- (in order), read in one statement; nil for an unknown name.
---@param name string the API model name
---@return table|nil {id, name, status, endpoints: string[]}
function Store:route_model(name)
  local r = self:_one([[SELECT m.id, m.status, (SELECT group_concat(url, char(10)) FROM
      (SELECT url FROM endpoints e WHERE e.model_id = m.id ORDER BY position, url)) AS urls
    FROM models m WHERE m.name = ?]], name)
  if not r then return nil end
  local eps = {}
  if r.urls then for u in r.urls:gmatch("[^\n]+") do eps[#eps + 1] = u end end
  return { id = r.id, name = name, status = r.status, endpoints = eps }
end

--- Every model with its endpoint count and healthy replica count (for /v1/models and /metrics).
---@return table[] {id, name, created_at, endpoints: integer, healthy: integer}
function Store:route_models()
  return self:_q([[SELECT m.id, m.name, m.created_at,
      (SELECT count(*) FROM endpoints e WHERE e.model_id = m.id) AS endpoints,
      (SELECT count(*) FROM replicas r WHERE r.model_id = m.id AND r.state = 'healthy') AS healthy
    FROM models m ORDER BY m.id]])
end

return M
