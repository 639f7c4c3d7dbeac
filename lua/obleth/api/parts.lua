--- Large JSON answers produced in parts: a JSON object whose one big array member is made and sent
--- a few items at a time, each part handed to the connection before the next is made (res:write
--- waits for that, and the event loop serves other clients meanwhile). So an answer of thousands of
--- replicas never holds `obleth serve`'s one loop for more than one part's worth of work.
--- Used by GET /api/v1/provisioner/snapshot and GET /api/v1/replicas (docs/api.md, "Large answers").
local json = require "obleth.util.json"

local M = {}

--- Elements per part: a snapshot's model costs about 0.3 ms of store reads and encoding, so a part about 3 ms.
M.PART_ITEMS = 10

--- The headers every API answer carries (obleth.api's _reply), and JSON's type.
M.HEADERS = { ["Content-Type"] = "application/json", ["Cache-Control"] = "no-store",
  ["X-Content-Type-Options"] = "nosniff", ["Referrer-Policy"] = "no-referrer" }

--- Answer `o.head` with `o.key` set to the array of o.make(o.src[i]) for every i (with `o.many`, each
--- make returns a list of elements, flattened in order), sent in parts of about `o.per` (M.PART_ITEMS)
--- elements through ctx.res (chunked transfer). Without ctx.res (a handler called directly, in a
--- spec) the whole document is returned instead, as a handler's 200, doc.
---@param ctx table the API context (ctx.res: the response object)
---@param o {head: table, key: string, src: table, make: function, headers: table|nil, per: integer|nil,
---  many: boolean|nil} head: the object's other members; headers: beside M.HEADERS
---@return integer|table status, table|nil doc, table|nil headers — {status, streamed = true} once sent in parts
function M.answer(ctx, o)
  local per, head, key, src, make = o.per or M.PART_ITEMS, o.head, o.key, o.src, o.make
  local res = ctx.res
  if not res then
    local arr = json.array()
    for _, s in ipairs(src) do
      if o.many then
        for _, e in ipairs(make(s)) do arr[#arr + 1] = e end
      else
        arr[#arr + 1] = make(s)
      end
    end
    head[key] = arr
    return 200, head, o.headers
  end
  local h = {}
  for k, v in pairs(M.HEADERS) do h[k] = v end
  for k, v in pairs(o.headers or {}) do h[k] = v end
  local open = json.encode(head)
  -- head is an object: open it up for the array member
  open = (open == "{}" and "{" or open:sub(1, -2) .. ",") .. json.encode(key) .. ":["
  if not res:start(200, h) then return { status = 499, streamed = true } end
  if not res:write(open) then return { status = 499, streamed = true } end
  local parts, sent, n = {}, 0, #src
  for i = 1, n do
    if o.many then
      for _, e in ipairs(make(src[i])) do parts[#parts + 1] = json.encode(e) end
    else
      parts[#parts + 1] = json.encode(make(src[i]))
    end
    if (#parts >= per or i == n) and #parts > 0 then
      local text = table.concat(parts, ",")
      if sent > 0 then text = "," .. text end
      sent = sent + #parts
      parts = {}
      if not res:write(text) then return { status = 499, streamed = true } end
    end
  end
  res:write("]}")
  res:finish()
  return { status = 200, streamed = true }
end

return M
