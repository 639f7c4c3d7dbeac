-- luacheck: std lua54
-- Slurm time limits (obleth.util.timefmt) on any text: whole minutes >= 1 or nil, err; never a
-- raise; what parses prints and parses back to the same minutes.
local timefmt = require "obleth.util.timefmt"

return function(data)
  local m, err = timefmt.parse_minutes(data)
  if not m then
    assert(type(err) == "string", "error is a message")
    return
  end
  assert(math.type(m) == "integer" and m >= 1, "minutes")
  local again = timefmt.parse_minutes(timefmt.format_minutes(m))
  assert(again == m, ("round trip %d -> %s -> %s"):format(m, timefmt.format_minutes(m), tostring(again)))
end
