--- Validation before submit: what Slurm would accept but never run.
-- Without EnforcePartLimits Slurm accepts a job whose account the partition
-- does not allow, whose QoS the partition denies, or whose time limit is above
-- MaxTime, and the job pends forever (AccountNotAllowed, QOSNotAllowed,
-- PartitionTimeLimit). These checks turn each into a form-field error.
--
-- Facts use the shapes of obleth.slurm.normalize: partitions {name, max_time
-- (minutes, math.huge), allowed_accounts, denied_accounts, allowed_qos,
-- denied_qos, allowed_groups (sets; nil = no restriction)}, associations
-- {account, user, partition|nil, qos (set; empty = no restriction),
-- default_qos|nil, is_default}, qos {name, max_wall (minutes|nil), max_tres_per_job /
-- max_tres_per_node / max_tres_per_user ({cpu, node, mem, ["gres/gpu"], ...}|nil)}; plus
-- `user` {name, groups (set of group names, nil when unknown), groups_from}
-- and `enforce_part_limits` ("NO"|"ANY"|"ALL"|nil when unknown).
--
-- An empty account or QoS is what Slurm fills in for the job — the user's
-- default account, the association's default QoS — and is checked as such.
local factory = require "obleth.policy.factory"
local function new(defaults)
  local M = factory.instance(defaults, new)

  local function fmt_minutes(m)
    if m == math.huge then return "UNLIMITED" end
    if m % 60 == 0 then return ("%d h"):format(m // 60) end
    return ("%d min"):format(m)
  end

  --- True when the partition's access lists let `account` in.
  ---@param partition table
  ---@param account string
  ---@return boolean
  function M.partition_takes_account(partition, account)
    if partition.allowed_accounts and not partition.allowed_accounts[account] then return false end
    if partition.denied_accounts and partition.denied_accounts[account] then return false end
    return true
  end

  --- True when the partition's access lists let `qos` in.
  ---@param partition table
  ---@param qos string
  ---@return boolean
  function M.partition_takes_qos(partition, qos)
    if partition.allowed_qos and not partition.allowed_qos[qos] then return false end
    if partition.denied_qos and partition.denied_qos[qos] then return false end
    return true
  end

  -- associations of `account` that apply to `partition` (an association with
  -- a partition applies to that partition only)
  local function assocs_for(associations, account, partition_name)
    local out = {}
    for _, a in ipairs(associations or {}) do
      if a.account == account and (a.partition == nil or a.partition == partition_name) then
        out[#out + 1] = a
      end
    end
    return out
  end

  --- The accounts to offer for a partition: the user's associations the partition takes.
  ---@param partition table normalized partition
  ---@param associations table[] the user's associations
  ---@return string[] account names, sorted, without duplicates
  function M.accounts_for(partition, associations)
    local seen, out = {}, {}
    for _, a in ipairs(associations or {}) do
      local acc = a.account
      if acc and not seen[acc] and (a.partition == nil or a.partition == partition.name)
        and M.partition_takes_account(partition, acc) then
        seen[acc] = true
        out[#out + 1] = acc
      end
    end
    table.sort(out)
    return out
  end

  --- The QoS to offer for a partition and account: allowed by an association and the partition.
  ---@param partition table
  ---@param account string
  ---@param associations table[]
  ---@param qos_list {name: string}[]|nil every QoS (used when an association has no QoS list)
  ---@return string[] sorted
  function M.qos_for(partition, account, associations, qos_list)
    local seen, out = {}, {}
    local function add(q)
      if not seen[q] and M.partition_takes_qos(partition, q) then seen[q] = true; out[#out + 1] = q end
    end
    for _, a in ipairs(assocs_for(associations, account, partition.name)) do
      if a.qos and next(a.qos) then
        for q in pairs(a.qos) do add(q) end
      else
        for _, q in ipairs(qos_list or {}) do add(q.name) end
      end
    end
    table.sort(out)
    return out
  end

  --- True when the partition's AllowGroups lets the Slurm user in.
  ---@param partition table
  ---@param user {name: string|nil, groups: table<string, boolean>|nil}|nil groups nil: unknown
  ---@return boolean|nil ok (nil when the user's groups are unknown)
  ---@return string|nil why a sentence for the form when not ok
  function M.partition_takes_user(partition, user)
    local allowed = partition.allowed_groups
    if not allowed then return true end
    user = user or {}
    -- slurmctld lets root (and SlurmUser) into every partition
    if user.name == "root" then return true end
    local names = {}
    for g in pairs(allowed) do names[#names + 1] = g end
    table.sort(names)
    local list = table.concat(names, ", ")
    if not user.groups then
      return nil, ("partition %s takes only members of %s, and the groups of Slurm user %s are unknown "
        .. "(set user_groups in Cluster defaults)"):format(partition.name, list, tostring(user.name))
    end
    for g in pairs(user.groups) do
      if allowed[g] then return true end
    end
    return false, ("partition %s takes only members of %s; Slurm user %s is in none of them (Slurm refuses "
      .. "the job at submit: User's group not permitted to use this partition)"):format(partition.name, list,
      tostring(user.name))
  end

  --- The account Slurm uses for a job that names none: the user's default association's.
  ---@param associations table[] the user's associations
  ---@return string|nil
  function M.default_account(associations)
    for _, a in ipairs(associations or {}) do
      if a.is_default and a.account then return a.account end
    end
    return nil
  end

  --- The QoS Slurm gives a job that names none (as slurmctld does): the
  --- association's default QoS; else its only QoS; else "normal" when it exists.
  ---@param account string|nil
  ---@param partition_name string|nil
  ---@param associations table[]
  ---@param qos_list {name: string}[]|nil
  ---@return string|nil
  function M.default_qos(account, partition_name, associations, qos_list)
    if not account then return nil end
    local best
    for _, a in ipairs(associations or {}) do
      if a.account == account and (a.partition == nil or a.partition == partition_name) then
        -- an association for the partition wins over the account-wide one
        if not best or (a.partition ~= nil and best.partition == nil) then best = a end
      end
    end
    if not best then return nil end
    if best.default_qos then return best.default_qos end
    local only, n = nil, 0
    for q in pairs(best.qos or {}) do only, n = q, n + 1 end
    if n == 1 then return only end
    for _, q in ipairs(qos_list or {}) do
      if q.name == "normal" then return "normal" end
    end
    return nil
  end

  --- The QoS to preselect when none is chosen: the partition restricts QoS
  --- (AllowQos / DenyQos) and exactly one QoS the user holds passes.
  ---@return string|nil
  function M.preselect_qos(partition, account, associations, qos_list)
    if not partition or not account or not (partition.allowed_qos or partition.denied_qos) then return nil end
    local offered = M.qos_for(partition, account, associations, qos_list)
    if #offered == 1 then return offered[1] end
    return nil
  end

  --- What Slurm does with a job a partition limit forbids, in words.
  ---@param enforce string|nil EnforcePartLimits: "NO", "ANY", "ALL" or nil (unknown)
  ---@param reason string the pending reason without EnforcePartLimits (e.g. "PartitionTimeLimit")
  function M.outcome(enforce, reason)
    if enforce == "ALL" or enforce == "ANY" then
      return ("Slurm refuses the job at submit: EnforcePartLimits=%s"):format(enforce)
    elseif enforce == "NO" then
      return ("the job would pend forever: %s"):format(reason)
    end
    return ("the job would pend forever (%s), or be refused at submit where EnforcePartLimits is set")
      :format(reason)
  end

  -- TRES of a QoS limit -> the form field it is about, Slurm's pending-reason word, how to say it.
  local TRES = {
    { key = "node", field = "nodes", word = "Node", what = "nodes" },
    { key = "cpu", field = "cpus_per_node", word = "Cpu", what = "CPUs" },
    { key = "gres/gpu", field = "gpus_per_node", word = "GRES", what = "GPUs" },
    { key = "mem", field = "memory_per_node", word = "Memory", what = "MiB of memory" },
  }

  --- Errors for a request over a QoS's MaxTRESPerJob, MaxTRESPerNode or MaxTRESPerUser (a job
  --- larger on its own than the per-user limit never starts), one per field.
  ---@param q table normalized QoS
  ---@param what string how to name it ("QoS normal", "partition gpu's QoS part")
  ---@param req {nodes: integer|nil, cpus_per_node: integer|nil, gpus_per_node: integer|nil,
  ---  memory_per_node: integer|nil} per node; cpus 0 / memory 0 (the whole node) are not checked
  ---  unless `node_cpus` / `node_memory` give the node's size
  ---@return {field: string, code: string, message: string}[]
  function M.qos_limit_errors(q, what, req)
    local out, seen = {}, {}
    local nodes = req.nodes or 1
    local per_node = {
      node = 1,
      cpu = (req.cpus_per_node or 0) > 0 and req.cpus_per_node or req.node_cpus,
      ["gres/gpu"] = (req.gpus_per_node or 0) > 0 and req.gpus_per_node or nil,
      mem = (req.memory_per_node or 0) > 0 and req.memory_per_node or req.node_memory,
    }
    -- Slurm's pending reasons: QOSMaxCpuPerNode, QOSMaxGRESPerJob, QOSMaxNodePerJobLimit,
    -- QOSMaxCpuPerUserLimit, QOSMaxGRESPerUser, ...
    local function limit_word(w) return (w == "GRES" or w == "Memory") and "" or "Limit" end
    local scopes = {
      { limits = q.max_tres_per_node, name = "MaxTRESPerNode", per_node = true,
        code = function(w) return "QOSMax" .. w .. "PerNode" end },
      { limits = q.max_tres_per_job, name = "MaxTRESPerJob",
        code = function(w) return "QOSMax" .. w .. "PerJob" .. limit_word(w) end },
      { limits = q.max_tres_per_user, name = "MaxTRESPerUser",
        code = function(w) return "QOSMax" .. w .. "PerUser" .. limit_word(w) end },
    }
    for _, sc in ipairs(scopes) do
      for _, t in ipairs(TRES) do
        local lim, v = sc.limits and sc.limits[t.key], per_node[t.key]
        if lim and v and not seen[t.field] and not (sc.per_node and t.key == "node") then
          local n = t.key == "node" and nodes or (sc.per_node and v or v * nodes)
          if n > lim then
            seen[t.field] = true
            out[#out + 1] = { field = t.field, code = sc.code(t.word),
              message = ("%d %s %s is above %s's %s %s=%d: Slurm accepts the job and never starts it"):format(n,
                t.what, sc.per_node and "per node" or "in the job", what, sc.name, t.key, lim) }
          end
        end
      end
    end
    return out
  end

  --- Check the Slurm-side settings of a launch.
  --- An empty account is the user's default account and an empty QoS the
  --- association's default QoS (what Slurm fills in); the partition's
  --- AllowGroups is checked against `facts.user`.
  ---@param req {partition: string, account: string|nil, qos: string|nil, time_limit: integer|nil, nodes: integer|nil,
  ---  cpus_per_node: integer|nil, gpus_per_node: integer|nil, memory_per_node: integer|nil, node_cpus: integer|nil,
  ---  node_memory: integer|nil} minutes, MiB; node_cpus / node_memory: a node's size, for 0 (the whole node)
  ---@param facts {partitions: table[]|table<string, table>, associations: table[], qos: table[]|nil,
  ---  user: table|nil, enforce_part_limits: string|nil}
  ---  associations: the user's (only rows of the submitting user)
  ---@return {field: string, message: string, code: string}[] errors, at most one per field (empty when fine)
  function M.check(req, facts)
    local errors, seen = {}, {}
    local function err(field, code, msg) -- one error per field: the first found
      if seen[field] then return end
      seen[field] = true
      errors[#errors + 1] = { field = field, code = code, message = msg }
    end
    local partition
    for k, p in pairs(facts.partitions or {}) do
      if p.name == req.partition or k == req.partition then partition = p end
    end
    if not partition then
      err("partition", "unknown_partition", ("partition %q does not exist"):format(tostring(req.partition)))
      return errors
    end
    local qos_by_name = {}
    for _, q in ipairs(facts.qos or {}) do qos_by_name[q.name] = q end
    local enforce = facts.enforce_part_limits

    local ok_user, why_user = M.partition_takes_user(partition, facts.user)
    if not ok_user then
      err("partition", ok_user == nil and "groups_unknown" or "GroupNotAllowed", why_user)
    end

    -- an empty account is the user's default account
    local account, account_note = req.account, ""
    if not account then
      account = M.default_account(facts.associations)
      if account then account_note = " (no account chosen: Slurm uses your default account)" end
    end
    local assocs = {}
    if account then
      assocs = assocs_for(facts.associations, account, partition.name)
      local any = false
      for _, a in ipairs(facts.associations or {}) do if a.account == account then any = true end end
      if not any then
        err("account", "no_association", ("you have no association with account %q"):format(account))
      elseif #assocs == 0 then
        err("account", "no_association", ("account %q has no association for partition %s%s")
          :format(account, partition.name, account_note))
      elseif not M.partition_takes_account(partition, account) then
        err("account", "AccountNotAllowed", ("partition %s does not take account %q%s (%s)"):format(
          partition.name, account, account_note, M.outcome(enforce, "AccountNotAllowed")))
      end
    end

    -- an empty QoS is the association's default QoS
    local qos, qos_note = req.qos, ""
    if not qos and #assocs > 0 then
      qos = M.default_qos(account, partition.name, facts.associations, facts.qos)
      if qos then qos_note = " (no QoS chosen: Slurm uses the association's default QoS)" end
    end
    if qos then
      if facts.qos and not qos_by_name[qos] then
        err("qos", "unknown_qos", ("QoS %q does not exist%s"):format(qos, qos_note))
      else
        if #assocs > 0 then
          local allowed = false
          for _, a in ipairs(assocs) do
            if not a.qos or next(a.qos) == nil or a.qos[qos] then allowed = true end
          end
          if not allowed then
            err("qos", "qos_not_in_association", ("account %q may not use QoS %q%s"):format(account, qos, qos_note))
          end
        end
        if not M.partition_takes_qos(partition, qos) then
          local offered = #assocs > 0 and M.qos_for(partition, account, facts.associations, facts.qos) or {}
          err("qos", "QOSNotAllowed", ("partition %s does not take QoS %q%s (%s)%s"):format(partition.name, qos,
            qos_note, M.outcome(enforce, "QOSNotAllowed"),
            #offered > 0 and ("; it takes " .. table.concat(offered, ", ")) or ""))
        end
      end
    end

    -- QoS limits: the job's QoS, and the partition's own QoS (QOS= on the partition line), whose
    -- limits apply to every job there. A job over a per-job or per-node limit, or larger on its own
    -- than a per-user limit, is accepted and pends forever with the reason named here.
    local limited = {}
    local jq = qos and qos_by_name[qos]
    if jq then limited[#limited + 1] = { q = jq, what = ("QoS %s"):format(jq.name) } end
    local pq = partition.qos and qos_by_name[partition.qos]
    if pq and pq ~= jq then
      limited[#limited + 1] = { q = pq, what = ("partition %s's QoS %s"):format(partition.name, pq.name) }
    end
    for _, l in ipairs(limited) do
      for _, e in ipairs(M.qos_limit_errors(l.q, l.what, req)) do err(e.field, e.code, e.message) end
    end

    if req.time_limit then
      local max = partition.max_time
      if max and req.time_limit > max then
        err("time_limit", "PartitionTimeLimit", ("time limit %s is above partition %s's MaxTime %s (%s)")
          :format(fmt_minutes(req.time_limit), partition.name, fmt_minutes(max),
          M.outcome(enforce, "PartitionTimeLimit")))
      end
      for _, l in ipairs(limited) do
        local q = l.q
        if q.max_wall and req.time_limit > q.max_wall then
          err("time_limit", "QOSMaxWallDurationPerJobLimit", ("time limit %s is above %s's MaxWall %s")
            :format(fmt_minutes(req.time_limit), l.what, fmt_minutes(q.max_wall)))
        end
      end
    end
    return errors
  end

  return M
end

return new({})
