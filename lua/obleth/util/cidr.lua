--- IP addresses and CIDR ranges (pure Lua): which addresses a trusted proxy is believed from
-- (OBLETH_AUTH_PROXY_FROM, docs/access.md).
--
--   local set, err = cidr.parse_list("127.0.0.1, 10.0.0.0/8, ::1, fd00::/8")
--   cidr.contains(set, "10.1.2.3") --> true
--
-- An IPv4-mapped IPv6 address (::ffff:10.1.2.3) is its IPv4 address.
local M = {}

-- 4 bytes of a dotted IPv4 address, or nil.
local function _v4(s)
  local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return nil end
  local out = {}
  for i, x in ipairs({ a, b, c, d }) do
    local n = tonumber(x)
    if #x > 3 or n > 255 then return nil end
    out[i] = n
  end
  return string.char(table.unpack(out))
end

-- 16 bytes of an IPv6 address (with a dotted IPv4 tail allowed), or nil.
local function _v6(s)
  if not s:find(":", 1, true) or s:find("[^%x:%.]") then return nil end
  local tail = ""
  local v4 = s:match(":(%d+%.%d+%.%d+%.%d+)$")
  if v4 then
    tail = _v4(v4)
    if not tail then return nil end
    s = s:sub(1, #s - #v4) .. "0:0"
  end
  local head, rest = s, nil
  local dbl = s:find("::", 1, true)
  if dbl then
    head, rest = s:sub(1, dbl - 1), s:sub(dbl + 2)
    if rest:find("::", 1, true) then return nil end
  end
  local function groups(part)
    local g = {}
    if part == "" then return g end
    for x in (part .. ":"):gmatch("([^:]*):") do
      if x == "" or #x > 4 then return nil end
      g[#g + 1] = tonumber(x, 16)
    end
    return g
  end
  local hg, rg = groups(head), rest and groups(rest) or {}
  if not hg or not rg then return nil end
  local n = #hg + #rg
  if (dbl and n > 7) or (not dbl and n ~= 8) then return nil end
  local all = {}
  for _, x in ipairs(hg) do all[#all + 1] = x end
  for _ = 1, 8 - n do all[#all + 1] = 0 end
  for _, x in ipairs(rg) do all[#all + 1] = x end
  local bytes = {}
  for i = 1, 8 do bytes[#bytes + 1] = string.char(all[i] >> 8, all[i] & 255) end
  local out = table.concat(bytes)
  if tail ~= "" then out = out:sub(1, 12) .. tail end
  return out
end

local MAPPED = ("\0"):rep(10) .. "\255\255"

--- The bytes of an address (4 for IPv4 and IPv4-mapped IPv6, 16 for IPv6), or nil.
---@param s string
---@return string|nil
function M.address(s)
  if type(s) ~= "string" then return nil end
  s = s:gsub("%%.*$", "") -- a zone (fe80::1%eth0)
  local b = _v4(s) or _v6(s)
  if b and #b == 16 and b:sub(1, 12) == MAPPED then b = b:sub(13) end
  return b
end

--- One range "addr" or "addr/prefix".
---@return {bytes: string, bits: integer}|nil range, {code: "invalid", message: string}|nil err
function M.parse(s)
  local a, p = s:match("^%s*([^/%s]+)/(%d+)%s*$")
  if not a then a = s:match("^%s*(%S+)%s*$") end
  local b = a and M.address(a)
  if not b then return nil, { code = "invalid", message = ("%q is not an IP address or CIDR range"):format(s) } end
  local max = #b * 8
  local bits = p and tonumber(p) or max
  if a:find(":", 1, true) and #b == 4 and p then bits = bits - 96 end -- ::ffff:a.b.c.d/104
  if bits < 0 or bits > max then
    return nil, { code = "invalid", message = ("%q: the prefix length must be 0 to %d"):format(s, max) }
  end
  return { bytes = b, bits = bits }
end

--- A comma- or space-separated list of ranges.
---@return table[]|nil ranges, {code: "invalid", message: string}|nil err
function M.parse_list(s)
  local out = {}
  for item in tostring(s or ""):gmatch("[^,%s]+") do
    local r, err = M.parse(item)
    if not r then return nil, err end
    out[#out + 1] = r
  end
  return out
end

--- Is the address in one of the ranges?
---@param ranges table[] from parse_list
---@param addr string
---@return boolean
function M.contains(ranges, addr)
  local b = M.address(addr)
  if not b then return false end
  for _, r in ipairs(ranges) do
    if #r.bytes == #b then
      local full, rem = r.bits // 8, r.bits % 8
      if b:sub(1, full) == r.bytes:sub(1, full) then
        if rem == 0 then return true end
        local mask = (0xFF << (8 - rem)) & 0xFF
        if (b:byte(full + 1) & mask) == (r.bytes:byte(full + 1) & mask) then return true end
      end
    end
  end
  return false
end

return M
