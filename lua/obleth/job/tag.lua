--- The tag every provisioner job carries (docs/managed-spec.md, "Job tag").
-- name:    obleth-<instance>-m<model_id>-s<slot>-<nonce>
-- comment: obleth instance=<instance> model=<model_id> slot=<slot> nonce=<nonce> gen=<generation> port=<port>
-- (the port lets an adopted job's endpoint be rebuilt)
-- <instance> identifies the obleth installation (its store), so two
-- installations sharing a cluster never touch each other's jobs.
local M = {}

---@param instance string 8 lowercase hex characters
---@param model_id integer
---@param slot integer
---@param nonce string 16 lowercase hex characters
---@return string name
function M.name(instance, model_id, slot, nonce)
  return ("obleth-%s-m%d-s%d-%s"):format(instance, model_id, slot, nonce)
end

---@return string comment
function M.comment(instance, model_id, slot, nonce, generation, port)
  return ("obleth instance=%s model=%d slot=%d nonce=%s gen=%d port=%d"):format(instance, model_id, slot, nonce,
    generation or 0, port or 0)
end

--- Parse a job's name (and comment, when present, which must agree).
---@param job {name: string|nil, comment: string|nil}
---@return {instance: string, model_id: integer, slot: integer, nonce: string, generation: integer|nil,
---  port: integer|nil}|nil
function M.parse(job)
  local name = job and job.name
  if type(name) ~= "string" then return nil end
  local inst, m, s, nonce = name:match("^obleth%-(%x+)%-m(%d+)%-s(%d+)%-(%x+)$")
  if not inst or #inst ~= 8 or #nonce ~= 16 then return nil end
  local t = { instance = inst, model_id = math.tointeger(tonumber(m)), slot = math.tointeger(tonumber(s)),
    nonce = nonce }
  if type(job.comment) == "string" then
    local ci, cm, cs, cn, cg, rest = job.comment:match(
      "^obleth instance=(%x+) model=(%d+) slot=(%d+) nonce=(%x+) gen=(%d+)(.*)$")
    if not ci or ci ~= inst or tonumber(cm) ~= t.model_id or tonumber(cs) ~= t.slot or cn ~= nonce then return nil end
    t.generation = math.tointeger(tonumber(cg))
    local port = rest:match("^ port=(%d+)$")
    if rest ~= "" and not port then return nil end
    t.port = port and math.tointeger(tonumber(port)) or nil
    if t.port == 0 then t.port = nil end
  end
  return t
end

return M
