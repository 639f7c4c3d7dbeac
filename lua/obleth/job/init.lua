--- The job a replica runs: its batch script, its environment and the
--- description handed to obleth.slurm's submit.
--
-- Values never travel through the script text: the port, model names, ids and
-- cluster defaults reach the job as environment variables set by Slurm (the
-- submit's `environment`), and the only operator data written into the
-- script is shell by nature (preamble lines, the launch command, a script
-- body) plus names that are quoted (the image path, module names).
local shell = require "obleth.util.shell"
local tag = require "obleth.job.tag"

local M = {}

-- Quote s for /bin/sh as one literal word (obleth.util.shell). The values quoted here (module
-- names, the image path) were validated with the managed spec: a NUL byte in one is a bug.
local function q(s)
  local word, err = shell.quote(s)
  if not word then error("job script: " .. err, 2) end
  return word
end

--- The token a replica's job reports its log with (OBLETH_LOG_TOKEN): hex HMAC-SHA256 of its nonce
--- under `key` (the admin token). The provisioner puts it in the job's environment; `obleth serve`
--- checks it (obleth.api.replica_logs).
---@param key string
---@param nonce string the replica's nonce (its job's tag)
---@return string
function M.log_token(key, nonce)
  return require("obleth.crypto").hmac_sha256_hex(key, "obleth replica log\0" .. nonce)
end

