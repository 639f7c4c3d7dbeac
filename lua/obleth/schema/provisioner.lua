--- The provisioner protocol's request bodies (docs/managed-spec.md), as data (obleth.schema): a pass's
-- report (POST /api/v1/provisioner/report), the lease (POST /api/v1/provisioner/lease) and the replicas a
-- provisioner is about to submit (POST /api/v1/provisioner/submits). The dispatcher checks each body
-- against its schema before the handler runs (obleth.api.request), and the OpenAPI ProvisionerReport,
-- ProvisionerLease and ProvisionerSubmits are read from here.
--
-- A report says what changed: a field sent as null is kept as null ("set to null": a replica's node once
-- its job has ended), so its objects keep nulls (`keep_null`). Times are Unix seconds (floats).
local wire = require "obleth.schema"
local model = require "obleth.schema.model"
local settings = require "obleth.schema.settings"

local M = {}

-- Unix seconds, up to the year 5138
local TIME = { type = "number", min = 0, max = 1e11, unit = "seconds" }
local ID = { type = "integer", min = 1, max = math.maxinteger }
local NONCE = { type = "string", max_len = 16, pattern = "^%x+$", rule = "16 hex characters" }
local function str(max, multiline) return { type = "string", max_len = max, multiline = multiline } end

--- A replica's states (docs/managed-spec.md), in their order.
M.REPLICA_STATES = { "pending", "submitted", "starting", "healthy", "unhealthy", "ending", "ended", "lost" }

--- A replica's fields as a report or a submit gives them (the `end` and `slurm` objects apart).
local REPLICA = {
  { "nonce", NONCE },
  { "model_id", ID },
  { "slot", { type = "integer", min = 1, max = 64 } },
  { "state", { type = "string", enum = M.REPLICA_STATES } },
  { "job_id", ID },
  { "node", str(256) },
  { "port", { type = "integer", min = 1, max = 65535 } },
  { "endpoint", model.endpoint },
  { "submitted_at", TIME },
  { "started_at", TIME },
  { "healthy_at", TIME },
  { "ended_at", TIME },
  { "check_failures", { type = "integer", min = 0, max = 1000000 } },
  { "problem", str(4096, true) },
  { "pending_reason", str(1024) },
  { "cancel_why", str(256) },
  { "successor_of", { type = "one_of", of = {
    { type = "string", max_len = 16, pattern = "^%x+$", rule = "a replica nonce (hex) or id" }, ID } } },
  { "launch_id", ID },
  { "restart_requested", { type = "boolean" } },
  { "generation", { type = "integer", min = 0, max = math.maxinteger } },
}

--- How a replica's job ended (`end` in a report).
M.job_end = { type = "object", keep_null = true, fields = {
  { "state", str(64) },
  { "reason", str(4096, true) },
  { "exit_code", { type = "integer", min = -1000000, max = 1000000 } },
  { "signal", { type = "one_of", of = { { type = "integer", min = 0, max = 255 }, str(32) } } },
  { "node", str(256) },
} }

--- A replica's job as Slurm last showed it (`slurm` in a report).
M.job_slurm = { type = "object", keep_null = true, fields = {
  { "state", str(64) },
  { "reason", str(1024, true) },
  { "start_time", TIME },
  { "end_time", TIME },
  { "time_limit", { type = "integer", min = 0, max = 1000000000, unit = "minutes" } },
  { "estimated", { type = "boolean" } },
  { "stdout", str(4096) },
  { "stderr", str(4096) },
} }

local report_replica = { type = "object", keep_null = true, required = { "nonce" },
  fields = { { "end", M.job_end }, { "slurm", M.job_slurm } } }
for i, f in ipairs(REPLICA) do table.insert(report_replica.fields, i, f) end

--- A job that ended (`outcomes` in a report: what the lost and failure policies count).
local outcome = { type = "object", keep_null = true, required = { "model_id", "state" }, fields = {
  { "nonce", NONCE }, { "model_id", ID }, { "slot", wire.field(report_replica, "slot") }, { "job_id", ID },
  { "state", str(64) }, { "reason", str(4096, true) },
  { "exit_code", wire.field(M.job_end, "exit_code") }, { "signal", wire.field(M.job_end, "signal") },
  { "node", str(256) }, { "started_at", TIME }, { "ended_at", TIME }, { "healthy", { type = "boolean" } },
  { "cancel_why", str(256) }, { "replica_id", ID }, { "launch_id", ID },
} }

