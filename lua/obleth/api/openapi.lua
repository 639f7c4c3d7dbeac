--- GET /api/v1/openapi.json: an OpenAPI 3 document generated from the route
-- table (so it names exactly the registered routes), with the main schemas.
local json = require "obleth.util.json"
local wire = require "obleth.schema"
local request = require "obleth.api.request"
local managed = require "obleth.schema.managed"
local slurm_settings = require "obleth.schema.settings"
local model_schema = require "obleth.schema.model"

local M = {}

local function nullable(t) t.nullable = true; return t end
local function str() return { type = "string" } end
local function arr(items) return { type = "array", items = items } end

M.schemas = {
  Error = { type = "object", required = { "error" }, properties = {
    error = { type = "object", required = { "code", "message" }, properties = {
      code = str(), message = str(), field = str() } } } },
  ModelInput = wire.openapi(model_schema.input),
  Model = { type = "object", properties = {
    id = { type = "integer" }, name = str(), description = nullable(str()),
    status = { type = "string", enum = { "staged", "active" } }, endpoints = arr(str()),
    managed = { type = "boolean" }, created_at = { type = "integer" }, updated_at = { type = "integer" } } },
  EndpointInput = (function()
    local o = wire.openapi(model_schema.endpoint_input)
    o.required = { "url" }
    return o
  end)(),
  ManagedSpec = wire.openapi(managed.spec),
  SlurmConnection = wire.openapi(slurm_settings.connection),
  SlurmSettings = wire.openapi(slurm_settings.settings),
}

--- Build the document for a route table (server.load_routes()).
---@param routes table[]
---@return table
function M.document(routes)
  local paths = {}
  local schemas = {}
  for k, v in pairs(M.schemas) do schemas[k] = v end
  for _, r in ipairs(routes) do
    for k, v in pairs(r.schemas or {}) do schemas[k] = schemas[k] or v end
    if r.body_schema and not schemas[r.body] then schemas[r.body] = wire.openapi(r.body_schema) end
    if r.body and not schemas[r.body] then schemas[r.body] = { type = "object", description = r.body } end
  end
  for _, r in ipairs(routes) do
    paths[r.path] = paths[r.path] or {}
    local params = json.array()
    for p in r.path:gmatch("{([%w_]+)}") do
      params[#params + 1] = { name = p, ["in"] = "path", required = true, schema = { type = "string" } }
    end
    for _, q in ipairs(request.query_params(r)) do
      local s = { type = "string", enum = q.enum, pattern = q.pattern and wire.regex(q.pattern) }
      params[#params + 1] = { name = q.name, ["in"] = "query", required = q.required == true, description = q.rule,
        schema = s }
    end
    for _, h in ipairs(r.headers or {}) do
      params[#params + 1] = { name = h[1], ["in"] = "header", required = false, description = h[2],
        schema = { type = "string" } }
    end
    local op = {
      summary = r.summary or (r.method .. " " .. r.path),
      operationId = (r.method:lower() .. r.path:gsub("[{}]", ""):gsub("[^%w]+", "_")),
      tags = { r.tag },
      parameters = params,
      responses = {
        ["200"] = { description = "OK", content = { ["application/json"] = { schema = r.response
          and { ["$ref"] = "#/components/schemas/" .. r.response } or { type = "object" } } } },
        default = { description = "An error", content = { ["application/json"] = {
          schema = { ["$ref"] = "#/components/schemas/Error" } } } },
      },
    }
    if r.body then
      op.requestBody = { required = not r.body_optional, content = { ["application/json"] = {
        schema = { ["$ref"] = "#/components/schemas/" .. r.body } } } }
    end
    paths[r.path][r.method:lower()] = op
  end
  return {
    openapi = "3.0.3",
    info = { title = "obleth Management API", version = "1",
      description = "Models, managed specs, replicas, Slurm settings, launches, recipes and the provisioner "
        .. "protocol. Every route needs Authorization: Bearer <admin token>." },
    security = { { bearer = json.array() } },
    components = { securitySchemes = { bearer = { type = "http", scheme = "bearer" } }, schemas = schemas },
    paths = paths,
  }
end

local function serve(ctx)
  return 200, M.document(ctx.routes)
end

M.routes = {
  { "GET", "/api/v1/openapi.json", serve, summary = "This document" },
}

return M
