--- Error answers of the Management API: `{"error": {"code", "message", "field"?, "label"?}}`: `label` is the
--- field's label as the dashboard shows it, and the message starts with it (obleth.deployment.labels).
-- Route handlers `return errors.fail(400, "invalid", "replicas: must be 0..64", "replicas")`.
local M = {}

--- An error answer for a handler to return.
---@param status integer HTTP status
---@param code string stable short code ("invalid", "not_found", "conflict", ...)
---@param message string for a human
---@param field string|nil the request field (or query parameter) it is about
---@param extra table|nil more keys for the error object (e.g. {running = 3})
---@return integer status, table body
function M.fail(status, code, message, field, extra)
  -- a message or field may quote what the client sent: valid UTF-8 (JSON's) and of bounded length
  local text = require "obleth.util.text"
  if type(message) == "string" then message = text.printable(message, 2048) end
  if type(field) == "string" then field = text.printable(field, 256) end
  local e = { code = code, message = message, field = field }
  for k, v in pairs(extra or {}) do e[k] = v end
  -- the field's label, and the message in the label's words (obleth.deployment.labels)
  require("obleth.deployment.labels").say(e)
  return status, { error = e }
end

--- The answer for a validation error table {message, field, code?} (400 by default).
---@param err {message: string, field: string|nil, code: string|nil}
---@param status integer|nil
function M.invalid(err, status)
  return M.fail(status or 400, err.code or "invalid", err.message, err.field)
end

function M.not_found(what, id)
  return M.fail(404, "not_found", ("%s %s does not exist"):format(what, tostring(id)))
end

--- The request's JSON body when it is an object; otherwise nil and a 400 answer.
---@return table|nil body, integer|nil status, table|nil err_body
function M.need_object(ctx)
  local b = ctx.json
  if type(b) ~= "table" or getmetatable(b) then -- decoded arrays carry obleth.util.json's mark
    local st, body = M.fail(400, "invalid", b == nil and "a JSON object body is required"
      or "the body must be a JSON object")
    return nil, st, body
  end
  for k in pairs(b) do
    if type(k) ~= "string" then
      local st, body = M.fail(400, "invalid", "the body must be a JSON object, not an array")
      return nil, st, body
    end
  end
  return b
end

--- Map a store error {code, message, field} to an answer.
function M.store(err)
  local status = ({ not_found = 404, conflict = 409, invalid = 400, storage = 503 })[err.code] or 500
  local extra
  if err.running then extra = { running = err.running } end
  if err.state then extra = extra or {}; extra.state = err.state end
  return M.fail(status, err.code, err.message, err.field, extra)
end

return M
