--- obleth.util.text — cutting text without breaking it.
local M = {}

--- The longest prefix of s of at most max bytes that ends on a UTF-8 character boundary (a cut never
--- leaves half a character; s that is not valid UTF-8 is cut after its last whole character that fits).
---@param s string
---@param max integer bytes, >= 0
---@return string prefix, boolean cut true when s was longer
function M.cut_utf8(s, max)
  if #s <= max then return s, false end
  local n = max
  -- back up over continuation bytes (10xxxxxx) so the cut falls before a character's first byte
  while n > 0 and n + 1 <= #s and s:byte(n + 1) >= 0x80 and s:byte(n + 1) < 0xC0 do n = n - 1 end
  local p = s:sub(1, n)
  -- the prefix's last character may itself be incomplete only if s was not valid UTF-8: drop bad tails
  while #p > 0 and not utf8.len(p) do p = p:sub(1, -2) end
  return p, true
end

--- s with every byte that is not part of a valid UTF-8 character replaced by U+FFFD, cut to at most
--- max bytes (then ending in "…"): a string a client sent, safe to put in an answer or a log line.
---@param s string
---@param max integer|nil bytes (default 1024)
---@return string
function M.printable(s, max)
  max = max or 1024
  if not utf8.len(s) then
    local out, i = {}, 1
    while i <= #s do
      local ok, code = pcall(utf8.codepoint, s, i)
      if ok and code then
        local ch = utf8.char(code)
        out[#out + 1] = ch
        i = i + #ch
      else
        out[#out + 1] = "\u{FFFD}"
        i = i + 1
      end
    end
    s = table.concat(out)
  end
  local p, cut = M.cut_utf8(s, max)
  return cut and (p .. "…") or p
end

return M
