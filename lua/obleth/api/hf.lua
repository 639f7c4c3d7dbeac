-- Management API route: POST /api/v1/hf/inspect
--
-- Body: {"repo_id": "namespace/name", "revision"?: "main", "gpu_type"?: "a100"}
-- 200: the inspection (obleth.hf.inspect's result: formats, engines with their
--      choices and prefill values, notes, repo_id, revision sha, gated, private).
-- Errors ({"error": {"code", "message", "field"?}}):
--   400 invalid_repo_id / invalid_revision / invalid_gpu_type (field named)
--   403 gated_no_token, no_access, invalid_token
--   404 not_found
--   429 rate_limited (with Retry-After when the Hub said how long)
--   502 hub_unreachable, hub_error;  500 bad_endpoint
-- The Hugging Face token comes from the cluster defaults and is never echoed.
local hf = require("obleth.hf")
local json = require("obleth.util.json")

local M = {}

local STATUS = {
  invalid_repo_id = 400, invalid_revision = 400,
  gated_no_token = 403, no_access = 403, invalid_token = 403,
  not_found = 404, rate_limited = 429,
  hub_unreachable = 502, hub_error = 502, bad_endpoint = 500,
}

local function errors()
  return require("obleth.api.errors")
end

-- The token from the cluster defaults: app:settings_secrets() or
-- app:slurm_settings() (cluster defaults under .defaults, secrets in clear),
-- else app.hf_token.
local function hf_token(app)
  if type(app) ~= "table" then return nil end
  for _, name in ipairs({ "settings_secrets", "slurm_settings" }) do
    if type(app[name]) == "function" then
      local ok, v = pcall(app[name], app)
      if ok and type(v) == "table" then
        local t = v.hf_token
        if t == nil and type(v.defaults) == "table" then t = v.defaults.hf_token end
        if type(t) == "string" and t ~= "" then return t end
      end
    end
  end
  local t = app.hf_token
  if type(t) == "string" and t ~= "" then return t end
  return nil
end

-- Empty lists must encode as [] (lua-cjson writes an empty table as {}).
local LIST_KEYS = { formats = true, notes = true, engines = true, files = true, choices = true, args = true }

local function mark_arrays(t)
  for k, v in pairs(t) do
    if type(v) == "table" and getmetatable(v) == nil then
      if LIST_KEYS[k] then json.array(v) end
      mark_arrays(v)
    end
  end
  return t
end

-- nil for absent or JSON null, the value otherwise.
local opt = json.nonnull

local function handler(ctx)
  local body = ctx.json
  if type(body) ~= "table" then
    return errors().fail(400, "invalid_body", "send a JSON object with repo_id", nil)
  end
  local repo_id = opt(body.repo_id)
  if type(repo_id) ~= "string" then
    return errors().fail(400, "invalid_repo_id", "repo_id is required (namespace/name)", "repo_id")
  end
  local revision = opt(body.revision)
  if revision ~= nil and type(revision) ~= "string" then
    return errors().fail(400, "invalid_revision", "revision must be a string (branch, tag or commit)", "revision")
  end
  local gpu_type = opt(body.gpu_type)
  if gpu_type ~= nil and (type(gpu_type) ~= "string" or #gpu_type > 64 or not gpu_type:find("^[A-Za-z0-9_.:-]+$")) then
    return errors().fail(400, "invalid_gpu_type", "gpu_type is a GRES type name such as a100", "gpu_type")
  end
  local result, err = hf.inspect(repo_id, {
    revision = revision, gpu_type = gpu_type, token = hf_token(ctx.app),
  })
  if result then return 200, mark_arrays(result) end
  local status = STATUS[err.code] or 502
  if err.code == "rate_limited" then
    local st, doc = errors().fail(status, err.code, err.message, err.field, { retry_after = err.retry_after })
    return st, doc, err.retry_after and { ["Retry-After"] = tostring(math.floor(err.retry_after)) } or nil
  end
  return errors().fail(status, err.code, err.message, err.field)
end

M.handler = handler
M.routes = {
  { "POST", "/api/v1/hf/inspect", handler, action = "deployments.launch", tag = "deployments", changes = {}, audit = false,
    summary = "Read a Hugging Face repo: its formats, the engines that can run it, their choices and launch prefill" },
}

return M
