-- luacheck: std lua54
-- GRES strings (obleth.slurm.gres) on any text: never a raise; counts are whole and >= 0.
local gres = require "obleth.slurm.gres"

return function(data)
  local half = #data // 2
  local conf, used = gres.parse(data:sub(1, half)), gres.parse(data:sub(half + 1))
  for _, t in ipairs({ conf, used, gres.free(conf, used) }) do
    for _, e in pairs(t) do
      assert(type(e.total) == "number" and e.total >= 0, "total")
      for _, n in pairs(e.by_type) do assert(type(n) == "number" and n >= 0, "by_type") end
    end
  end
  assert(gres.gpus(data) >= 0)
end
