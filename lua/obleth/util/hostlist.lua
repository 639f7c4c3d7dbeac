--- Slurm hostlist expressions: "n[0-2,5],gpu01" <-> {"n0","n1","n2","n5","gpu01"}.
--
-- Grammar handled (the subset slurmctld emits and accepts):
--   list    := item ("," item)*            commas inside [] do not split
--   item    := text ("[" ranges "]" text)*  several bracket groups multiply out
--   ranges  := range ("," range)*
--   range   := N | N "-" M                  the width of N is kept ("01-03" -> 01,02,03)
-- Pure functions, no I/O.
--
-- Errors: a leaf parser (docs/errors.md): its functions return nil, "message" for bad input,
-- and the caller wraps it into {code, message, field}. spec/unit/error_shape_spec.lua holds this list.
local M = {}

--- Largest expansion of one value we agree to produce; a larger one is refused as input error.
M.MAX_HOSTS = 1000000

--- Names one slurmrestd answer may expand in all (a budget shared by its values, so that
-- 20 partitions of n[000000-999999] cost 200,000 names, not 20 million). The largest
-- clusters have tens of thousands of nodes; partitions overlap.
M.ANSWER_HOSTS = 200000

-- Range bounds longer than this do not fit a Lua integer (2^63 has 19 digits).
local MAX_DIGITS = 18

--- Split s at the commas outside `open`..`close` pairs: Slurm's list rule, shared by hostlists
--- ("n[1,3],m" → "n[1,3]", "m") and GRES strings ("gpu:2(IDX:0,1),mps:100" → two entries).
---@param s string
---@param open string one character, e.g. "[" or "("
---@param close string its pair, "]" or ")"
---@return string[]|nil parts nil when a close comes before its open
function M.split_top(s, open, close)
  local parts, depth, start = {}, 0, 1
  for i = 1, #s do
    local c = s:sub(i, i)
    if c == open then
      depth = depth + 1
    elseif c == close then
      depth = depth - 1
      if depth < 0 then return nil end -- a close with no open before it
    elseif c == "," and depth == 0 then
      parts[#parts + 1] = s:sub(start, i - 1)
      start = i + 1
    end
  end
  parts[#parts + 1] = s:sub(start)
  return parts
end

-- Expands one item (may hold several bracket groups) into `out`.
local function _expand_item(item, out, budget)
  local pre, body, rest = item:match("^([^%[]*)%[([^%]]*)%](.*)$")
  if not pre then
    if item:find("[%[%]]") then return nil, "unbalanced brackets in " .. item end
    if item ~= "" then
      if #out >= budget then return nil, "hostlist too large" end
      out[#out + 1] = item
    end
    return true
  end
  local tails = {}
  local ok, err = _expand_item(rest, tails, budget)
  if not ok then return nil, err end
  if rest == "" then tails = { "" } end
  for _, r in ipairs(M.split_top(body, "[", "]") or { body }) do
    local lo, hi = r:match("^%s*(%d+)%s*%-%s*(%d+)%s*$")
    if not lo then
      lo = r:match("^%s*(%d+)%s*$")
      hi = lo
    end
    if not lo then return nil, "bad range '" .. r .. "' in " .. item end
    if #lo > MAX_DIGITS or #hi > MAX_DIGITS then return nil, "hostlist too large: number too long in " .. item end
    local a, b, width = tonumber(lo), tonumber(hi), #lo
    if b < a then return nil, "descending range '" .. r .. "' in " .. item end
    -- count * #tails can pass 2^63 (a range of 10^17 times a few tails) and wrap: divide instead
    local count, room = b - a + 1, budget - #out
    if count > room or (#tails > 0 and count > room // #tails) then return nil, "hostlist too large" end
    for n = a, b do
      local num = string.format("%0" .. width .. "d", n)
      for _, t in ipairs(tails) do
        out[#out + 1] = pre .. num .. t
      end
    end
  end
  return true
end

--- Expand a hostlist expression.
---@param expr string|nil hostlist such as "n[0-2,5],gpu01"; nil/"" give {}
---@param budget {left: integer}|nil names left for the whole answer this value belongs to
---  (see `ANSWER_HOSTS`); the expansion is taken from it; over it gives nil, "hostlist too large"
---@return string[]|nil names in order, duplicates kept
---@return string|nil err  message for a malformed expression
function M.expand(expr, budget)
  if expr == nil or type(expr) ~= "string" then return {} end
  if expr == "None assigned" then return {} end
  expr = expr:gsub("%s+", "")
  if expr == "" or expr == "(null)" then return {} end
  local out = {}
  local cap = M.MAX_HOSTS
  if budget and budget.left < cap then cap = budget.left end
  local items = M.split_top(expr, "[", "]")
  if not items then return nil, "unbalanced brackets in " .. expr end
  for _, item in ipairs(items) do
    local ok, err = _expand_item(item, out, cap)
    if not ok then return nil, err end
  end
  if budget then budget.left = budget.left - #out end
  return out
end

--- Compress a list of host names into a hostlist expression.
-- Names sharing a prefix and a numeric suffix of the same width are merged
-- ("n01","n02","n03" -> "n[01-03]"); groups keep the order in which their
-- prefix first appears; numbers inside a group are sorted, duplicates dropped.
---@param list string[]
---@return string expression ("" for an empty list)
function M.compress(list)
  local groups, order = {}, {}
  for _, name in ipairs(list or {}) do
    local pre, num = name:match("^(.-)(%d+)$")
    if num and #num > MAX_DIGITS then pre, num = nil, nil end -- no integer holds it: a plain name
    local key = pre and (pre .. "\0" .. #num) or ("\1" .. name)
    local g = groups[key]
    if not g then
      g = { pre = pre, width = num and #num, nums = {}, seen = {}, plain = not pre and name }
      groups[key] = g
      order[#order + 1] = key
    end
    if pre then
      local n = tonumber(num)
      if not g.seen[n] then
        g.seen[n] = true
        g.nums[#g.nums + 1] = n
      end
    end
  end
  local parts = {}
  for _, key in ipairs(order) do
    local g = groups[key]
    if g.plain then
      parts[#parts + 1] = g.plain
    else
      table.sort(g.nums)
      local fmt = "%0" .. g.width .. "d"
      local ranges, i = {}, 1
      while i <= #g.nums do
        local j = i
        while j < #g.nums and g.nums[j + 1] == g.nums[j] + 1 do j = j + 1 end
        if j == i then
          ranges[#ranges + 1] = fmt:format(g.nums[i])
        else
          ranges[#ranges + 1] = fmt:format(g.nums[i]) .. "-" .. fmt:format(g.nums[j])
        end
        i = j + 1
      end
      if #g.nums == 1 then
        parts[#parts + 1] = g.pre .. ranges[1]
      else
        parts[#parts + 1] = g.pre .. "[" .. table.concat(ranges, ",") .. "]"
      end
    end
  end
  return table.concat(parts, ",")
end

return M