-- Lmod's and Environment Modules' init files for sh-family shells, in the order tried: the one the
-- site's environment names (MODULESHOME, LMOD_PKG), then where the packages install them. Both
-- projects document sourcing init/bash (or /etc/profile.d/*.sh) at the top of a batch script that
-- does not start as a login shell, which is what a job obleth submits is (an explicit environment).
M.MODULE_INITS = { "${MODULESHOME:+$MODULESHOME/init/bash}", "${LMOD_PKG:+$LMOD_PKG/init/bash}",
  "/etc/profile.d/lmod.sh", "/usr/share/lmod/lmod/init/bash", "/etc/profile.d/modules.sh",
  "/usr/share/modules/init/bash", "/usr/share/Modules/init/bash" }

--- The lines every replica's script starts with (after its #! line), plain POSIX sh:
--- * `obleth_port_busy PORT` / `obleth_free_port [FIRST LAST]`: whether a TCP port is listened on
---   on this node (ss, else a connect to 127.0.0.1), a free one in a range (default 30000-39999);
--- * the check that $OBLETH_PORT is free on the node: if not, the job ends at once with a message
---   naming the port and the node (the replica fails and is replaced) instead of an engine that dies
---   later with "address already in use";
--- * OBLETH_BINDS: the paths an Apptainer image needs bound (the job's OBLETH_APPTAINER_BINDS, from
---   the recipe's render, plus HF_TOKEN_PATH), those that exist, comma-separated, for
---   `apptainer exec ${OBLETH_BINDS:+--bind "$OBLETH_BINDS"}`;
--- * with modules in Cluster defaults: the site's module system initialised (M.MODULE_INITS) and
---   each module loaded once, or a clear error when no module system is there.
---@param defaults table cluster defaults (modules = array of module names)
---@return string[] lines
function M.prologue(defaults)
  local lines = {
    "obleth_port_busy() {",
    "  if command -v ss >/dev/null 2>&1; then [ -n \"$(ss -Hltn \"sport = :$1\" 2>/dev/null)\" ]",
    "  else (: <\"/dev/tcp/127.0.0.1/$1\") 2>/dev/null; fi",
    "}",
    "obleth_free_port() {",
    "  for obleth_p in $(shuf -i \"${1:-30000}-${2:-39999}\" -n 100 2>/dev/null || seq \"${1:-30000}\" \"${2:-39999}\"); do",
    "    if ! obleth_port_busy \"$obleth_p\"; then echo \"$obleth_p\"; return 0; fi",
    "  done",
    "  echo \"obleth: no free port in ${1:-30000}-${2:-39999} on $(hostname)\" >&2; return 1",
    "}",
    "if [ -n \"${OBLETH_PORT:-}\" ] && obleth_port_busy \"$OBLETH_PORT\"; then",
    "  echo \"obleth: port $OBLETH_PORT is already in use on $(hostname): the replica cannot listen there; ending the job\" >&2",
    "  exit 1",
    "fi",
    "OBLETH_BINDS=",
    "for obleth_b in $(printf '%s' \"${OBLETH_APPTAINER_BINDS:-}\" | tr ',' ' ') ${HF_TOKEN_PATH:-}; do",
    "  if [ -e \"$obleth_b\" ]; then OBLETH_BINDS=\"${OBLETH_BINDS:+$OBLETH_BINDS,}$obleth_b\"; fi",
    "done",
  }
  local mods = defaults and defaults.modules or {}
  if #mods > 0 then
    local quoted = {}
    for i, m in ipairs(mods) do quoted[i] = q(m) end
    local names = table.concat(quoted, " ")
    local inits = {}
    for i, f in ipairs(M.MODULE_INITS) do inits[i] = '"' .. f .. '"' end
    lines[#lines + 1] = "if ! command -v module >/dev/null 2>&1; then"
    lines[#lines + 1] = "  for obleth_f in " .. table.concat(inits, " ") .. "; do"
    lines[#lines + 1] = "    if [ -n \"$obleth_f\" ] && [ -r \"$obleth_f\" ]; then . \"$obleth_f\"; break; fi"
    lines[#lines + 1] = "  done"
    lines[#lines + 1] = "fi"
    lines[#lines + 1] = "if ! command -v module >/dev/null 2>&1; then"
    lines[#lines + 1] = ("  echo \"obleth: Cluster defaults name modules (%s) but no module system was found on "
      .. "$(hostname): no module command, and none of Lmod's or Environment Modules' init files "
      .. "(MODULESHOME/init/bash, /etc/profile.d/lmod.sh, /etc/profile.d/modules.sh, ...) is there\" >&2")
      :format((names:gsub('"', '\\"')))
    lines[#lines + 1] = "  exit 1"
    lines[#lines + 1] = "fi"
    lines[#lines + 1] = "module load " .. names .. " || { echo \"obleth: module load "
      .. (names:gsub('"', '\\"')) .. " failed\" >&2; exit 1; }"
  end
  return lines
end

--- The batch script for a spec: its #! line, M.prologue, then the script body, or the preamble
--- lines and the launch command (inside `apptainer exec --nv` with the binds when an image is given).
---@param spec table managed spec (docs/managed-spec.md)
---@param defaults table cluster defaults (modules = array of module names)
---@return string script
function M.script(spec, defaults)
  local pro = table.concat(M.prologue(defaults), "\n") .. "\n"
  if spec.script_body and spec.script_body ~= "" then
    local body = spec.script_body
    if body:sub(1, 2) ~= "#!" then body = "#!/bin/bash\n" .. body end
    local first, rest = body:match("^([^\n]*\n?)(.*)$")
    if first:sub(-1) ~= "\n" then first = first .. "\n" end
    return first .. pro .. rest
  end
  local lines = { "#!/bin/bash", "# obleth replica: model $OBLETH_API_MODEL_NAME, replica $OBLETH_REPLICA_ID" }
  lines[#lines + 1] = pro:sub(1, -2)
  for _, l in ipairs(spec.preamble or {}) do lines[#lines + 1] = l end
  local cmd = spec.launch_command
  if spec.image and spec.image ~= "" then
    cmd = "apptainer exec --nv ${OBLETH_BINDS:+--bind \"$OBLETH_BINDS\"} " .. q(spec.image) .. " " .. cmd
  end
  for _, l in ipairs(M.REPORT_LINES) do lines[#lines + 1] = (l:gsub("@CMD@", function() return cmd end)) end
  lines[#lines + 1] = "exec " .. cmd
  return table.concat(lines, "\n") .. "\n"
end

--- Bytes of each stream's end the job sends when it exits (the server keeps the last lines of it).
M.REPORT_BYTES = 16384

--- The job's last words (docs/replicas-and-failures.md): when the provisioner gave the job a report URL
--- and its per-replica token (OBLETH_LOG_URL, OBLETH_LOG_TOKEN) and curl is there, the engine runs as a
--- child; when it exits (or the job is cancelled: the TERM is passed on) the job PUTs the last
--- REPORT_BYTES of its stdout and stderr (the files behind its fds 1 and 2) to the Management API and
--- exits with the engine's code. The token goes to curl through a config on a pipe, never its
--- command line. Without them the engine is exec'd as before. @CMD@ is the launch command.
M.REPORT_LINES = {
  'if [ -n "${OBLETH_LOG_URL:-}" ] && [ -n "${OBLETH_LOG_TOKEN:-}" ] && command -v curl >/dev/null 2>&1; then',
  "  @CMD@ &",
  "  obleth_pid=$!",
  "  trap 'kill -TERM \"$obleth_pid\" 2>/dev/null' TERM INT",
  '  while :; do wait "$obleth_pid"; obleth_rc=$?; kill -0 "$obleth_pid" 2>/dev/null || break; done',
  "  trap - TERM INT",
  "  for obleth_s in stdout:1 stderr:2; do",
  '    obleth_f=$(readlink -f "/proc/$$/fd/${obleth_s#*:}" 2>/dev/null) && [ -f "$obleth_f" ] || continue',
  '    tail -c ' .. M.REPORT_BYTES .. ' "$obleth_f" | curl -sS -o /dev/null -m 10 -X PUT \\',
  '      -K <(printf \'header = "Authorization: Bearer %s"\\n\' "$OBLETH_LOG_TOKEN") \\',
  '      -H "Content-Type: text/plain; charset=utf-8" --data-binary @- \\',
  '      "$OBLETH_LOG_URL/${obleth_s%:*}?exit_code=$obleth_rc" 2>/dev/null || :',
  "  done",
  '  exit "$obleth_rc"',
  "fi",
}

--- Where a job of this spec writes its stdout and stderr: the spec's paths, else the cluster
--- default log_dir's obleth-<model name>-%j.out / .err; nil when neither (Slurm's default,
--- slurm-%j.out in the working directory). Slurm's filename patterns (%j ...) are left in.
---@return string|nil stdout, string|nil stderr
function M.log_paths(model, spec, defaults)
  local log_dir = defaults and defaults.log_dir
  local function logpath(p, kind)
    if p and p ~= "" then return p end
    if log_dir then return ("%s/obleth-%s-%%j.%s"):format(log_dir, (model.name:gsub("[^%w._-]", "_")), kind) end
    return nil
  end
  return logpath(spec.stdout, "out"), logpath(spec.stderr, "err")
end

--- The job environment: PATH, the OBLETH_* variables recipes use, the
--- cluster defaults' and the spec's extra environment (the spec wins).
---@param model {id: integer, name: string}
---@param replica {nonce: string, port: integer}
---@param spec table
---@param defaults table
---@param bindir string|nil directory of the obleth binary, put first on PATH
---@param exe string|nil the obleth binary (OBLETH_BIN, used by the smoke-test recipe)
function M.environment(model, replica, spec, defaults, bindir, exe)
  local env = {}
  for k, v in pairs(defaults.environment or {}) do env[k] = tostring(v) end
  local path = env.PATH or "/usr/local/bin:/usr/bin:/bin"
  if bindir and bindir ~= "" then path = bindir .. ":" .. path end
  env.PATH = path
  if exe and exe ~= "" then env.OBLETH_BIN = exe end
  env.OBLETH_PORT = tostring(replica.port)
  env.OBLETH_MODEL = model.name
  env.OBLETH_MODEL_ID = tostring(model.id)
  env.OBLETH_API_MODEL_NAME = model.name
  env.OBLETH_REPLICA_ID = replica.nonce
  if defaults.model_cache_dir then
    env.OBLETH_MODEL_CACHE_DIR = defaults.model_cache_dir
    env.HF_HOME = env.HF_HOME or defaults.model_cache_dir
  end
  if defaults.image_dir then env.OBLETH_IMAGE_DIR = defaults.image_dir end
  if defaults.log_dir then env.OBLETH_LOG_DIR = defaults.log_dir end
  -- the Hugging Face token itself never goes into a job (Slurm keeps a job's environment with the
  -- job: scontrol show job, sacct --env-vars): jobs get the path of a file the site keeps for the
  -- job user (docs/huggingface.md), which huggingface_hub reads as HF_TOKEN_PATH
  if defaults.hf_token_path and defaults.hf_token_path ~= "" then env.HF_TOKEN_PATH = defaults.hf_token_path end
  for k, v in pairs(spec.environment or {}) do env[k] = tostring(v) end
  return env
end

--- The job description for obleth.slurm's submit. model = {id, name,
--- instance} (instance: the installation id that goes into the job tag). (requeue off: a node
--- failure ends the job for good and the replica is replaced, so a replica
--- never follows a requeued job to another node with a stale endpoint).
function M.desc(model, replica, spec, defaults, bindir, exe)
  local log_dir = defaults.log_dir
  local stdout, stderr = M.log_paths(model, spec, defaults)
  local gpus = spec.gpus_per_node
  return {
    name = tag.name(model.instance, model.id, replica.slot, replica.nonce),
    comment = tag.comment(model.instance, model.id, replica.slot, replica.nonce, spec.generation, replica.port),
    partition = spec.partition or defaults.partition,
    account = spec.account or defaults.account,
    qos = spec.qos or defaults.qos,
    time_limit = spec.time_limit,
    nodes = spec.nodes or 1,
    gpus_per_node = (gpus and gpus > 0) and gpus or nil,
    gpu_type = (gpus and gpus > 0) and spec.gpu_type or nil,
    cpus_per_node = spec.cpus_per_node,
    memory_per_node = spec.memory_per_node,
    constraint = spec.constraint,
    exclude = spec.exclude,
    environment = M.environment(model, replica, spec, defaults, bindir, exe),
    script = M.script(spec, defaults),
    stdout = stdout,
    stderr = stderr,
    working_directory = spec.working_directory or log_dir or "/tmp",
    requeue = false,
  }
end

return M
