--- `api` in `obleth repl`: read the Management API (OBLETH_ADMIN_BASE_URL with
-- OBLETH_ADMIN_TOKEN). Reads only. Every answer goes through `mask`: a string
-- equal to a secret the REPL knows (the admin token, the JWT, the Hugging Face
-- token) is shown as "********", whatever route it came from; the
-- provisioner's snapshot (which carries the JWT) is not offered.
local cjson = require "cjson"
local json = require "obleth.api.json"

local M = {}

M.MASK = "********"

--- Replace every string that equals one of `secrets` (a set) by M.MASK, in a copy.
---@param v any
---@param secrets table<string, boolean>
---@return any
function M.mask(v, secrets)
  if type(v) == "string" then
    if secrets[v] then return M.MASK end
    for s in pairs(secrets) do
      if #s >= 8 and v:find(s, 1, true) then return (v:gsub(s:gsub("%p", "%%%0"), M.MASK)) end
    end
    return v
  end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.mask(x, secrets) end
  return out
end

-- Lists that read better as rows; the values stay plain tables (filter them in Lua).
local function _rows(list, headers, row)
  if type(list) ~= "table" then return list end
  return setmetatable(list, { __repl = function(l)
    local rows = {}
    for _, x in ipairs(l) do rows[#rows + 1] = row(x) end
    return require("obleth.format").table(headers, rows)
  end })
end

local function _s(v) if v == nil then return "-" end return tostring(v) end

--- Models as rows: id, name, status, managed, endpoints.
function M.models_rows(list)
  return _rows(list, { "ID", "NAME", "STATUS", "MANAGED", "ENDPOINTS" }, function(m)
    return { _s(m.id), _s(m.name), _s(m.status), m.managed and "yes" or "no",
      type(m.endpoints) == "table" and #m.endpoints > 0 and table.concat(m.endpoints, " ") or "-" }
  end)
end

--- Replicas as rows: id, model id, slot, state, job, node, endpoint, problem.
function M.replicas_rows(list)
  return _rows(list, { "ID", "MODEL", "SLOT", "STATE", "JOB", "NODE", "ENDPOINT", "PROBLEM" }, function(r)
    return { _s(r.id), _s(r.model_id), _s(r.slot), _s(r.state), _s(r.job_id), _s(r.node), _s(r.endpoint),
      _s(r.problem or r.pending_reason) }
  end)
end

local function _query(q)
  local parts = {}
  for k, v in pairs(q or {}) do
    parts[#parts + 1] = ("%s=%s"):format(k, tostring(v):gsub("[^%w%-_.~]", function(c)
      return ("%%%02X"):format(c:byte())
    end))
  end
  table.sort(parts)
  return #parts > 0 and ("?" .. table.concat(parts, "&")) or ""
end

--- A handle on one Management API.
---@param base string e.g. "http://127.0.0.1:8080"
---@param token string the admin token (never shown)
---@param secrets table<string, boolean> the set of secrets to mask (shared with the REPL; the token is added)
---@return table handle with the functions below
function M.new(base, token, secrets)
  secrets[token] = true
  local api = { base = base:gsub("/+$", "") }

  --- GET a path of the Management API; the decoded answer (secrets masked), or nil, err.
  ---@param path string e.g. "/api/v1/models"
  ---@return table|nil doc, {code: string, message: string}|nil err
  function api.get(path)
    if type(path) ~= "string" or path:sub(1, 1) ~= "/" then error("api.get: give a path such as /api/v1/models", 2) end
    if path:match("^/api/v1/provisioner/snapshot") then
      return nil, { code = "refused", message = "the snapshot carries the JWT: use plan() to see what a pass reads" }
    end
    local r, err = require("obleth.http").request { url = api.base .. path, timeout = 15,
      headers = { Authorization = "Bearer " .. token, Accept = "application/json" } }
    if not r then return nil, { code = err.code, message = "Management API: " .. tostring(err.message) } end
    local ok, doc = pcall(cjson.decode, r.body)
    if r.status ~= 200 then
      local msg = ok and type(doc) == "table" and type(doc.error) == "table" and doc.error.message or r.body:sub(1, 200)
      return nil, { code = "http_" .. r.status, message = ("GET %s: HTTP %d: %s"):format(path, r.status, tostring(msg)) }
    end
    if not ok then return nil, { code = "bad_response", message = "GET " .. path .. ": invalid JSON" } end
    return M.mask(json.plain(doc), secrets)
  end

  local function field(path, key)
    local doc, err = api.get(path)
    if not doc then return nil, err end
    if key and type(doc) == "table" and doc[key] ~= nil then return doc[key] end
    return doc
  end

  --- The models (name, status, endpoints).
  ---@return table[]|nil models, table|nil err
  function api.models()
    local l, err = field("/api/v1/models", "models")
    if not l then return nil, err end
    return M.models_rows(l)
  end

  --- One model by id.
  ---@param id integer
  function api.model(id) return field("/api/v1/models/" .. math.tointeger(id), "model") end

  --- The managed specs (one per model that runs on Slurm).
  ---@return table[]|nil specs, table|nil err
  function api.specs() return field("/api/v1/managed", "managed") end

  --- A model's managed spec.
  ---@param model_id integer
  function api.spec(model_id) return field(("/api/v1/models/%d/managed"):format(math.tointeger(model_id))) end

  --- Replicas: every one, or one model's; live = true leaves out ended ones.
  ---@param opts {model_id: integer|nil, live: boolean|nil}|nil
  ---@return table[]|nil replicas, table|nil err
  function api.replicas(opts)
    opts = opts or {}
    local q = opts.live and "?state=live" or ""
    local l, err
    if opts.model_id then
      l, err = field(("/api/v1/models/%d/replicas%s"):format(math.tointeger(opts.model_id), q), "replicas")
    else
      l, err = field("/api/v1/replicas" .. q, "replicas")
    end
    if not l then return nil, err end
    return M.replicas_rows(l)
  end

  --- Launch history, newest first, with the job outcomes of each launch.
  ---@param opts {model_id: integer|nil, recipe_id: string|nil, limit: integer|nil}|nil limit default 50
  ---@return table[]|nil launches, table|nil err
  function api.launches(opts) return field("/api/v1/deployments/launches" .. _query(opts), "launches") end

  --- The Slurm connection and cluster defaults (JWT and Hugging Face token masked), provisioner check-in.
  ---@return table|nil settings, table|nil err
  function api.settings() return field("/api/v1/settings/slurm") end

  --- Library and saved recipes.
  ---@return table[]|nil recipes, table|nil err
  function api.recipes() return field("/api/v1/recipes", "recipes") end

  return api
end

return M
