--- Live updates for the dashboard (GET /api/v1/events, docs/dashboard.md):
-- server-sent events naming what changed, so the page refetches just that.
local errors = require "obleth.api.errors"
local cjson = require "cjson"

local M = {}

--- Seconds between keep-alive comments (OBLETH_EVENTS_KEEPALIVE overrides, for tests).
M.KEEPALIVE = 15
--- Longest wait without looking whether the client left (a closed stream is freed within this).
M.CHECK = 5

local HEADERS = {
  ["Content-Type"] = "text/event-stream; charset=utf-8", ["Cache-Control"] = "no-store",
  ["X-Content-Type-Options"] = "nosniff", ["Referrer-Policy"] = "no-referrer", ["X-Accel-Buffering"] = "no",
}

--- The text of one `change` event.
function M.format(ev)
  return "event: change\ndata: " .. cjson.encode({ topic = ev.topic, model_id = ev.model_id }) .. "\n\n"
end

local function stream(ctx)
  local app, res = ctx.app, ctx.res
  if ctx.req.method == "HEAD" or not res then
    local h = {}
    for k, v in pairs(HEADERS) do h[k] = v end
    return 200, "", h
  end
  local sub, err = app.events:subscribe()
  if not sub then
    local st, body = errors.fail(503, "too_many_streams", err.message)
    return st, body, { ["Retry-After"] = "5" }
  end
  -- a stream opened with the session cookie ends with its session (sign-out, expiry, another token)
  sub.owner = ctx.session_id
  local loop = require "obleth.loop"
  local keepalive = tonumber(os.getenv("OBLETH_EVENTS_KEEPALIVE") or "") or M.KEEPALIVE
  res:start(200, HEADERS)
  -- `ready` first: after a reconnect the page refetches everything once
  local ok = res:write("retry: 2000\nevent: ready\ndata: {}\n\n")
  local next_keep = loop.monotonic() + keepalive
  while ok and not app.draining and not res:closed() and not sub.closed
    and not (ctx.session_id and not app.sessions:check(ctx.session_id, app._token)) do
    local list = sub:next(math.max(0, math.min(M.CHECK, next_keep - loop.monotonic())))
    if #list > 0 then
      local parts = {}
      for i, ev in ipairs(list) do parts[i] = M.format(ev) end
      ok = res:write(table.concat(parts))
    elseif loop.monotonic() >= next_keep then
      ok = res:write(": keepalive\n\n")
      next_keep = loop.monotonic() + keepalive
    end
  end
  app.events:unsubscribe(sub)
  if not res:closed() then res:finish() end
end

M.routes = {
  { "GET", "/api/v1/events", stream, stream = true, tag = "dashboard",
    summary = "Server-sent events: `change` {topic, model_id?} after every write, `: keepalive` every 15 s" },
}

return M
