--- The checks every route gets from its declaration before its handler runs, so no handler opens by
-- checking again by hand:
-- - `query`: the parameters the route takes, each a name or {name, enum = {...}, pattern = "<Lua>",
--   required = true, rule = "what a good value is, in words"}; an unknown parameter, a missing required
--   one or a value outside enum / pattern is a 400 naming the parameter. A route that declares no
--   `query` takes any (and reads none).
-- - `body`: the name of its request schema (OpenAPI); the body must be a JSON object, unless the route
--   says `body_optional = true` (then no body is fine too). With `body_schema` (obleth.schema data: the
--   OpenAPI schema of that name is read from it too), the object is checked against it, by
--   `body_check(json)` when the route gives one (the schema's check and the rules between fields that
--   are not data: obleth.deployment.input), else by obleth.schema.validate; a bad field is a 400
--   naming it, and the handler finds the checked body, defaults filled in, in ctx.body. A route
--   without one leaves what the object holds to its handler.
-- Errors are docs/errors.md's shape through obleth.api.errors.
local errors = require "obleth.api.errors"
local wire = require "obleth.schema"

local M = {}

--- A route's query declaration as a list of {name, enum?, pattern?, required?, rule?}.
---@param route table a loaded route (route.query as declared)
---@return table[]
function M.query_params(route)
  local out = {}
  for i, q in ipairs(route.query or {}) do
    if type(q) == "string" then out[i] = { name = q }
    else
      out[i] = { name = q[1] or q.name, enum = q.enum, pattern = q.pattern, required = q.required, rule = q.rule }
    end
  end
  return out
end

local function _check_query(route, query)
  local params = M.query_params(route)
  local by, names = {}, {}
  for i, p in ipairs(params) do by[p.name] = p; names[i] = p.name end
  local keys = {}
  for k in pairs(query) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if not by[k] then
      return errors.fail(400, "invalid", ("unknown query parameter %q (%s)"):format(k, table.concat(names, ", ")), k)
    end
  end
  for _, p in ipairs(params) do
    local v = query[p.name]
    if v == nil then
      if p.required then return errors.fail(400, "invalid", p.name .. ": " .. (p.rule or "is required"), p.name) end
    elseif p.enum then
      local ok = false
      for _, e in ipairs(p.enum) do if v == e then ok = true break end end
      if not ok then
        return errors.fail(400, "invalid", ("%s: must be %s"):format(p.name, table.concat(p.enum, " or ")), p.name)
      end
    elseif p.pattern and (type(v) ~= "string" or not v:match(p.pattern)) then
      return errors.fail(400, "invalid", p.name .. ": " .. (p.rule or "is not valid"), p.name)
    end
  end
  return nil
end

--- Check a request against its route's declaration.
---@param route table
---@param ctx table the request context (ctx.query: strings; ctx.json: the decoded body or nil)
---@return integer|nil status a failure's status (nil: the request may go to the handler)
---@return table|nil body the failure's answer
function M.check(route, ctx)
  -- a query string the host could not read whole (a name twice or empty, a NUL byte: host/http_server.c)
  if ctx.req and ctx.req.query_error then return errors.fail(400, "invalid", ctx.req.query_error) end
  if route.query then
    local st, body = _check_query(route, ctx.query or {})
    if st then return st, body end
  end
  if route.body and not route.raw_body and not (route.body_optional and ctx.json == nil) then
    local b, st, body = errors.need_object(ctx)
    if not b then return st, body end
    if route.body_schema then
      local v, err
      if route.body_check then v, err = route.body_check(b)
      else v, err = wire.validate(route.body_schema, b) end
      if v == nil then return errors.invalid(err) end
      ctx.body = v
    end
  end
  return nil
end

return M
