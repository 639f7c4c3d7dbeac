--- obleth.store.sqlite — the SQLite backend of obleth.store (WAL, foreign keys, synchronous=FULL):
-- one connection, every transaction BEGIN IMMEDIATE (one writer at a time); the schema migrations in
-- SQLite's dialect, PRAGMA user_version holding the last applied. The store's semantics are
-- obleth.store.base's and the table-group modules'.
local sqlite = require "obleth.sqlite"

local M = {}


--- Schema migrations, applied in order; PRAGMA user_version holds the last applied.
local MIGRATIONS = {
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
  -- 9: a client key's owner (who made it) and limits (NULL: none), and its usage for
  -- chargeback, added to by the router (docs/router.md "Limits and usage")
  [9] = [[
    ALTER TABLE api_keys ADD COLUMN owner TEXT;
    ALTER TABLE api_keys ADD COLUMN requests_per_minute INTEGER;
    ALTER TABLE api_keys ADD COLUMN max_concurrent INTEGER;
    CREATE TABLE api_key_usage (
      key_id INTEGER PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
      requests INTEGER NOT NULL DEFAULT 0,
      limited INTEGER NOT NULL DEFAULT 0,
      prompt_tokens INTEGER NOT NULL DEFAULT 0,
      completion_tokens INTEGER NOT NULL DEFAULT 0,
      updated_at INTEGER NOT NULL
    );
  ]],
  -- 10: the dashboard's sessions and wrong-token counts, when several obleth serve share the store
  -- (PostgreSQL; one instance on SQLite keeps them in memory): a session's id only as its SHA-256
  [10] = [[
    CREATE TABLE dashboard_sessions (
      id_hash TEXT PRIMARY KEY CHECK (length(id_hash) = 64),
      bound TEXT NOT NULL,
      expires_at INTEGER NOT NULL
    );
    CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions(expires_at);
    CREATE TABLE signin_failures (
      addr TEXT PRIMARY KEY,
      n INTEGER NOT NULL,
      since REAL NOT NULL
    );
  ]],
  -- 11: the versioned provisioner snapshot (docs/managed-spec.md, "Snapshot versions"): one counter
  -- bumped by every write to what a model's snapshot entry is made of (the model, its spec, replicas,
  -- endpoints, job outcomes, launches), and per model the counter's value at its last such write.
  -- model_versions keeps a deleted model's row (no foreign key), so a delta can say it was removed.
  -- Triggers, so that no write path can forget it (PostgreSQL: the same with a trigger function).
  [11] = [[
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
  -- 12: the audit trail (docs/access.md "Audit"): every write through the Management API, who made it
  -- (a user, or token:admin), when, the route and its target, and a summary of the change without
  -- secrets; model_id without a foreign key, so a deleted model's history stays
  [12] = [[
    CREATE TABLE audit (
      id INTEGER PRIMARY KEY,
      at INTEGER NOT NULL,
      actor TEXT NOT NULL,
      via TEXT NOT NULL,
      role TEXT,
      method TEXT NOT NULL,
      route TEXT NOT NULL,
      target TEXT NOT NULL,
      model_id INTEGER,
      status INTEGER NOT NULL,
      summary TEXT
    );
    CREATE INDEX audit_actor ON audit(actor, id);
    CREATE INDEX audit_model ON audit(model_id, id);
  ]],
  -- 13: personal access tokens (docs/access.md "Tokens for scripts"): a user's own tokens, only their
  -- SHA-256 kept, each limited to a role no higher than the user's when it was made
  [13] = [[
    CREATE TABLE personal_tokens (
      id INTEGER PRIMARY KEY,
      username TEXT NOT NULL,
      name TEXT NOT NULL,
      prefix TEXT NOT NULL,
      hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
      role TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
      created_at INTEGER NOT NULL,
      revoked_at INTEGER
    );
    CREATE INDEX personal_tokens_user ON personal_tokens(username, id);
  ]],
  -- 14: a dashboard session of a user signed in with the directory (docs/access.md "LDAP") carries
  -- their name and groups (a JSON list); NULL: a session of the admin token
  [14] = [[
    ALTER TABLE dashboard_sessions ADD COLUMN username TEXT;
    ALTER TABLE dashboard_sessions ADD COLUMN groups TEXT;
  ]],
  -- 15: each obleth serve's router load window, published for the others on the same database
  -- (obleth.store.load_shares; used on PostgreSQL, where several instances share one database)
  [15] = [[
    CREATE TABLE load_shares (
      instance TEXT PRIMARY KEY,
      host TEXT,
      pid INTEGER,
      started_at REAL NOT NULL,
      updated_at REAL NOT NULL,
      doc TEXT NOT NULL
    );
  ]],
}

M.migrations = MIGRATIONS

-- The statements whose SQL differs between backends.
M.sql = {
  -- the model's id, status and endpoints (one per line, in order) by name, in one statement
  route_model = [[SELECT m.id, m.status, (SELECT group_concat(url, char(10)) FROM
      (SELECT url FROM endpoints e WHERE e.model_id = m.id ORDER BY position, url)) AS urls
    FROM models m WHERE m.name = ?]],
}

local Conn = {}
Conn.__index = Conn

function Conn:query(sql, ...) return self.sqlite:query(sql, ...) end
function Conn:first(sql, ...) return self.sqlite:first(sql, ...) end
function Conn:execute(sql, ...)
  local changes, err = self.sqlite:execute(sql, ...)
  if not changes then return nil, err end
  return changes
end
function Conn:insert(sql, ...)
  local changes, rowid = self.sqlite:execute(sql, ...)
  if not changes then return nil, rowid end
  return rowid
end
function Conn:transaction(fn, ...) return self.sqlite:transaction(fn, ...) end
function Conn.storage_error(_, e)
  if type(e) == "table" and e.code and e.sqlite_code then return { sqlite = e.code } end
  return nil
end
function Conn:schema_version() return assert(self.sqlite:first("PRAGMA user_version")).user_version end
function Conn:migrate(v, script)
  return self.sqlite:transaction(function()
    assert(self.sqlite:exec(script))
    assert(self.sqlite:exec(("PRAGMA user_version = %d"):format(v)))
    return true
  end)
end
--- The tables of the schema, by name.
function Conn:tables()
  local out = {}
  for _, r in ipairs(assert(self.sqlite:query(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"))) do
    out[#out + 1] = r.name
  end
  return out
end

--- A table's columns in order (also keyed by name: cols.id is true when it has an id).
function Conn:columns(t)
  local out = {}
  for _, r in ipairs(assert(self.sqlite:query("SELECT name FROM pragma_table_info(?) ORDER BY cid", t))) do
    out[#out + 1] = r.name
    out[r.name] = true
  end
  return out
end

function Conn:close()
  if self.sqlite then self.sqlite:close() end
  self.sqlite = nil
end

--- Open (creating and migrating) a SQLite store.
---@param path string a file path, or ":memory:"
---@param opts table|nil {busy_timeout = ms, log = obleth.log}
---@return table|nil store, table|nil err {code = "storage", message}
function M.open(path, opts)
  opts = opts or {}
  local base = require "obleth.store.base"
  local db, err = sqlite.open(path, { wal = true, foreign_keys = true, synchronous = "FULL",
    busy_timeout = opts.busy_timeout or 5000 })
  if not db then
    return nil, base.err("storage", "cannot open the database %s: %s", path, err and err.message or "?")
  end
  if path ~= ":memory:" then
    -- it holds the JWT and the Hugging Face token: owner only
    local sys = require "obleth.sys"
    for _, suffix in ipairs({ "", "-wal", "-shm" }) do
      if sys.stat(path .. suffix) then sys.chmod(path .. suffix, tonumber("600", 8)) end
    end
  end
  local conn = setmetatable({ sqlite = db, location = path, backend = "sqlite", migrations = MIGRATIONS,
    sql = M.sql }, Conn)
  return base.new(conn, { log = opts.log, path = path })
end

return M
