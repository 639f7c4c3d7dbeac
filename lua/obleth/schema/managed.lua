--- The managed spec (docs/managed-spec.md), PUT /api/v1/models/{id}/managed, as data (obleth.schema):
-- its fields, bounds, units and defaults. The API's check (obleth.deployment.input.managed_spec), the
-- OpenAPI document, a recipe's resource and health bounds (obleth.recipe.validate) and the form's hints
-- are read from here.
--
-- Bounds, each stated once:
-- - cpus_per_node 0..1024: 0 is the whole node (every CPU, --exclusive), which the API and recipes take.
-- - rollover_margin 0..10080 minutes (a week), and below time_limit: the stored spec never took more,
--   so a recipe that said more (it was allowed up to a year) resolved to a spec its PUT refused.
-- - health.interval 1..3600 s, health.timeout 1..600 s, health.startup_grace 0..604800 s,
--   health.failure_threshold 1..100: the stored spec's, for the same reason (recipes took up to a week
--   for any health time and 1000 failures, which could never launch).
-- - autoscale.scale_down_after 0..SCALE_DOWN_MAX (3600) s: the router's load window keeps that much
--   (obleth.router.load reads it here); a longer one could never be seen whole, and the model would never
--   scale down. A longer window would cost the snapshot its samples each pass (360 more per model and
--   hour); a replica kept through a quiet hour is what min_replicas is for.
local M = {}

--- The longest autoscale.scale_down_after (seconds): the router's load window (obleth.router.load, its
--- REACH) keeps this much and reads it from here.
M.SCALE_DOWN_MAX = 3600

local NAME64 = { type = "string", nullable = true, max_len = 64, pattern = "^[A-Za-z0-9_.%-]+$",
  rule = "letters, digits, '_', '.', '-' (1 to 64)" }
local LOG_PATH = { type = "string", nullable = true, max_len = 4096, format = "log_path",
  description = "one line; only sbatch's filename patterns (%j, %x, %u, %N, %A, %a, %J, %n, %s, %t, %%)" }

--- A replica's health check.
M.health = { type = "object", nullable = true,
  shape = "{path, interval, timeout, startup_grace, failure_threshold}",
  description = "timeout must not be longer than interval",
  fields = {
    { "path", { type = "string", nullable = true, default = "/health", max_len = 1024,
      pattern = "^/[%w%-._~/%%!$&'()*+,;=:@?]*$", rule = "an absolute URL path starting with '/'" } },
    { "interval", { type = "integer", nullable = true, min = 1, max = 3600, default = 10, unit = "seconds" } },
    { "timeout", { type = "integer", nullable = true, min = 1, max = 600, default = 5, unit = "seconds" } },
    { "startup_grace", { type = "integer", nullable = true, min = 0, max = 604800, default = 600,
      unit = "seconds" } },
    { "failure_threshold", { type = "integer", nullable = true, min = 1, max = 100, default = 3 } },
  },
}

--- Autoscaling (docs/autoscaling.md): the replicas follow the load, decided by the scale policy.
M.autoscale = { type = "object", nullable = true,
  shape = "{min_replicas, max_replicas, target_inflight, scale_down_after, idle_to_zero_after}",
  description = "instead of a fixed replicas; min_replicas (0: scale to zero) not above max_replicas",
  fields = {
    { "min_replicas", { type = "integer", min = 0, max = 64, default = 1,
      description = "0: scale to zero after idle_to_zero_after, wake on the next request" } },
    { "max_replicas", { type = "integer", min = 1, max = 64, default = 1 } },
    { "target_inflight", { type = "integer", min = 1, max = 100000, default = 4,
      description = "requests in flight + queued one replica should carry; more adds a replica" } },
    { "scale_down_after", { type = "integer", min = 0, max = M.SCALE_DOWN_MAX, default = 300, unit = "seconds",
      description = "a replica goes only when the peak load of this window fits the others; 0: as soon as "
        .. "the load now fits them (no time hysteresis)" } },
    { "idle_to_zero_after", { type = "integer", min = 0, max = 604800, default = 1800, unit = "seconds",
      description = "with min_replicas 0: no request for this long scales to zero; 0: as soon as nothing is "
        .. "in flight or waiting" } },
  },
}

--- The managed spec.
M.spec = { type = "object",
  description = "docs/managed-spec.md; exactly one of script_body / launch_command; rollover_margin below "
    .. "time_limit; nodes 1 with launch_command; image and preamble only with launch_command; replicas or "
    .. "autoscale, not both",
  fields = {
    { "enabled", { type = "boolean", default = true } },
    { "replicas", { type = "integer", nullable = true, min = 0, max = 64, default = 1,
      description = "a fixed count; not with autoscale" } },
    { "partition", NAME64 },
    { "account", NAME64 },
    { "qos", NAME64 },
    { "time_limit", { type = "minutes", min = 1, max = 525600, default = 60 } },
    { "nodes", { type = "integer", min = 1, max = 64, default = 1 } },
    { "gpus_per_node", { type = "integer", min = 0, max = 64, default = 0 } },
    { "gpu_type", NAME64 },
    { "cpus_per_node", { type = "integer", min = 0, max = 1024, default = 1,
      description = "0: the whole node (every CPU, --exclusive)" } },
    { "memory_per_node", { type = "integer", min = 0, max = 16777216, default = 0, unit = "MiB",
      description = "0: the whole node" } },
    { "constraint", { type = "string", nullable = true, max_len = 1024, pattern = "^[A-Za-z0-9_&|,()!*:%-]+$",
      rule = "feature names joined with & | , ( ) ! * :" } },
    { "exclude", { type = "string", nullable = true, max_len = 4096, pattern = "^[A-Za-z0-9_.,%[%]%-]+$",
      rule = "a hostlist such as n[1-2],gpu7", format = "hostlist" } },
    { "script_body", { type = "string", nullable = true, max_len = 1048576, multiline = true } },
    { "launch_command", { type = "string", nullable = true, max_len = 65536, multiline = true } },
    { "image", { type = "string", nullable = true, max_len = 4096 } },
    { "preamble", { type = "array", nullable = true, default = {}, max_items = 256,
      items = { type = "string", max_len = 4096 } } },
    { "environment", { type = "map", nullable = true, default = {}, shape = "NAME: value strings",
      key_pattern = "^[A-Za-z_][A-Za-z0-9_]*$", key_rule = "environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
      secret_values = true, values = { type = "string", max_len = 65536, scalars = true } } },
    { "stdout", LOG_PATH },
    { "stderr", LOG_PATH },
    { "health", M.health },
    { "recipe_id", { type = "string", nullable = true, max_len = 128, pattern = "^[A-Za-z0-9._%-]+$",
      rule = "letters, digits, '.', '_', '-'" } },
    { "inputs", { type = "object", open = true, nullable = true, default = {} } },
    { "rollover_margin", { type = "integer", nullable = true, min = 0, max = 10080, unit = "minutes",
      description = "overrides the rollover policy's margin; below time_limit" } },
    { "autoscale", M.autoscale },
  },
  --- Fields a client may send back unchanged from a GET; they are ignored.
  read_only = { "generation", "provision_error", "scaling", "model_id", "model_name", "launch_id", "created_at",
    "updated_at" },
}

return M
