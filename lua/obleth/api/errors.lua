--- Error answers of the Management API: `{"error": {"code", "message", "field"?}}`.
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
  local e = { code = code, message = message, field = field }
  for k, v in pairs(extra or {}) do e[k] = v end
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

return M
