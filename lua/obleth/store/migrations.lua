--- obleth.store.migrations — the store's schema migrations, written once for both backends, applied in
-- order at open (obleth.store.base); each backend records the last applied (SQLite: PRAGMA
-- user_version; PostgreSQL: the table obleth_schema). A script names its types as {WORD}, which the
-- backend's dialect (obleth.store.dialect) turns into its own: {ID} an id that numbers the rows, {INT}
-- an integer, {REAL} a float, {CLOCK} the provisioner's fractional seconds, {ANY} a number or a name,
-- {NONCE_INT} a nonce in a column SQLite declared INTEGER, {RANDOM_HEX8} eight random hex digits. A
-- migration whose statements differ beyond that is a function(dialect) -> script, the part that
-- differs in the dialect (migration 11's triggers).
--
-- A migration, once released, is never edited: databases already made hold its result (the spec
-- spec/host/store_upgrade_spec.lua opens databases made before this file existed). A change to the
-- schema is a new migration at the end.
local dialect = require "obleth.store.dialect"

local M = {}

--- The tables whose writes change a model's snapshot entry (migration 11): each write bumps the
--- sync_version counter and records it as the model's version. column: the one naming the model;
--- nullable: it may be NULL (then the write is no model's).
local SYNC_SOURCES = {
  { table = "models", ops = { "UPDATE", "DELETE" }, column = "id" },
  { table = "managed_specs", ops = { "INSERT", "UPDATE", "DELETE" }, column = "model_id" },
  { table = "replicas", ops = { "INSERT", "UPDATE", "DELETE" }, column = "model_id" },
  { table = "endpoints", ops = { "INSERT", "UPDATE", "DELETE" }, column = "model_id" },
  { table = "job_outcomes", ops = { "INSERT", "UPDATE", "DELETE" }, column = "model_id" },
  { table = "launches", ops = { "INSERT" }, column = "model_id", nullable = true },
}

local MIGRATIONS = {
  -- 1: models, endpoints, managed specs, replicas, job outcomes, settings, launches, recipes
  [1] = [[
    CREATE TABLE models (
      id {ID},
      name TEXT NOT NULL UNIQUE,
      description TEXT,
      status TEXT NOT NULL DEFAULT 'staged' CHECK (status IN ('staged', 'active')),
      generation {INT} NOT NULL DEFAULT 0,
      created_at {INT} NOT NULL,
      updated_at {INT} NOT NULL
    );
    CREATE TABLE endpoints (
      model_id {INT} NOT NULL REFERENCES models(id) ON DELETE CASCADE,
      url TEXT NOT NULL,
      position {INT} NOT NULL,
      added_at {INT} NOT NULL,
      PRIMARY KEY (model_id, url)
    );
    CREATE TABLE managed_specs (
      model_id {INT} PRIMARY KEY REFERENCES models(id) ON DELETE CASCADE,
      spec TEXT NOT NULL,
      generation {INT} NOT NULL,
      provision_error TEXT,
      created_at {INT} NOT NULL,
      updated_at {INT} NOT NULL
    );
    CREATE TABLE launches (
      id {ID},
      model_id {INT} REFERENCES models(id) ON DELETE SET NULL,
      recipe_id TEXT,
      settings TEXT NOT NULL,
      created_by TEXT,
      created_at {INT} NOT NULL
    );
    CREATE INDEX launches_model ON launches(model_id, id);
    CREATE INDEX launches_recipe ON launches(recipe_id, id);
    CREATE TABLE replicas (
      id {ID},
      model_id {INT} NOT NULL REFERENCES models(id) ON DELETE CASCADE,
      slot {INT} NOT NULL,
      nonce TEXT NOT NULL UNIQUE,
      state TEXT NOT NULL CHECK (state IN ('pending', 'submitted', 'starting', 'healthy', 'unhealthy',
                                           'ending', 'ended', 'lost')),
      generation {INT},
      job_id {INT}, node TEXT, port {INT}, endpoint TEXT,
      submitted_at {REAL}, started_at {REAL}, healthy_at {REAL}, ended_at {REAL},
      check_failures {INT} NOT NULL DEFAULT 0,
      problem TEXT, pending_reason TEXT,
      successor_of {NONCE_INT}, -- the nonce of the replica this one takes over from
      launch_id {INT} REFERENCES launches(id) ON DELETE SET NULL,
      end_state TEXT, end_reason TEXT, end_exit_code {INT}, end_signal {ANY}, end_node TEXT,
      restart_requested {INT} NOT NULL DEFAULT 0,
      -- the provisioner's clock (fractional seconds)
      created_at {CLOCK} NOT NULL,
      updated_at {CLOCK} NOT NULL
    );
    CREATE INDEX replicas_model ON replicas(model_id, state);
    CREATE TABLE job_outcomes (
      id {ID},
      model_id {INT} NOT NULL REFERENCES models(id) ON DELETE CASCADE,
      replica_id {INT} REFERENCES replicas(id) ON DELETE SET NULL,
      launch_id {INT} REFERENCES launches(id) ON DELETE SET NULL,
      nonce TEXT, slot {INT}, job_id {INT},
      state TEXT NOT NULL, reason TEXT, exit_code {INT}, signal {ANY}, node TEXT,
      healthy {INT} NOT NULL DEFAULT 0,
      started_at {REAL}, ended_at {REAL},
      recorded_at {CLOCK} NOT NULL
    );
    CREATE INDEX job_outcomes_model ON job_outcomes(model_id, slot, id);
    CREATE INDEX job_outcomes_launch ON job_outcomes(launch_id);
    CREATE TABLE clear_lost_requests (
      model_id {INT} PRIMARY KEY REFERENCES models(id) ON DELETE CASCADE,
      requested_at {INT} NOT NULL
    );
    CREATE TABLE settings (
      name TEXT PRIMARY KEY,
      value TEXT NOT NULL,
      updated_at {INT} NOT NULL
    );
    CREATE TABLE provisioner_status (
      id {INT} PRIMARY KEY CHECK (id = 1),
      checked_in_at {REAL},
      last_pass_started_at {REAL},
      last_pass_duration {REAL},
      failed_passes {INT} NOT NULL DEFAULT 0,
      last_error TEXT,
      last_error_at {REAL},
      passes {INT} NOT NULL DEFAULT 0
    );
    INSERT INTO provisioner_status (id) VALUES (1);
    CREATE TABLE recipes (
      id TEXT PRIMARY KEY,
      name TEXT,
      body TEXT NOT NULL,
      created_at {INT} NOT NULL,
      updated_at {INT} NOT NULL
    );
  ]],
  -- 2: the installation id, written into every job tag so two installations
  -- sharing a cluster never touch each other's jobs (docs/managed-spec.md)
  [2] = [[
    CREATE TABLE installation (
      id {INT} PRIMARY KEY CHECK (id = 1),
      instance TEXT NOT NULL CHECK (length(instance) = 8)
    );
    INSERT INTO installation (id, instance) VALUES (1, {RANDOM_HEX8});
  ]],
  -- 3: client API keys for the OpenAI-compatible router (docs/router.md): only the
  -- SHA-256 of a key is kept; keyless access is the `router` row of settings
  [3] = [[
    CREATE TABLE api_keys (
      id {ID},
      name TEXT NOT NULL,
      prefix TEXT NOT NULL,
      hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
      created_at {INT} NOT NULL,
      revoked_at {INT}
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
      id {INT} PRIMARY KEY CHECK (id = 1),
      holder TEXT NOT NULL,
      host TEXT NOT NULL,
      pid {INT} NOT NULL,
      generation {INT} NOT NULL,
      ttl {REAL} NOT NULL,
      acquired_at {REAL} NOT NULL,
      renewed_at {REAL} NOT NULL,
      expires_at {REAL} NOT NULL
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
      replica_id {INT} NOT NULL REFERENCES replicas(id) ON DELETE CASCADE,
      stream TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
      tail TEXT NOT NULL,
      path TEXT,
      exit_code {INT},
      reported_at {INT} NOT NULL,
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
    ALTER TABLE api_keys ADD COLUMN requests_per_minute {INT};
    ALTER TABLE api_keys ADD COLUMN max_concurrent {INT};
    CREATE TABLE api_key_usage (
      key_id {INT} PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
      requests {INT} NOT NULL DEFAULT 0,
      limited {INT} NOT NULL DEFAULT 0,
      prompt_tokens {INT} NOT NULL DEFAULT 0,
      completion_tokens {INT} NOT NULL DEFAULT 0,
      updated_at {INT} NOT NULL
    );
  ]],
  -- 10: the dashboard's sessions and wrong-token counts, when several obleth serve share the store
  -- (PostgreSQL; one instance on SQLite keeps them in memory): a session's id only as its SHA-256
  [10] = [[
    CREATE TABLE dashboard_sessions (
      id_hash TEXT PRIMARY KEY CHECK (length(id_hash) = 64),
      bound TEXT NOT NULL,
      expires_at {INT} NOT NULL
    );
    CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions(expires_at);
    CREATE TABLE signin_failures (
      addr TEXT PRIMARY KEY,
      n {INT} NOT NULL,
      since {REAL} NOT NULL
    );
  ]],
  -- 11: the versioned provisioner snapshot (docs/managed-spec.md, "Snapshot versions"): one counter
  -- bumped by every write to what a model's snapshot entry is made of (the model, its spec, replicas,
  -- endpoints, job outcomes, launches), and per model the counter's value at its last such write.
  -- model_versions keeps a deleted model's row (no foreign key), so a delta can say it was removed.
  -- Triggers, so that no write path can forget it (PostgreSQL: the same with a trigger function).
  [11] = function(d) return [[
    CREATE TABLE sync_version (
      id INTEGER PRIMARY KEY CHECK (id = 1), -- INTEGER on PostgreSQL too
      version {INT} NOT NULL
    );
    INSERT INTO sync_version (id, version) VALUES (1, 0);
    CREATE TABLE model_versions (
      model_id {INT} PRIMARY KEY,
      version {INT} NOT NULL
    );
    CREATE INDEX model_versions_version ON model_versions(version);
  ]] .. d.sync_triggers(SYNC_SOURCES) end,
  -- 12: the audit trail (docs/access.md "Audit"): every write through the Management API, who made it
  -- (a user, or token:admin), when, the route and its target, and a summary of the change without
  -- secrets; model_id without a foreign key, so a deleted model's history stays
  [12] = [[
    CREATE TABLE audit (
      id {ID},
      at {INT} NOT NULL,
      actor TEXT NOT NULL,
      via TEXT NOT NULL,
      role TEXT,
      method TEXT NOT NULL,
      route TEXT NOT NULL,
      target TEXT NOT NULL,
      model_id {INT},
      status {INT} NOT NULL,
      summary TEXT
    );
    CREATE INDEX audit_actor ON audit(actor, id);
    CREATE INDEX audit_model ON audit(model_id, id);
  ]],
  -- 13: personal access tokens (docs/access.md "Tokens for scripts"): a user's own tokens, only their
  -- SHA-256 kept, each limited to a role no higher than the user's when it was made
  [13] = [[
    CREATE TABLE personal_tokens (
      id {ID},
      username TEXT NOT NULL,
      name TEXT NOT NULL,
      prefix TEXT NOT NULL,
      hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
      role TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
      created_at {INT} NOT NULL,
      revoked_at {INT}
    );
    CREATE INDEX personal_tokens_user ON personal_tokens(username, id);
  ]],
  -- 14: a dashboard session of a user signed in with the directory (docs/access.md "LDAP") carries
  -- their name and groups (a JSON list); NULL: a session of the admin token
  [14] = [[
    ALTER TABLE dashboard_sessions ADD COLUMN username TEXT;
    ALTER TABLE dashboard_sessions ADD COLUMN groups TEXT;
  ]],
  -- 15: each obleth serve's router load window, published every few seconds for the others on the same
  -- database (obleth.store.load_shares; used on PostgreSQL, where several instances share one database;
  -- not copied by obleth.store.copy)
  [15] = [[
    CREATE TABLE load_shares (
      instance TEXT PRIMARY KEY,
      host TEXT,
      pid {INT},
      started_at {REAL} NOT NULL,
      updated_at {REAL} NOT NULL,
      doc TEXT NOT NULL
    );
  ]],
  -- 16: replicas.successor_of as TEXT on SQLite. Migration 1 declared it INTEGER there, and SQLite's
  -- integer affinity turned a predecessor's nonce of decimal digits (about 1 in 2,000 of the 16 hex
  -- digits) into a number: "0042..." read back as 42..., never equal to the nonce, so that rollover's
  -- successor was never matched to its predecessor. A value already turned into a number is matched
  -- back to the model's replica whose nonce reads as that number. PostgreSQL's column is TEXT already.
  [16] = function(d)
    if d.name ~= "sqlite" then return "SELECT 1;" end
    return [[
    ALTER TABLE replicas RENAME COLUMN successor_of TO successor_of_v15;
    ALTER TABLE replicas ADD COLUMN successor_of TEXT;
    UPDATE replicas SET successor_of = CASE WHEN typeof(successor_of_v15) = 'text' THEN successor_of_v15
      ELSE coalesce((SELECT p.nonce FROM replicas p WHERE p.model_id = replicas.model_id AND p.id <> replicas.id
        AND CAST(p.nonce AS NUMERIC) = replicas.successor_of_v15 ORDER BY p.id DESC LIMIT 1),
        CAST(successor_of_v15 AS TEXT)) END
    WHERE successor_of_v15 IS NOT NULL;
    ALTER TABLE replicas DROP COLUMN successor_of_v15;
  ]]
  end,
}


--- The migrations in a backend's dialect, in order.
---@param d table a dialect of obleth.store.dialect (dialect.sqlite, dialect.postgresql)
---@return string[] scripts
function M.render(d)
  local out = {}
  for v, m in ipairs(MIGRATIONS) do
    out[v] = dialect.render(d, type(m) == "function" and m(d) or m)
  end
  return out
end

return M
