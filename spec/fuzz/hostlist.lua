-- luacheck: std lua54
-- Slurm hostlists (obleth.util.hostlist) on any text: a list or nil, err; never a raise,
-- never more names than the budget; a list compresses and expands back to the same names.
local hostlist = require "obleth.util.hostlist"

return function(data)
  local budget = { left = 5000 }
  local l, err = hostlist.expand(data, budget)
  if not l then
    assert(type(err) == "string", "error is a message")
    return
  end
  assert(#l <= 5000 and budget.left >= 0, "over the budget")
  if #l > 0 and #l <= 500 then
    local again = hostlist.expand(hostlist.compress(l))
    local seen = {}
    for _, n in ipairs(l) do seen[n] = true end
    for _, n in ipairs(again or {}) do assert(seen[n], "compress/expand invented " .. n) end
  end
end