--- A job Slurm refused, per model (`provision_errors` in a report; null clears the model's).
local provision_error = { type = "object", keep_null = true, required = { "message" }, fields = {
  { "message", str(8192, true) },
  { "field", str(128) },
  { "code", { type = "one_of", of = {
    { type = "integer", min = -1000000000, max = 1000000000, description = "before slurm_code had its own field" },
    str(64) } } },
  { "slurm_code", { type = "integer", min = -1000000000, max = 1000000000 } },
  { "at", TIME },
  { "generation", { type = "integer", min = 0, max = math.maxinteger } },
} }

local IDS = { type = "array", nullable = true, default = {}, items = ID }

--- POST /api/v1/provisioner/report. Rules between fields (obleth.deployment.input.report): a part with
--- `more: true` carries replicas only.
M.report = { type = "object", required = { "pass" }, fields = {
  { "pass", { type = "object", keep_null = true, shape = "{started_at, duration, error}", fields = {
    { "started_at", TIME },
    { "duration", { type = "number", min = 0, max = 1e6, unit = "seconds" } },
    { "error", str(8192, true) },
    { "policy_error", { type = "object", keep_null = true, required = { "message" },
      description = "a policy file that does not load: the provisioner's",
      fields = { { "file", str(4096) }, { "line", { type = "integer", min = 0, max = math.maxinteger } },
        { "message", str(8192, true) }, { "since", TIME } } } },
    { "token", { type = "object", keep_null = true, required = { "source" },
      description = "the provisioner's Slurm JWT (never the token itself)",
      fields = { { "source", { type = "string", enum = wire.field(settings.connection, "token_source").enum } },
        { "expires_at", TIME }, { "renewed_at", TIME }, { "error", str(4096, true) } } } },
  } } },
  { "lease_generation", { type = "integer", nullable = true, min = 1, max = math.maxinteger,
    description = "the sender's lease; a stale one is refused (409)" } },
  { "more", { type = "boolean", nullable = true,
    description = "a part of a report sent in parts: more follow; only its replicas are applied (the lease "
      .. "answer's body_limit says when a report must be split)" } },
  { "replicas", { type = "array", nullable = true, default = {}, items = report_replica } },
  { "outcomes", { type = "array", nullable = true, default = {}, items = outcome } },
  { "endpoints", { type = "map", nullable = true, default = {}, integer_keys = true, key_pattern = "^%d+$",
    key_rule = "model id", shape = "model ids to lists of URLs",
    values = { type = "array", nullable = true, default = {}, max_items = 256, items = model.endpoint } } },
  { "provision_errors", { type = "map", nullable = true, default = {}, integer_keys = true, key_pattern = "^%d+$",
    key_rule = "model id", keep_null = true, shape = "model ids to errors (null: cleared)", values = provision_error } },
  { "acknowledged", { type = "object", nullable = true, shape = "{restart, clear_lost}",
    description = "the requests this pass carried out (replica ids)",
    fields = { { "restart", IDS }, { "clear_lost", IDS } } } },
} }

--- POST /api/v1/provisioner/lease: acquire (no generation) or renew (the generation held).
M.lease = { type = "object", required = { "holder", "host", "pid", "ttl" }, fields = {
  { "holder", str(256) },
  { "host", str(256) },
  { "pid", { type = "integer", min = 1, max = 4194304 } },
  { "ttl", { type = "number", min = 2, max = 3600, unit = "seconds", description = "how long the lease lasts unless renewed" } },
  { "generation", { type = "integer", nullable = true, min = 1, max = math.maxinteger,
    description = "the generation held (a renewal, with the lease token in the Obleth-Lease-Token header); "
      .. "omitted to acquire" } },
} }

local submit_replica = { type = "object", keep_null = true, required = { "nonce", "model_id", "slot", "state" },
  fields = {} }
for i, f in ipairs(REPLICA) do
  submit_replica.fields[i] = f[1] ~= "state" and f
    or { "state", { type = "string", enum = { "pending" }, enum_text = "pending (a replica about to be submitted)" } }
end

--- POST /api/v1/provisioner/submits: the replicas a provisioner is about to submit (each pending).
M.submits = { type = "object", required = { "lease_generation", "replicas" }, fields = {
  { "lease_generation", ID },
  { "replicas", { type = "array", items = submit_replica } },
} }

return M
