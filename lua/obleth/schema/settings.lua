--- The Slurm settings (GET/PUT /api/v1/settings/slurm, docs/api.md) as data (obleth.schema): the
-- connection (also the body of POST /api/v1/settings/slurm/test) and the cluster defaults. The API's
-- check (obleth.deployment.input.settings / connection) and the OpenAPI document read them; what is
-- not data stays there: the two secrets (the mask keeps the stored value), the API versions obleth
-- knows (obleth.slurm.versions, named by `format`), a URL with credentials in it, the rules between
-- fields (url or socket, what each token source needs, the port range's order).
local M = {}

local PATH = { type = "string", nullable = true, max_len = 4096 }
local NAME64 = { type = "string", nullable = true, max_len = 64, pattern = "^[A-Za-z0-9_.%-]+$",
  rule = "letters, digits, '_', '.', '-' (1 to 64)" }
local SECRET = { type = "string", nullable = true, max_len = 16384, secret = true, pattern = "^%S+$", rule = "no spaces",
  description = "masked in answers (\"********\"); sending the mask back, or nothing, keeps the stored one" }

--- The slurmrestd connection and how its JWT is had.
M.connection_fields = {
  { "url", { type = "string", nullable = true, max_len = 2048, pattern = "^https?://[^%s]+$",
    rule = "an http:// or https:// URL", format = "no_userinfo" } },
  { "socket", { type = "string", nullable = true, max_len = 1024, pattern = "^/",
    rule = "an absolute path to slurmrestd's unix socket" } },
  { "user", { type = "string", nullable = true, max_len = 64, pattern = "^[A-Za-z0-9_.%-]+$", rule = "a user name" } },
  { "token", SECRET },
  { "verify", { type = "boolean", default = true } },
  { "ca_file", PATH },
  { "api_version", { type = "string", max_len = 16, default = "auto", format = "api_version",
    description = "\"auto\" or a version obleth knows (v0.0.40 ...)" } },
  { "timeout", { type = "number", min = 0.1, max = 120, default = 10, unit = "seconds" } },
  { "token_source", { type = "string", nullable = true, default = "static", enum = { "static", "key_file", "command" },
    enum_text = "\"static\", \"key_file\" or \"command\"",
    description = "static: the saved token; key_file: minted from the site's HS256 key; command: printed by a command" } },
  { "token_key_file", PATH },
  { "token_command", { type = "string", nullable = true, max_len = 4096, secret = true,
    description = "may carry a credential: shown only to who may change the settings, never in the audit trail" } },
  { "token_lifespan", { type = "integer", nullable = true, min = 30, max = 86400, unit = "seconds" } },
}

--- The connection alone (POST /api/v1/settings/slurm/test: fields over the saved ones, no defaults).
M.connection = { type = "object", fields = M.connection_fields, no_defaults = true,
  read_only = { "enabled", "defaults" } }

--- The cluster defaults a launch starts from.
M.defaults = { type = "object", nullable = true, fields = {
  { "model_cache_dir", PATH }, { "image_dir", PATH }, { "log_dir", PATH },
  { "hf_token_path", { type = "string", nullable = true, max_len = 4096,
    description = "a file on the cluster only the job user can read, holding the Hugging Face token; jobs get "
      .. "HF_TOKEN_PATH (the token itself never goes into a job)" } },
  { "modules", { type = "array", nullable = true, default = {}, max_items = 64,
    items = { type = "string", max_len = 4096, pattern = "^[A-Za-z0-9_.+/%-]+$", rule = "a module name" } } },
  { "partition", NAME64 }, { "account", NAME64 }, { "qos", NAME64 },
  { "hf_token", SECRET },
  { "port_range", { type = "array", default = { 20000, 20999 }, min_items = 2, max_items = 2, format = "port_range",
    items = { type = "integer", min = 1024, max = 65535 }, description = "[first, last]" } },
  { "environment", { type = "map", nullable = true, default = {}, shape = "NAME: value strings",
    key_pattern = "^[A-Za-z_][A-Za-z0-9_]*$", key_rule = "environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
    secret_values = true, values = { type = "string", max_len = 65536, scalars = true } } },
  { "user_groups", { type = "array", nullable = true, max_items = 256,
    items = { type = "string", max_len = 64, pattern = "^[A-Za-z0-9_.%-]+$", rule = "a group name" },
    description = "the Slurm user's groups for AllowGroups; null: this host's group database" } },
  { "enforce_part_limits", { type = "string", nullable = true, enum = { "NO", "ANY", "ALL" },
    enum_text = "NO, ANY, ALL or null", description = "slurmctld's EnforcePartLimits; null: unknown" } },
}, read_only = { "hf_token_set" } }

--- The whole settings document (PUT replaces it).
M.settings = { type = "object", fields = {
  { "enabled", { type = "boolean", default = false } },
  { "defaults", M.defaults },
}, read_only = { "provisioner", "serve_policy_errors", "token_set", "token_expires_at", "token_renewed_at",
  "token_warning", "thresholds",
  "updated_at" } }
for _, f in ipairs(M.connection_fields) do table.insert(M.settings.fields, #M.settings.fields, f) end

return M
