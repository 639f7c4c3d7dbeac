--- The tag every provisioner job carries (docs/managed-spec.md, "Job tag").
-- name:    obleth-m<model_id>-s<slot>-<nonce>
-- comment: obleth model=<model_id> slot=<slot> nonce=<nonce> gen=<generation>
local M = {}

---@param model_id integer
---@param slot integer
---@param nonce string 16 lowercase hex characters
---@return string name
function M.name(model_id, slot, nonce)
  return ("obleth-m%d-s%d-%s"):format(model_id, slot, nonce)
end

---@return string comment
function M.comment(model_id, slot, nonce, generation)
  return ("obleth model=%d slot=%d nonce=%s gen=%d"):format(model_id, slot, nonce, generation or 0)
end

--- Parse a job's name (and comment, when present, which must agree).
---@param job {name: string|nil, comment: string|nil}
---@return {model_id: integer, slot: integer, nonce: string, generation: integer|nil}|nil
function M.parse(job)
  local name = job and job.name
  if type(name) ~= "string" then return nil end
  local m, s, nonce = name:match("^obleth%-m(%d+)%-s(%d+)%-(%x+)$")
  if not m or #nonce ~= 16 then return nil end
  local t = { model_id = math.tointeger(tonumber(m)), slot = math.tointeger(tonumber(s)), nonce = nonce }
  if type(job.comment) == "string" then
    local cm, cs, cn, cg = job.comment:match("^obleth model=(%d+) slot=(%d+) nonce=(%x+) gen=(%d+)$")
    if cm and (tonumber(cm) ~= t.model_id or tonumber(cs) ~= t.slot or cn ~= nonce) then return nil end
    t.generation = cg and math.tointeger(tonumber(cg))
  end
  return t
end

return M
