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
-- default_qos|nil, is_default}, qos {name, max_wall (minutes|nil)}; plus
-- `user` {name, groups (set of group names, nil when unknown), groups_from}
-- and `enforce_part_limits` ("NO"|"ANY"|"ALL"|nil when unknown).
--
-- An empty account or QoS is what Slurm fills in for the job — the user's
-- default account, the association's default QoS — and is checked as such.
local tables = require "obleth.tables"
local function new(defaults)
  local M = { DEFAULTS = defaults }

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

  --- Check the Slurm-side settings of a launch.
  --- An empty account is the user's default account and an empty QoS the
  --- association's default QoS (what Slurm fills in); the partition's
  --- AllowGroups is checked against `facts.user`.
  ---@param req {partition: string, account: string|nil, qos: string|nil, time_limit: integer|nil} minutes
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

    if req.time_limit then
      local max = partition.max_time
      if max and req.time_limit > max then
        err("time_limit", "PartitionTimeLimit", ("time limit %s is above partition %s's MaxTime %s (%s)")
          :format(fmt_minutes(req.time_limit), partition.name, fmt_minutes(max),
          M.outcome(enforce, "PartitionTimeLimit")))
      end
      local q = qos and qos_by_name[qos]
      if q and q.max_wall and req.time_limit > q.max_wall then
        err("time_limit", "QOSMaxWallDurationPerJobLimit", ("time limit %s is above QoS %s's MaxWall %s")
          :format(fmt_minutes(req.time_limit), q.name, fmt_minutes(q.max_wall)))
      end
    end
    return errors
  end

  M.new = function(d) return new(tables.merged(defaults, d)) end
  return M
end

return new({})
