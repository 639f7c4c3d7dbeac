--- The words a person reads for each setting: the labels of the launch form's fields and of the
--- Slurm settings, one table for the whole product. The API puts a field's label in its error shape
--- (`{code, message, field, label}`, docs/errors.md) and starts the message with it ("Walltime: must
--- be ..." rather than "time_limit: ..."); the preview gives the form its field labels from here.
local M = {}

M.LABELS = {
  api_model_name = "API model name", partition = "Partition", account = "Account", qos = "QoS",
  time_limit = "Walltime", nodes = "Nodes", gpus_per_node = "GPUs per node", gpu_type = "GPU type",
  cpus_per_node = "CPUs per node", memory_per_node = "Memory per node (MiB)", constraint = "Only on nodes with",
  exclude = "Avoid nodes", replicas = "Replicas", stdout = "Job log (stdout)", stderr = "Job log (stderr)",
  rollover_margin = "Rollover margin (minutes)", ["health.path"] = "Health check path",
  ["health.interval"] = "Health check every (seconds)", ["health.timeout"] = "Health check timeout (seconds)",
  ["health.startup_grace"] = "Startup grace (seconds)", ["health.failure_threshold"] = "Failures before unhealthy",
  ["autoscale.min_replicas"] = "Autoscale: at least (replicas)", ["autoscale.max_replicas"] = "Autoscale: at most (replicas)",
  ["autoscale.target_inflight"] = "Requests in flight per replica",
  ["autoscale.scale_down_after"] = "Scale down after (seconds)",
  ["autoscale.idle_to_zero_after"] = "Idle to zero after (seconds)",
  -- the Slurm sheet
  url = "slurmrestd URL", socket = "slurmrestd socket", user = "Slurm user", token = "JWT", verify = "Verify TLS",
  ca_file = "CA file", api_version = "API version", timeout = "Timeout (seconds)", enabled = "Enabled",
  token_source = "JWT source", token_key_file = "Key file", token_command = "Command",
  token_lifespan = "Token lifespan (seconds)",
  ["defaults.partition"] = "Default partition", ["defaults.account"] = "Default account",
  ["defaults.qos"] = "Default QoS", ["defaults.log_dir"] = "Job log directory",
  ["defaults.model_cache_dir"] = "Model cache directory",
  ["defaults.image_dir"] = "Image directory", ["defaults.modules"] = "Modules to load",
  ["defaults.hf_token"] = "Hugging Face token",
  ["defaults.port_range"] = "Port range", ["defaults.user_groups"] = "Slurm user's groups",
  ["defaults.enforce_part_limits"] = "EnforcePartLimits", ["defaults.environment"] = "Job environment",
  ["save_recipe.id"] = "Recipe id", ["save_recipe.name"] = "Recipe name",
}

-- names a message may use for a field besides its own (recipe.resolve says api_name)
local ALIASES = { api_model_name = { "api_name" } }

--- The label of a field ("inputs.<name>" is the input's name), or nil.
---@param field string|nil
---@return string|nil
function M.of(field)
  if type(field) ~= "string" then return nil end
  if M.LABELS[field] then return M.LABELS[field] end
  local input = field:match("^inputs%.([%w_%-]+)$")
  if input then return input end
  return nil
end

local function _escape(s) return (s:gsub("%p", "%%%0")) end

--- An error table with its field's label: `label` set and a leading field key in `message`
--- ("time_limit: ", "api_name must") said with the label. Changes and returns err.
---@param err table {message, field?}
---@return table
function M.say(err)
  if type(err) ~= "table" then return err end
  local label = M.of(err.field)
  if not label then return err end
  err.label = label
  if type(err.message) == "string" then
    local names = { err.field }
    for _, a in ipairs(ALIASES[err.field] or {}) do names[#names + 1] = a end
    for _, name in ipairs(names) do
      local rest = err.message:match("^" .. _escape(name) .. ":%s*(.*)$")
        or err.message:match("^" .. _escape(name) .. "%s+(must.*)$")
        or err.message:match("^" .. _escape(name) .. "%s+(is .*)$")
      if rest then
        err.message = label .. ": " .. rest
        break
      end
    end
    -- a trailing "(field)" repeats the key: say the label
    err.message = err.message:gsub("%(" .. _escape(err.field) .. "%)$", "(" .. label .. ")")
  end
  return err
end

return M
