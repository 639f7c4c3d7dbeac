--- Partition fit: for each partition, whether one replica fits (CPUs, memory,
-- GPUs by type, features, avoided nodes, max nodes, max time) and how many
-- fitting nodes are idle now.
--
-- Facts use the shapes of obleth.slurm.normalize: partitions {name,
-- node_list, max_time (minutes|math.huge), max_nodes (count|math.huge),
-- state}, nodes {name, state={base, flags}, idle, cpus, alloc_cpus, memory,
-- alloc_memory (MiB), gres={gpu={total, by_type}}, gres_free, features (set)}.
local factory = require "obleth.policy.factory"
local hostlist = require "obleth.util.hostlist"

local function new(defaults)
  local M = factory.instance(defaults, new)

  ---------------------------------------------------------------------------
  -- constraint expressions: a&b, a|b, a,b (AND), !a, (..), [..], name*count
  ---------------------------------------------------------------------------

  -- an unparsable constraint: the one error shape, on the field it came from
  local function bad(message)
    return nil, { code = "invalid_constraint", field = "constraint", message = message }
  end

  local function tokenize(s)
    local toks, i = {}, 1
    while i <= #s do
      local c = s:sub(i, i)
      if c:match("%s") then
        i = i + 1
      elseif c == "&" or c == "," then
        toks[#toks + 1] = "&"; i = i + 1
      elseif c == "|" or c == "!" or c == "(" or c == ")" then
        toks[#toks + 1] = c; i = i + 1
      elseif c == "[" then
        toks[#toks + 1] = "("; i = i + 1
      elseif c == "]" then
        toks[#toks + 1] = ")"; i = i + 1
      else
        local name = s:match("^[%w_.:%-]+", i)
        if not name then return bad(("unexpected %q in constraint"):format(c)) end
        i = i + #name
        local count = s:match("^%*%d+", i)
        if count then i = i + #count end
        toks[#toks + 1] = { name = name }
      end
    end
    return toks
  end

  --- Parse a Slurm feature constraint into a predicate over a feature set.
  ---@param expr string|nil e.g. "a100", "a100&ib", "a100|h100", "(a100|h100)&ib"
  ---@return (fun(features: table<string, boolean>): boolean)|nil pred (nil expr: always true)
  ---@return table|nil err {code = "invalid_constraint", field = "constraint", message}
  function M.constraint(expr)
    if expr == nil or expr == "" then return function() return true end end
    local toks, terr = tokenize(expr)
    if not toks then return nil, terr end
    local pos = 1
    local parse_or
    local function parse_atom()
      local t = toks[pos]
      if t == "!" then
        pos = pos + 1
        local inner, e = parse_atom()
        if not inner then return nil, e end
        return function(f) return not inner(f) end
      elseif t == "(" then
        pos = pos + 1
        local inner, e = parse_or()
        if not inner then return nil, e end
        if toks[pos] ~= ")" then return bad("unbalanced parenthesis in constraint") end
        pos = pos + 1
        return inner
      elseif type(t) == "table" then
        pos = pos + 1
        local name = t.name
        return function(f) return f[name] == true end
      end
      return bad("constraint " .. ("%q"):format(expr) .. " is incomplete")
    end
    local function parse_and()
      local left, e = parse_atom()
      if not left then return nil, e end
      while toks[pos] == "&" do
        pos = pos + 1
        local right, e2 = parse_atom()
        if not right then return nil, e2 end
        local l = left
        left = function(f) return l(f) and right(f) end
      end
      return left
    end
    parse_or = function()
      local left, e = parse_and()
      if not left then return nil, e end
      while toks[pos] == "|" do
        pos = pos + 1
        local right, e2 = parse_and()
        if not right then return nil, e2 end
        local l = left
        left = function(f) return l(f) or right(f) end
      end
      return left
    end
    local pred, err = parse_or()
    if not pred then return nil, err end
    if pos <= #toks then return bad(("constraint %q: unexpected text after position %d"):format(expr, pos)) end
    return pred
  end

  ---------------------------------------------------------------------------
  -- nodes
  ---------------------------------------------------------------------------

  --- Node states under which Slurm will not start a job on the node now or
  -- soon (a powered-down cloud node still counts: Slurm powers it up).
  M.UNUSABLE = { DOWN = true, DRAIN = true, DRAINED = true, DRAINING = true, FAIL = true, FAILING = true,
    NOT_RESPONDING = true, MAINTENANCE = true, INVALID_REG = true, INVALID = true, FUTURE = true,
    UNKNOWN = true, POWER_DRAIN = true, REBOOT_ISSUED = true }

  local function usable(node)
    local st = node.state or {}
    if st.base and M.UNUSABLE[st.base] then return false end
    for f in pairs(st.flags or {}) do
      if M.UNUSABLE[f] then return false end
    end
    return true
  end

  local function gpus_of(g, gtype)
    local gpu = g and g.gpu
    if not gpu then return 0 end
    if gtype then return gpu.by_type[gtype] or 0 end
    return gpu.total or 0
  end

  -- Why a node's configuration cannot hold one replica's share, or nil.
  local function node_misfit(node, req, pred)
    if (req.cpus_per_node or 1) > (node.cpus or 0) then -- 0 (the whole node) fits any
      return ("%s has %d CPUs, %d wanted"):format(node.name, node.cpus or 0, req.cpus_per_node)
    end
    local mem = req.memory_per_node or 0
    if mem > 0 and node.memory and mem > node.memory then
      return ("%s has %d MiB of memory, %d wanted"):format(node.name, node.memory, mem)
    end
    local g = req.gpus_per_node or 0
    if g > 0 and gpus_of(node.gres, req.gpu_type) < g then
      return ("%s has %d %sGPUs, %d wanted"):format(node.name, gpus_of(node.gres, req.gpu_type),
        req.gpu_type and (req.gpu_type .. " ") or "", g)
    end
    if not pred(node.features or {}) then
      return ("%s lacks the features %s"):format(node.name, req.constraint)
    end
    return nil
  end

  --- Flags of a node that can take jobs in general but none of ours now: in a reservation
  -- (RESERVED: only the reservation's jobs), BLOCKED (v0.0.44+: kept for a job of another
  -- partition or topology block), being powered down (v0.0.45's POWER_DOWN_ASAP / FORCE).
  -- Such a node is neither idle nor free, whatever its base state (IDLE+RESERVED is common).
  M.NOT_FREE = { RESERVED = true, BLOCKED = true, POWER_DOWN_ASAP = true, POWER_DOWN_FORCE = true }

  local function held(node)
    local st = node.state or {}
    if st.base and M.NOT_FREE[st.base] then return true end
    for f in pairs(st.flags or {}) do
      if M.NOT_FREE[f] then return true end
    end
    return false
  end

  local function idle_now(node) return node.idle == true and not held(node) end

  -- Can the node take the replica's share right now (free CPUs, memory, GPUs)?
  local function free_now(node, req)
    if held(node) then return false end
    if node.idle then return true end
    local st = node.state or {}
    if st.base ~= "MIXED" and st.base ~= "IDLE" then return false end
    local cpus = (node.cpus or 0) - (node.alloc_cpus or 0)
    if req.cpus_per_node == 0 and (node.alloc_cpus or 0) > 0 then return false end -- the whole node is wanted
    if (req.cpus_per_node or 1) > cpus then return false end
    local mem = req.memory_per_node or 0
    if mem == 0 then
      if (node.alloc_memory or 0) > 0 then return false end -- the whole node is wanted
    elseif node.memory and mem > node.memory - (node.alloc_memory or 0) then
      return false
    end
    local g = req.gpus_per_node or 0
    if g > 0 and gpus_of(node.gres_free, req.gpu_type) < g then return false end
    return true
  end

  local function as_set(x)
    local set = {}
    if type(x) == "string" then
      for _, n in ipairs(hostlist.expand(x) or {}) do set[n] = true end
    elseif type(x) == "table" then
      for k, v in pairs(x) do
        if type(k) == "number" then set[v] = true else set[k] = v and true or nil end
      end
    end
    return set
  end

  --- The feature names a constraint expression mentions.
  ---@param expr string|nil
  ---@return string[]|nil names (sorted, no duplicates), nil when the expression does not parse
  function M.constraint_features(expr)
    if expr == nil or expr == "" then return {} end
    local toks = tokenize(expr)
    if not toks then return nil end
    local seen, out = {}, {}
    for _, t in ipairs(toks) do
      if type(t) == "table" and not seen[t.name] then seen[t.name] = true; out[#out + 1] = t.name end
    end
    table.sort(out)
    return out
  end

  local function plural(n, one, many) return n == 1 and one or (many or one .. "s") end

  local function gpu_types(nodes)
    local types, names = {}, {}
    for _, n in ipairs(nodes) do
      local g = n.gres and n.gres.gpu
      for t, c in pairs(g and g.by_type or {}) do
        if c > 0 and (types[t] or 0) < c then
          if not types[t] then names[#names + 1] = t end
          types[t] = c
        end
      end
    end
    table.sort(names)
    local out = {}
    for i, t in ipairs(names) do out[i] = ("%s (up to %d per node)"):format(t, types[t]) end
    return out
  end

  -- Slurm refuses at submit a job that fits no node of its partition
  -- ("Requested node configuration is not available", "Invalid feature
  -- specification"), whatever the nodes' states. Which setting breaks it:
  -- the partition's nodes are filtered setting by setting, in form order
  -- (GPUs per node, GPU type, CPUs, memory, constraint, avoided nodes); the
  -- first setting after which fewer nodes remain than wanted is the one.
  -- When none remains the error is on that setting; when some remain but
  -- fewer than `nodes`, it is on `nodes` (on `exclude` for avoided nodes).
  local function config_errors(partition, members, req, excluded)
    local errors = {}
    local want = req.nodes or 1
    local pname = partition.name
    local function add(field, code, msg) errors[#errors + 1] = { field = field, code = code, message = msg } end
    if partition.max_nodes and want > partition.max_nodes then
      add("nodes", "PartitionNodeLimit", ("%d nodes wanted; partition %s allows at most %d per job")
        :format(want, pname, partition.max_nodes))
      return errors
    end
    if #members < want then
      add("nodes", "nodes", ("%d nodes wanted; partition %s has %d"):format(want, pname, #members))
      return errors
    end
    local left = members
    local function stage(field, keep, none_msg, code)
      local out = {}
      for _, n in ipairs(left) do if keep(n) then out[#out + 1] = n end end
      if #out >= want then left = out; return true end
      if #out == 0 or field == "exclude" then
        add(field, code or "node_config", none_msg(out))
      else
        add("nodes", "node_config", ("%d nodes wanted; %d %s of partition %s %s"):format(want, #out,
          plural(#out, "node"), pname, none_msg(out, true)))
      end
      return false
    end
    local g = req.gpus_per_node or 0
    if g > 0 then
      local most = 0
      for _, n in ipairs(left) do most = math.max(most, gpus_of(n.gres, nil)) end
      if not stage("gpus_per_node", function(n) return gpus_of(n.gres, nil) >= g end, function(_, some)
        if some then return ("has %d GPUs"):format(g) end
        if most == 0 then return ("partition %s has no GPUs"):format(pname) end
        return ("no node of partition %s has %d GPUs (at most %d)"):format(pname, g, most)
      end) then return errors end
      if req.gpu_type then
        local types = gpu_types(left)
        if not stage("gpu_type", function(n) return gpus_of(n.gres, req.gpu_type) >= g end, function(_, some)
          if some then return ("has %d %s GPUs"):format(g, req.gpu_type) end
          return ("no node of partition %s has %d GPUs of type %s (types here: %s)"):format(pname, g,
            req.gpu_type, #types > 0 and table.concat(types, ", ") or "none")
        end) then return errors end
      end
    end
    local c = req.cpus_per_node or 1
    local most_cpus = 0
    for _, n in ipairs(left) do most_cpus = math.max(most_cpus, n.cpus or 0) end
    if not stage("cpus_per_node", function(n) return (n.cpus or 0) >= c end, function(_, some)
      if some then return ("has %d CPUs"):format(c) end
      return ("no node of partition %s has %d CPUs (at most %d)"):format(pname, c, most_cpus)
    end) then return errors end
    local mem = req.memory_per_node or 0
    if mem > 0 then
      local most_mem = 0
      for _, n in ipairs(left) do most_mem = math.max(most_mem, n.memory or 0) end
      if not stage("memory_per_node", function(n) return n.memory == nil or n.memory >= mem end, function(_, some)
        if some then return ("has %d MiB of memory"):format(mem) end
        return ("no node of partition %s has %d MiB of memory (at most %d MiB)"):format(pname, mem, most_mem)
      end) then return errors end
    end
    if req.constraint and req.constraint ~= "" then
      local pred, cerr = M.constraint(req.constraint)
      if not pred then
        add("constraint", cerr.code, cerr.message)
        return errors
      end
      local known = {}
      for _, n in ipairs(members) do for f in pairs(n.features or {}) do known[f] = true end end
      local unknown = {}
      for _, f in ipairs(M.constraint_features(req.constraint) or {}) do
        if not known[f] then unknown[#unknown + 1] = f end
      end
      if #unknown > 0 then
        local here = {}
        for f in pairs(known) do here[#here + 1] = f end
        table.sort(here)
        add("constraint", "invalid_feature", ("no node of partition %s has the %s %s (features here: %s)")
          :format(pname, plural(#unknown, "feature"), table.concat(unknown, ", "),
          #here > 0 and table.concat(here, ", ") or "none"))
        return errors
      end
      if not stage("constraint", function(n) return pred(n.features or {}) end, function(_, some)
        if some then return ("match %s"):format(req.constraint) end
        return ("no node of partition %s matches %s"):format(pname, req.constraint)
      end) then return errors end
    end
    if next(excluded) then
      stage("exclude", function(n) return not excluded[n.name] end, function(out)
        if #out == 0 then
          return ("every node of partition %s that fits is avoided"):format(pname)
        end
        return ("%d nodes wanted; avoiding these leaves %d %s of partition %s that %s"):format(want, #out,
          plural(#out, "node"), pname, plural(#out, "fits", "fit"))
      end)
    end
    return errors
  end

  --- Whether one replica fits a partition.
  ---@param partition table normalized partition
  ---@param nodes table<string, table>|table[] normalized nodes (array, or by name)
  ---@param req {nodes: integer|nil, gpus_per_node: integer|nil, gpu_type: string|nil,
  ---  cpus_per_node: integer|nil, memory_per_node: integer|nil, constraint: string|nil,
  ---  exclude: string|string[]|nil, time_limit: integer|nil} MiB, minutes; memory 0 = whole node
  ---@return {partition: string, fits: boolean, reasons: string[], errors: table[], fitting_nodes: integer,
  ---  idle_fitting_nodes: integer, free_fitting_nodes: integer, configured_fitting_nodes: integer,
  ---  nodes: {fitting: string[], idle: string[]}}
  ---  configured = shape fits whatever the state; fitting = and the node can take jobs (not down,
  ---  drained, failing); idle = and idle now; free = and enough free CPUs/memory/GPUs now.
  ---  errors: {field, code, message} for what Slurm refuses or never runs whatever the nodes' states
  ---  (no node's configuration fits, too many nodes, time limit above MaxTime, partition DRAIN /
  ---  INACTIVE), one per field, on the setting that breaks it; reasons: every reason in words,
  ---  also those that pass (nodes down or drained, partition DOWN)
  function M.partition(partition, nodes, req)
    local by_name = {}
    for k, n in pairs(nodes or {}) do by_name[type(k) == "string" and k or n.name] = n end
    local reasons = {}
    local want = req.nodes or 1
    local pred, cerr = M.constraint(req.constraint)
    if not pred then
      reasons[#reasons + 1] = cerr.message
      pred = function() return false end
    end
    local excluded = as_set(req.exclude)
    local configured, fitting, idle, free = 0, {}, {}, 0
    local misfits, n_excluded, n_unusable = {}, 0, 0
    for _, name in ipairs(partition.node_list or {}) do
      local node = by_name[name]
      if node then
        local why = node_misfit(node, req, pred)
        if why then
          misfits[#misfits + 1] = why
        elseif excluded[name] then
          n_excluded = n_excluded + 1
        else
          configured = configured + 1
          if usable(node) then
            fitting[#fitting + 1] = name
            if idle_now(node) then idle[#idle + 1] = name end
            if free_now(node, req) then free = free + 1 end
          else
            n_unusable = n_unusable + 1
          end
        end
      end
    end
    local members = {}
    for _, name in ipairs(partition.node_list or {}) do
      if by_name[name] then members[#members + 1] = by_name[name] end
    end
    local errors = config_errors(partition, members, req, excluded)
    if partition.max_nodes and want > partition.max_nodes then
      reasons[#reasons + 1] = ("%d nodes wanted, partition %s allows at most %d per job")
        :format(want, partition.name, partition.max_nodes)
    end
    if req.time_limit and partition.max_time and req.time_limit > partition.max_time then
      reasons[#reasons + 1] = ("time limit %d min is above the partition's MaxTime %d min")
        :format(req.time_limit, partition.max_time)
      errors[#errors + 1] = { field = "time_limit", code = "PartitionTimeLimit", message = reasons[#reasons] }
    end
    if partition.state == "DRAIN" or partition.state == "INACTIVE" then
      errors[#errors + 1] = { field = "partition", code = "partition_" .. partition.state:lower(),
        message = ("partition %s is %s: Slurm takes no new jobs there"):format(partition.name, partition.state) }
    end
    if partition.state and partition.state ~= "UP" then
      reasons[#reasons + 1] = ("partition %s is %s"):format(partition.name, partition.state)
    end
    if #fitting < want then
      local msg = ("%d node%s wanted, %d fit%s"):format(want, want == 1 and "" or "s", #fitting,
        #fitting == 1 and "s" or "")
      local extra = {}
      if n_excluded > 0 then extra[#extra + 1] = ("%d avoided"):format(n_excluded) end
      if n_unusable > 0 then extra[#extra + 1] = ("%d down or drained"):format(n_unusable) end
      if #misfits > 0 then extra[#extra + 1] = misfits[1] .. (#misfits > 1 and (" (and %d more)"):format(#misfits - 1) or "") end
      if #extra > 0 then msg = msg .. ": " .. table.concat(extra, "; ") end
      reasons[#reasons + 1] = msg
    end
    -- `fits` is "can start there now" (docs/launch.md): enough of the fitting nodes must also be
    -- free now; a replica that only fits once a busy node frees pends on Resources
    if #reasons == 0 and free < want then
      reasons[#reasons + 1] = free == 0
        and ("every fitting node is busy now (%d fit%s, none free): Slurm would queue the job until one frees")
          :format(#fitting, #fitting == 1 and "s" or "")
        or ("%d node%s wanted, %d free now of %d that fit: Slurm would queue the job"):format(want,
          want == 1 and "" or "s", free, #fitting)
    end
    return {
      partition = partition.name, fits = #reasons == 0, reasons = reasons, errors = errors,
      fitting_nodes = #fitting, idle_fitting_nodes = #idle, free_fitting_nodes = free,
      configured_fitting_nodes = configured, nodes = { fitting = fitting, idle = idle },
    }
  end

  --- `partition` for every partition, in the order given.
  ---@param partitions table[]
  ---@param nodes table[]|table<string, table>
  ---@param req table see `partition`
  ---@return table[]
  function M.fit(partitions, nodes, req)
    local out = {}
    for i, p in ipairs(partitions or {}) do out[i] = M.partition(p, nodes, req) end
    return out
  end

  return M
end

return new({})
