--- obleth.serve.dispatch — which part of `obleth serve` answers a path (pure; obleth.serve's
-- handler applies it): `/v1`, `/v1/...` and `/metrics` the router, `/api` and `/api/...` the
-- Management API, `/healthz` the readiness check (a load balancer's), anything else the dashboard's
-- files. A path that is not canonical is refused
-- before any part sees it.
local M = {}

--- True when path is canonical: it starts with "/", and no segment is empty,
--- "." or ".." (percent-encoded ones included) or hides a "/" or "\".
--- Anything else is refused before routing, so "//api/..." cannot dodge the
--- admin check and "/v1/../health" cannot reach an engine path outside /v1.
---@param path string
---@return boolean
function M.canonical_path(path)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then return false end
  if path == "/" then return true end
  -- the common case, decided by one scan: no "%", ".", "\\" or empty segment
  if not path:find("[%%%.\\%z]") and not path:find("//", 1, true) then return true end
  local body = path:sub(2)
  if body:sub(-1) == "/" then body = body:sub(1, -2) end -- one trailing slash is fine
  for seg in (body .. "/"):gmatch("([^/]*)/") do
    local d = seg:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
    if seg == "" or d == "." or d == ".." or d:find("[/\\%z]") then return false end
  end
  return true
end

--- The part that answers `path`: "router", "api", "health" or "web".
---@param path string
---@return "router"|"api"|"health"|"web"
function M.part(path)
  if path == "/healthz" then return "health" end
  if path == "/v1" or path:sub(1, 4) == "/v1/" or path == "/metrics" or path == "/metrics/" then return "router" end
  if path == "/api" or path:sub(1, 5) == "/api/" then return "api" end
  return "web"
end

return M
