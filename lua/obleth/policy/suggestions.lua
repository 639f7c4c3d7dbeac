--- Suggestions from past runs: each one a change to the launch form with the
-- evidence that led to it (which launches and jobs, their end states and
-- nodes). Nothing here is applied; the form shows them and the operator picks.
--
--   * TIMEOUT -> a longer time limit: the longest limit that timed out times
--     DEFAULTS.timeout_factor, capped by the partition's MaxTime and the QoS's
--     MaxWall; only offered when that is longer than the current limit.
--   * NODE_FAIL / BOOT_FAIL on a node -> avoid that node. So do
--     DEFAULTS.startup_failures start-up failures (ended without becoming
--     healthy) on one node, when the failures point at the node: no other node
--     saw a start-up failure, and the failure's class (obleth.policy.failures,
--     given as each outcome's `failure`) does not say it is not the node's
--     fault (a missing command, a port in use, a Python traceback, ...).
--   * OUT_OF_MEMORY (whatever the exit code: Slurm reports OOM kills with exit
--     code 0 too) -> more memory per node (doubled, up to the largest node of
--     the partition) when the spec asks for less than a whole node, else one
--     more node (up to the partition's MaxNodes).
local factory = require "obleth.policy.factory"
local hostlist = require "obleth.util.hostlist"

local function new(defaults)
  local M = factory.instance(defaults, new)

  local opt = factory.option(M)

  local function evidence_of(o)
    return { launch_id = o.launch_id, job_id = o.job_id, state = o.state, reason = o.reason,
      exit_code = o.exit_code, node = o.node, ended_at = o.ended_at, healthy = o.healthy,
      time_limit = o.time_limit, class = type(o.failure) == "table" and o.failure.class or nil }
  end

  local function is_oom(o)
    if o.state == "OUT_OF_MEMORY" then return true end
    local r = type(o.reason) == "string" and o.reason:lower() or ""
    return r:find("outofmemory", 1, true) ~= nil or r:find("out of memory", 1, true) ~= nil
      or r:find("oom", 1, true) ~= nil
  end

  -- ends that say nothing about the node or the recipe: asked for, or normal
  local NEUTRAL = { CANCELLED = true, COMPLETED = true, PREEMPTED = true, REQUEUED = true }

  local function excluded_set(x)
    local set, list = {}, {}
    if type(x) == "string" and x ~= "" then list = hostlist.expand(x) or {} end
    if type(x) == "table" then list = x end
    for _, n in ipairs(list) do set[n] = true end
    return set, list
  end

  local function time_suggestion(outcomes, ctx, opts)
    local ev, longest = {}, 0
    for _, o in ipairs(outcomes) do
      if o.state == "TIMEOUT" then
        ev[#ev + 1] = evidence_of(o)
        longest = math.max(longest, o.time_limit or ctx.time_limit or 0)
      end
    end
    if #ev == 0 or longest == 0 then return nil end
    local want = math.ceil(longest * opt(opts, "timeout_factor"))
    local cap, capped_by = math.huge, nil
    local p, q = ctx.partition, ctx.qos
    if p and p.max_time and p.max_time < cap then cap, capped_by = p.max_time, "partition" end
    if q and q.max_wall and q.max_wall < cap then cap, capped_by = q.max_wall, "qos" end
    local value = want
    if value > cap then value = cap else capped_by = nil end
    value = math.tointeger(value) or value
    if ctx.time_limit and value <= ctx.time_limit then return nil end
    local msg = ("%d job%s hit the time limit (%d min); try %d min"):format(#ev, #ev == 1 and "" or "s",
      longest, value)
    if capped_by == "partition" then msg = msg .. (" (the most partition %s allows)"):format(p.name or "")
    elseif capped_by == "qos" then msg = msg .. (" (the most QoS %s allows)"):format(q.name or "") end
    return { kind = "time_limit", field = "time_limit", value = value, capped_by = capped_by,
      message = msg, evidence = ev }
  end

  local function node_suggestions(outcomes, ctx, opts)
    local out = {}
    local excluded, ex_list = excluded_set(ctx.exclude)
    local hard, startup = {}, {}
    local order = {}
    for _, o in ipairs(outcomes) do
      local n = o.node
      if n and n ~= "" then
        if not hard[n] and not startup[n] then order[#order + 1] = n end
        if o.state == "NODE_FAIL" or o.state == "BOOT_FAIL" then
          hard[n] = hard[n] or {}
          table.insert(hard[n], evidence_of(o))
        elseif not o.healthy and not NEUTRAL[o.state] and not is_oom(o) and o.state ~= "TIMEOUT"
          and not (type(o.failure) == "table" and o.failure.node_fault == false) then
          startup[n] = startup[n] or {}
          table.insert(startup[n], evidence_of(o))
        end
      end
    end
    local k = opt(opts, "startup_failures")
    local seen = {}
    for _, n in ipairs(order) do
      if not seen[n] and not excluded[n] then
        seen[n] = true
        local ev, why
        if hard[n] then
          ev = hard[n]
          why = ("%s ended %s"):format(n, ev[1].state)
        elseif startup[n] and #startup[n] >= k then
          -- a failure seen on several nodes is the recipe's or the site's, not this node's
          local elsewhere_failed = false
          for m in pairs(startup) do if m ~= n then elsewhere_failed = true end end
          if not elsewhere_failed then
            ev = startup[n]
            why = ("%d start-ups failed on %s"):format(#ev, n)
          end
        end
        if ev then
          local list = {}
          for _, x in ipairs(ex_list) do list[#list + 1] = x end
          list[#list + 1] = n
          out[#out + 1] = { kind = "avoid_node", field = "exclude", node = n,
            value = hostlist.compress(list), message = why .. "; avoid it", evidence = ev }
        end
      end
    end
    return out
  end

  local function memory_suggestion(outcomes, ctx)
    local ev = {}
    for _, o in ipairs(outcomes) do
      if is_oom(o) then ev[#ev + 1] = evidence_of(o) end
    end
    if #ev == 0 then return nil end
    local mem = ctx.memory_per_node or 0
    local biggest = ctx.max_node_memory
    local nodes = ctx.nodes or 1
    local what = ("%d job%s ran out of memory"):format(#ev, #ev == 1 and "" or "s")
    if mem > 0 and (biggest == nil or mem < biggest) then
      local value = mem * 2
      if biggest and value >= biggest then value = 0 end -- the whole node
      return { kind = "memory", field = "memory_per_node", value = value, evidence = ev,
        message = what .. (value == 0 and "; use the whole node's memory" or ("; try %d MiB per node"):format(value)) }
    end
    local max_nodes = ctx.partition and ctx.partition.max_nodes or math.huge
    if nodes + 1 > max_nodes then
      return { kind = "nodes", field = "nodes", value = nil, evidence = ev,
        message = what .. (" and the partition allows no more than %d nodes"):format(max_nodes) }
    end
    return { kind = "nodes", field = "nodes", value = nodes + 1, evidence = ev,
      message = what .. ("; try %d nodes"):format(nodes + 1) }
  end

  --- Suggestions for the next launch of a recipe.
  ---@param outcomes {launch_id: any, job_id: any, state: string, reason: string|nil, exit_code: integer|nil,
  ---  node: string|nil, started_at: number|nil, ended_at: number|nil, healthy: boolean,
  ---  time_limit: integer|nil, failure: table|nil}[] ends of jobs from the recipe's launches, newest first;
  ---  failure = the end's class (obleth.policy.failures.classify), when known
  ---@param ctx {time_limit: integer|nil, nodes: integer|nil, memory_per_node: integer|nil,
  ---  exclude: string|string[]|nil, partition: table|nil, qos: table|nil, max_node_memory: integer|nil}
  ---  the form's current values (minutes, MiB), the chosen partition {name, max_time, max_nodes} and QoS
  ---  {name, max_wall}; max_node_memory = largest node memory in the partition (MiB)
  ---@param opts {timeout_factor: number|nil, startup_failures: integer|nil, window: integer|nil}|nil
  ---@return {kind: string, field: string, value: any, message: string, evidence: table[]}[]
  function M.suggest(outcomes, ctx, opts)
    ctx = ctx or {}
    local recent = {}
    for i, o in ipairs(outcomes or {}) do
      if i > opt(opts, "window") then break end
      recent[i] = o
    end
    local out = {}
    local t = time_suggestion(recent, ctx, opts)
    if t then out[#out + 1] = t end
    for _, s in ipairs(node_suggestions(recent, ctx, opts)) do out[#out + 1] = s end
    local m = memory_suggestion(recent, ctx)
    if m then out[#out + 1] = m end
    return out
  end

  return M
end

return new({ timeout_factor = 2, startup_failures = 2, window = 20 })
