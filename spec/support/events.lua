-- Read GET /api/v1/events (server-sent events) in a task of its own, for specs.
--   local s = events.open(srv, headers?)  -- s.status, s.headers, s.events ({event, data, at}), s.comments
--   local ev, index = events.wait(s, "replicas", model_id?, after_index?, secs?)
--   s.resp:close()
local http = require "obleth.http"
local loop = require "obleth.loop"
local cjson = require "cjson"

local M = {}

-- An event-stream reader in its own task: events (with the monotonic time each arrived) and comments.
function M.open(srv, headers)
  local h = { Authorization = "Bearer " .. srv.token, Accept = "text/event-stream" }
  for k, v in pairs(headers or {}) do h[k] = v end
  if h.Authorization == false then h.Authorization = nil end
  local resp, err = http.request { url = srv.base .. "/api/v1/events", headers = h, stream = true, timeout = 900 }
  if not resp then return nil, err end
  local s = { resp = resp, events = {}, comments = 0, status = resp.status, headers = resp.headers, done = false }
  if resp.status ~= 200 then return s end
  loop.spawn(function()
    local buf = ""
    while true do
      local chunk = resp:read()
      if not chunk then break end
      buf = buf .. chunk
      while true do
        local block, rest = buf:match("^(.-)\n\n(.*)$")
        if not block then break end
        buf = rest
        local ev = { at = loop.monotonic() }
        for line in (block .. "\n"):gmatch("([^\n]*)\n") do
          if line:sub(1, 1) == ":" then s.comments = s.comments + 1 end
          local k, v = line:match("^(%w+): ?(.*)$")
          if k then ev[k] = v end
        end
        if ev.event then
          ev.data = ev.data and cjson.decode(ev.data)
          s.events[#s.events + 1] = ev
        end
      end
    end
    s.done = true
  end)
  return s
end

-- Wait (briefly polling) for an event matching topic / model_id after index `from`.
function M.wait(s, topic, model_id, from, secs)
  local t_end = loop.monotonic() + (secs or 5)
  repeat
    for i = (from or 0) + 1, #s.events do
      local e = s.events[i]
      if e.event == "change" and e.data.topic == topic and (model_id == nil or e.data.model_id == model_id) then
        return e, i
      end
    end
    loop.sleep(0.01)
  until loop.monotonic() > t_end
  local seen = {}
  for _, e in ipairs(s.events) do seen[#seen + 1] = e.event .. (e.data and cjson.encode(e.data) or "") end
  error(("no change %s/%s within %s s; saw: %s"):format(topic, tostring(model_id), secs or 5, table.concat(seen, " ")), 2)
end

return M
