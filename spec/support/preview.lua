-- Reading a launch preview's answer in specs (docs/launch.md): the fit of one partition, the error
-- on one field, and whether a list holds a value.
local M = {}

--- The partition fit named name in pv.partitions, or nil.
function M.by_partition(pv, name)
  for _, f in ipairs(pv.partitions) do if f.partition == name then return f end end
  return nil
end

--- True when list holds x.
function M.has(list, x)
  for _, v in ipairs(list or {}) do if v == x then return true end end
  return false
end

--- The first of pv.errors on field, or nil.
function M.error_for(pv, field)
  for _, e in ipairs(pv.errors or {}) do if e.field == field then return e end end
  return nil
end

return M
