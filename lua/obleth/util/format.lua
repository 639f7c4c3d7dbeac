--- Plain-text tables and JSON-safe values for the command-line tools.
local tables = require "obleth.util.tables"

local M = {}

--- A copy of v that obleth.util.json can encode: math.huge → "UNLIMITED", sets stay objects,
--- lists marked by obleth.util.tables.array stay lists ([] when empty), functions and userdata
--- (other than cjson.null) dropped.
function M.jsonable(v, seen)
  local t = type(v)
  if t == "number" then
    if v == math.huge then return "UNLIMITED" end
    if v ~= v then return nil end
    return v
  elseif t == "table" then
    seen = seen or {}
    if seen[v] then return nil end
    seen[v] = true
    local out = setmetatable({}, getmetatable(v) == tables.ARRAY and tables.ARRAY or nil)
    for k, x in pairs(v) do
      if type(k) ~= "function" then out[k] = M.jsonable(x, seen) end
    end
    seen[v] = nil
    return out
  elseif t == "function" or t == "thread" then
    return nil
  end
  return v
end

--- "1h 2m", "3d 4h", "45s"
function M.duration(s)
  if not s then return "-" end
  local neg = s < 0
  s = math.abs(math.floor(s))
  local out
  if s >= 86400 then out = ("%dd %dh"):format(s // 86400, s % 86400 // 3600)
  elseif s >= 3600 then out = ("%dh %dm"):format(s // 3600, s % 3600 // 60)
  elseif s >= 60 then out = ("%dm %ds"):format(s // 60, s % 60)
  else out = ("%ds"):format(s) end
  return neg and ("-" .. out .. " (past)") or out
end

--- Render rows (arrays of strings) under headers, columns padded.
function M.table(headers, rows)
  local w = {}
  for i, h in ipairs(headers) do w[i] = #h end
  for _, r in ipairs(rows) do
    for i = 1, #headers do
      r[i] = tostring(r[i] == nil and "-" or r[i])
      if #r[i] > w[i] then w[i] = #r[i] end
    end
  end
  local lines = {}
  local function line(r)
    local cells = {}
    for i = 1, #headers do cells[i] = r[i] .. (" "):rep(w[i] - #r[i]) end
    lines[#lines + 1] = table.concat(cells, "  "):gsub("%s+$", "")
  end
  line(headers)
  for _, r in ipairs(rows) do line(r) end
  return table.concat(lines, "\n")
end

local function setstr(s, none)
  if s == nil then return none or "ALL" end
  local k = {}
  for n in pairs(s) do k[#k + 1] = n end
  table.sort(k)
  return #k > 0 and table.concat(k, ",") or "-"
end

local function gpus_str(g)
  if not g or not g.gpu then return "-" end
  local parts = {}
  for ty, n in pairs(g.gpu.by_type or {}) do parts[#parts + 1] = (ty ~= "" and (ty .. ":") or "") .. n end
  table.sort(parts)
  return #parts > 0 and table.concat(parts, ",") or tostring(g.gpu.total or 0)
end
M.gpus_str = gpus_str

local function state_str(st)
  if not st then return "?" end
  local flags = {}
  for f in pairs(st.flags or {}) do flags[#flags + 1] = f end
  table.sort(flags)
  return st.base .. (#flags > 0 and ("+" .. table.concat(flags, "+")) or "")
end
M.state_str = state_str

--- Partitions with what tells them apart (overlay partitions on the same nodes differ only here):
--- state, nodes, idle/total, MaxTime, DefaultTime, MaxNodes, PriorityTier, the partition's own QoS,
--- AllowGroups, Hidden, and the account and QoS lists. `*` marks the default partition.
function M.partitions_table(parts, nodes)
  local tf = require "obleth.util.timefmt"
  local by_name = {}
  for _, n in ipairs(nodes or {}) do by_name[n.name] = n end
  local rows = {}
  local function count(n) return n == math.huge and "UNLIMITED" or (n and tostring(n)) or "-" end
  for _, p in ipairs(parts) do
    local idle, total = 0, 0
    for _, nn in ipairs(p.node_list or {}) do
      total = total + 1
      local n = by_name[nn]
      if n and n.idle then idle = idle + 1 end
    end
    local hidden = p.hidden == true and "yes" or (p.hidden == false and "no") or "?"
    rows[#rows + 1] = { p.name .. (p.default and "*" or ""), p.state or "-", p.nodes or "-",
      ("%d/%d"):format(idle, total),
      tf.format_minutes(p.max_time), p.default_time and tf.format_minutes(p.default_time) or "-",
      count(p.max_nodes), count(p.priority_tier), p.qos or "-", setstr(p.allowed_groups), hidden,
      setstr(p.allowed_accounts), setstr(p.denied_accounts, "-"),
      setstr(p.allowed_qos), setstr(p.denied_qos, "-") }
  end
  return M.table({ "PARTITION", "STATE", "NODES", "IDLE/TOTAL", "MAX TIME", "DEFAULT TIME", "MAX NODES", "TIER",
    "PART QOS", "GROUPS", "HIDDEN", "ACCOUNTS", "DENY ACCOUNTS", "QOS", "DENY QOS" }, rows)
end

--- Nodes with state, CPUs, memory, GPUs by type and features.
function M.nodes_table(nodes)
  local rows = {}
  for _, n in ipairs(nodes) do
    local feats = {}
    for f in pairs(n.features or {}) do feats[#feats + 1] = f end
    table.sort(feats)
    rows[#rows + 1] = { n.name, state_str(n.state), n.idle and "yes" or "no",
      ("%s/%s"):format(n.alloc_cpus or 0, n.cpus or "?"), n.memory and (n.memory .. " MiB") or "-",
      gpus_str(n.gres), table.concat(feats, ","), n.reason or "" }
  end
  return M.table({ "NODE", "STATE", "IDLE", "CPUS(A/T)", "MEMORY", "GPUS", "FEATURES", "REASON" }, rows)
end

--- Jobs: id, name, user, partition, state, reason, nodes, time limit.
function M.jobs_table(jobs)
  local tf = require "obleth.util.timefmt"
  local rows = {}
  for _, j in ipairs(jobs) do
    rows[#rows + 1] = { j.id, j.name or "", j.user or "", j.partition or "", state_str(j.state),
      j.reason or "", j.nodes or "", tf.format_minutes(j.time_limit) }
  end
  return M.table({ "JOBID", "NAME", "USER", "PARTITION", "STATE", "REASON", "NODES", "TIME LIMIT" }, rows)
end

--- key: value lines for one record (nested tables shown inline).
function M.kv(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    if type(v) == "table" then
      if v.base then v = state_str(v)
      elseif k == "exit_code" then v = tostring(v.code) .. (v.signal and (" (signal " .. v.signal .. ")") or "")
      else
        -- obleth.util.json keeps an empty list a list ([]; cjson alone writes {})
        local ok, enc = pcall(require("obleth.util.json").encode, M.jsonable(v))
        v = ok and enc or tostring(v)
      end
    end
    out[#out + 1] = ("%-20s %s"):format(k, tostring(v))
  end
  return table.concat(out, "\n")
end

return M
