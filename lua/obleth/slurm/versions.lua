--- The slurmrestd API versions obleth knows, newest first: the one list.
--
-- The host's transport (`obleth.slurm.rest`, host/slurm.c) reads it when it loads and negotiates
-- among these (the newest both sides know); `obleth.slurm.submit`, the normalizer and the settings
-- check read it too, and every message that names the versions is made from it. A version is
-- added here once its fields are read from SchedMD's data_parser (src/plugins/data_parser/vX):
-- docs/slurm-versions.md says what changed in each.
-- Pure data; loads under plain Lua 5.4 as well as in the host.
local M = {}

---@type string[] newest first
M.known = { "v0.0.46", "v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38" }

--- "v0.0.38 to v0.0.46": the oldest and the newest known.
---@return string
function M.range()
  return ("%s to %s"):format(M.known[#M.known], M.known[1])
end

--- The number of a version ("v0.0.45" -> 45), or nil when it is not of that form.
---@param v any
---@return integer|nil
function M.number(v)
  return type(v) == "string" and math.tointeger(tonumber(v:match("^v0%.0%.(%d+)$"))) or nil
end

return M
