--- Failure classes: why a replica's job ended (or is failing), in Slurm's words and the engine's own,
-- and what to do about it (docs/replicas-and-failures.md, "Failure classes").
--
-- `classify(facts)` looks at Slurm's end (state, reason, exit code, signal), what obleth did (its
-- cancel reason, the health check's problem) and the last lines of the job's stderr and stdout, and
-- returns the first class of `M.CLASSES` whose test matches, with the line of the log that shows it.
-- Each class says whether the failure is the node's fault (`node_fault`: true, false, or nil when the
-- evidence cannot tell); the suggestions policy never proposes avoiding a node for a failure whose
-- class says it is not the node's fault.
--
-- Pure: facts in, a decision out. Overridable in policy.d like the other modules: a file can change
-- `CLASSES` (add, reorder, reword) or wrap `classify`.
local factory = require "obleth.policy.factory"
local WHY = require "obleth.job.cancel_why"

-- The first line of `lines` (newest last) that matches one of the Lua patterns, searching from the end.
local function _find(lines, patterns)
  for i = #lines, 1, -1 do
    local l = lines[i]
    local low = l:lower()
    for _, p in ipairs(patterns) do
      if low:find(p) then return l end
    end
  end
  return nil
end

local function _log(f)
  local all = {}
  for _, l in ipairs(f.stdout or {}) do all[#all + 1] = l end
  for _, l in ipairs(f.stderr or {}) do all[#all + 1] = l end
  return all
end

local function _reason_says(f, patterns)
  local r = type(f.reason) == "string" and f.reason:lower() or ""
  for _, p in ipairs(patterns) do if r:find(p) then return true end end
  return false
end

-- The exception line that closes the last Python traceback in lines (the last non-indented line
-- after "Traceback (most recent call last):"), or nil.
local function _traceback(lines)
  local start
  for i = #lines, 1, -1 do
    if lines[i]:find("Traceback (most recent call last):", 1, true) then start = i break end
  end
  if not start then return nil end
  local last
  for i = start + 1, #lines do
    local l = lines[i]
    if l:match("^%S") and not l:find("^During handling") and not l:find("^The above exception") then last = l end
  end
  return last or lines[start]
end

local OOM_LOG = { "out of memory", "oom%-kill", "oom_kill", "memory cgroup out of memory" }

local function new(defaults)
  local M = factory.instance(defaults, new)
  local opt = factory.option(M)

  --- The classes, tried in order. Each: `class` (a stable name), `title` (what the page shows), `node_fault`,
  --- `what` (what to do), `anchor` (the section of docs/replicas-and-failures.md), `test(facts, log) ->
  --- matched, engine_line` (engine_line: the log line that shows it, or nil).
  M.CLASSES = {
    { class = "refused", title = "Slurm refused the job", node_fault = false, anchor = "refused-by-slurm",
      what = "Fix the setting Slurm names (partition, account, QoS, limits), then launch again.",
      test = function(f) return f.state == "REFUSED" end },
    { class = "node_failure", title = "the node failed", node_fault = true, anchor = "node-failure",
      what = "Avoid the node (Avoid nodes) and tell the cluster's admins about it.",
      test = function(f) return f.state == "NODE_FAIL" or f.state == "BOOT_FAIL" end },
    { class = "timeout", title = "time limit reached", node_fault = false, anchor = "time-limit",
      what = "Raise the walltime, or lower the rollover margin if start-up is quick.",
      test = function(f) return f.state == "TIMEOUT" end },
    { class = "cuda_oom", title = "GPU out of memory", node_fault = false, anchor = "out-of-memory",
      what = "Use more GPUs or GPUs with more memory, a smaller model or quantization, or a shorter context.",
      test = function(_, log)
        local l = _find(log, { "cuda out of memory", "outofmemoryerror", "cudaerrormemoryallocation",
          "cuda error: out of memory", "not enough memory on the gpu" })
        return l ~= nil, l
      end },
    { class = "host_oom", title = "out of memory on the node", node_fault = false, anchor = "out-of-memory",
      what = "Ask for more memory per node (or the whole node), or a smaller model.",
      test = function(f, log)
        if f.state == "OUT_OF_MEMORY" or _reason_says(f, { "out ?of ?memory", "oom" }) then
          return true, _find(log, OOM_LOG)
        end
        local l = _find(log, { "oom%-kill", "oom_kill", "memory cgroup out of memory" })
        return l ~= nil, l
      end },
    { class = "address_in_use", title = "port already in use", node_fault = false, anchor = "port-already-in-use",
      what = "Nothing: another process held the port; the next job gets another one. If it repeats, "
        .. "check the cluster defaults' port range.",
      test = function(f, log)
        -- the job script's own check says "port N is already in use on <node>" (obleth.job)
        local l = _find(log, { "address already in use", "errno 98", "port %d+ is already in use" })
        return l ~= nil or f.exit_code == 98, l
      end },
    { class = "command_not_found", title = "command not found", node_fault = false, anchor = "command-not-found",
      what = "The engine is not installed where the job runs: load its module (cluster defaults' modules or "
        .. "the recipe's preamble), give the image, or fix the launch command. Avoiding a node will not help.",
      test = function(f, log)
        local l = _find(log, { "command not found", ": not found$", "no such file or directory$" })
        if f.exit_code == 127 then return true, l end
        return false
      end },
    { class = "not_executable", title = "not executable", node_fault = false, anchor = "command-not-found",
      what = "The launch command names a file that cannot be run: check its permissions and that it is a "
        .. "program for this architecture.",
      test = function(f, log)
        if f.exit_code ~= 126 then return false end
        return true, _find(log, { "permission denied", "cannot execute", "exec format error" })
      end },
    { class = "python_traceback", title = "the engine crashed (Python traceback)", node_fault = false,
      anchor = "python-traceback",
      what = "Read the exception: a wrong argument, missing weights, an unsupported model or GPU.",
      test = function(_, log)
        local l = _traceback(log)
        return l ~= nil, l
      end },
    { class = "slow_start", title = "not healthy within the start-up grace", node_fault = nil,
      anchor = "slow-start",
      what = "If the model only needs longer to load, raise health.startup_grace; else read the job's output.",
      test = function(f) return f.cancel_why == WHY.STARTUP_GRACE end },
    { class = "unhealthy", title = "health checks failing", node_fault = nil, anchor = "failing-health-checks",
      what = "Read the job's output and the check's error; the replica is cancelled if it stays failing.",
      test = function(f) return f.cancel_why == WHY.UNHEALTHY or f.replica_state == "unhealthy" end },
    { class = "exit", title = "the engine exited", node_fault = nil, anchor = "the-engine-exited",
      what = "Read the last lines of the job's output.",
      test = function(f, log)
        local failed = (f.exit_code and f.exit_code ~= 0) or f.state == "FAILED"
        if not failed then return false end
        return true, _find(log, { "error", "fatal", "exception" })
      end },
  }

  --- Whether obleth ended the job on purpose, for a reason of its own (scaled down, restart asked, a
  --- rollover drained, the model deleted or paused, Slurm turned off: every `cancel_why` but the health
  --- checks' own, DEFAULTS.failed_start_cancels): such an end is no failure, whatever its exit code (a
  --- cancelled engine exits 143) or Slurm's state say. The one place that decides it: the deployment
  --- page shows the failure the API gives (GET /api/v1/replicas/{id}/log), made by `classify`.
  ---@param facts {cancel_why: string|nil}
  ---@param opts {failed_start_cancels: table<string, boolean>|nil}|nil
  ---@return boolean
  function M.on_purpose(facts, opts)
    local why = facts and facts.cancel_why
    if type(why) ~= "string" or why == "" then return false end
    return not opt(opts, "failed_start_cancels")[why]
  end

  --- Classify one replica's end or trouble.
  ---@param facts {state: string|nil, reason: string|nil, exit_code: integer|nil, signal: integer|nil,
  ---  cancel_why: string|nil, replica_state: string|nil, stderr: string[]|nil, stdout: string[]|nil}
  ---  Slurm's end state and reason, the exit code, obleth's cancel reason, the replica's state, and the last
  ---  lines of the job's stderr and stdout (oldest first; absent when not known)
  ---@return {class: string, title: string, node_fault: boolean|nil, what: string, anchor: string,
  ---  slurm: string|nil, engine: string|nil}|nil nil when nothing failed (a normal or asked-for end)
  function M.classify(facts)
    facts = facts or {}
    if M.on_purpose(facts) then return nil end
    local log = _log(facts)
    for _, c in ipairs(M.CLASSES) do
      local hit, line = c.test(facts, log)
      if hit then
        local slurm = nil
        if facts.state then
          slurm = facts.state
          if facts.reason and facts.reason ~= "" and facts.reason ~= "None" then
            slurm = slurm .. " " .. facts.reason
          end
          if facts.exit_code then slurm = slurm .. (" (exit code %d)"):format(facts.exit_code) end
        end
        return { class = c.class, title = c.title, node_fault = c.node_fault, what = c.what, anchor = c.anchor,
          slurm = slurm, engine = line }
      end
    end
    return nil
  end

  return M
end

-- failed_start_cancels: obleth's cancels that end a failing start (the health checks'), as in
-- obleth.policy.lost; every other cancel_why is on purpose
return new({ failed_start_cancels = WHY.failed_start() })
