--- Slurm time limits: parsing the forms sbatch(1) --time accepts, and printing.
-- Source: sbatch(1) "--time": "minutes", "minutes:seconds", "hours:minutes:seconds",
-- "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds"; Slurm
-- rounds seconds up to the next whole minute (time_str2mins in src/common/parse_time.c).
--
-- Errors: a leaf parser (docs/errors.md): its functions return nil, "message" for bad input,
-- and the caller wraps it into {code, message, field}. spec/unit/error_shape_spec.lua holds this list.
local M = {}

-- sbatch's --time forms, tried in order: the pattern and the field each capture is
local FORMS = {
  { "^(%d+)%-(%d+):(%d+):(%d+)$", { "d", "h", "m", "s" } },
  { "^(%d+)%-(%d+):(%d+)$", { "d", "h", "m" } },
  { "^(%d+)%-(%d+)$", { "d", "h" } },
  { "^(%d+):(%d+):(%d+)$", { "h", "m", "s" } },
  { "^(%d+):(%d+)$", { "m", "s" } },
  { "^(%d+)$", { "m" } },
}

--- Parse a time limit into whole minutes.
---@param s string|integer e.g. "90", "1:30:00", "2-00", "0-12:00:00"; an integer is minutes
---@return integer|nil minutes, string|nil err (says which forms are accepted)
function M.parse_minutes(s)
  if math.type(s) == "integer" then
    if s <= 0 then return nil, "a time limit must be at least 1 minute" end
    return s
  end
  if type(s) ~= "string" then return nil, "a time limit must be a string like 1:00:00 or a number of minutes" end
  local t = s:match("^%s*(.-)%s*$")
  if t:upper() == "UNLIMITED" or t:upper() == "INFINITE" or t == "-1" then
    return nil, "UNLIMITED is not accepted: give a finite time limit"
  end
  local v
  for _, f in ipairs(FORMS) do
    local caps = { t:match(f[1]) }
    if caps[1] then
      v = {}
      for i, name in ipairs(f[2]) do v[name] = caps[i] end
      break
    end
  end
  if not v then
    return nil, ("%q is not a time limit: expected MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"):format(s)
  end
  local d, h, m, sec = v.d, v.h, v.m, v.s
  for _, part in ipairs({ d or "", h or "", m or "", sec or "" }) do
    if #part > 9 then return nil, ("%q is not a time limit: a field is too long"):format(s) end
  end
  d, h, m, sec = tonumber(d or 0), tonumber(h or 0), tonumber(m or 0), tonumber(sec or 0)
  if (h and h >= 24 and d > 0) or (m >= 60 and (h > 0 or d > 0)) or sec >= 60 then
    return nil, ("%q is not a time limit: a field is out of range"):format(s)
  end
  local total = ((d * 24 + h) * 60 + m) * 60 + sec
  local minutes = math.tointeger((total + 59) // 60)
  if minutes <= 0 then return nil, "a time limit must be at least 1 minute" end
  if minutes > 365 * 24 * 60 then return nil, ("%q is longer than a year"):format(s) end
  return minutes
end

--- Format minutes as Slurm prints them: "MM:SS" never; "D-HH:MM:SS" or "HH:MM:SS".
---@param minutes number|nil minutes, math.huge for UNLIMITED
---@return string
function M.format_minutes(minutes)
  if minutes == nil then return "-" end
  if minutes == math.huge then return "UNLIMITED" end
  minutes = math.floor(minutes)
  local d, rem = minutes // 1440, minutes % 1440
  local h, m = rem // 60, rem % 60
  if d > 0 then return ("%d-%02d:%02d:00"):format(d, h, m) end
  return ("%d:%02d:00"):format(h, m)
end

return M
