--- Validation before submit: what Slurm would accept but never run.
-- Without EnforcePartLimits Slurm accepts a job whose account the partition
-- does not allow, whose QoS the partition denies, or whose time limit is above
-- MaxTime, and the job pends forever (AccountNotAllowed, QOSNotAllowed,
-- PartitionTimeLimit). These checks turn each into a form-field error.
--
-- Facts use the shapes of obleth.slurm.normalize: partitions {name, max_time
-- (minutes, math.huge), allowed_accounts, denied_accounts, allowed_qos,
-- denied_qos (sets; nil = no restriction)}, associations {account, user,
-- partition|nil, qos (set; empty = no restriction)}, qos {name, max_wall
-- (minutes|nil)}.
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

  --- Check the Slurm-side settings of a launch.
  ---@param req {partition: string, account: string|nil, qos: string|nil, time_limit: integer|nil} minutes
  ---@param facts {partitions: table[]|table<string, table>, associations: table[], qos: table[]|nil}
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

    local assocs = {}
    if req.account then
      assocs = assocs_for(facts.associations, req.account, partition.name)
      local any = false
      for _, a in ipairs(facts.associations or {}) do if a.account == req.account then any = true end end
      if not any then
        err("account", "no_association", ("you have no association with account %q"):format(req.account))
      elseif #assocs == 0 then
        err("account", "no_association", ("account %q has no association for partition %s")
          :format(req.account, partition.name))
      elseif not M.partition_takes_account(partition, req.account) then
        err("account", "AccountNotAllowed", ("partition %s does not take account %q (the job would pend "
          .. "forever: AccountNotAllowed)"):format(partition.name, req.account))
      end
    end

    if req.qos then
      if facts.qos and not qos_by_name[req.qos] then
        err("qos", "unknown_qos", ("QoS %q does not exist"):format(req.qos))
      else
        if #assocs > 0 then
          local allowed = false
          for _, a in ipairs(assocs) do
            if not a.qos or next(a.qos) == nil or a.qos[req.qos] then allowed = true end
          end
          if not allowed then
            err("qos", "qos_not_in_association", ("account %q may not use QoS %q"):format(req.account, req.qos))
          end
        end
        if not M.partition_takes_qos(partition, req.qos) then
          err("qos", "QOSNotAllowed", ("partition %s does not take QoS %q (the job would pend forever: "
            .. "QOSNotAllowed)"):format(partition.name, req.qos))
        end
      end
    end

    if req.time_limit then
      local max = partition.max_time
      if max and req.time_limit > max then
        err("time_limit", "PartitionTimeLimit", ("time limit %s is above partition %s's MaxTime %s (the job "
          .. "would pend forever: PartitionTimeLimit)"):format(fmt_minutes(req.time_limit), partition.name,
          fmt_minutes(max)))
      end
      local q = req.qos and qos_by_name[req.qos]
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
