-- A stand-in for the Hugging Face Hub's model API, served in-process by
-- obleth.http, with the Hub's response shapes (see spec/fixtures/hub/README.md):
--
--   GET /api/models/<repo_id>[/revision/<rev, '/' as %2F>][?blobs=true]
--   GET /api/models/<repo_id>/auth-check
--
-- * model info comes from spec/fixtures/hub/model_*.json (keyed by their `id`);
--   without ?blobs=true the file sizes are left out, as the Hub does;
-- * an unknown (or someone else's private) repo is 401 RepoNotFound without a
--   token and 404 RepoNotFound with a valid one; an unknown token is 401
--   "Invalid credentials in Authorization header";
-- * a gated repo's model info is public; auth-check answers 401 GatedRepo
--   without a token, 403 GatedRepo for NO_ACCESS, 200 for GRANTED;
-- * special repos: obleth-fixtures/rate-limited (429 Retry-After + RateLimit),
--   obleth-fixtures/rate-limited-2 (429 RateLimit only), obleth-fixtures/server-error
--   (503), obleth-fixtures/slow (answers after 3 s), old-name/renamed-model (307
--   to Qwen/Qwen2.5-0.5B-Instruct), obleth-fixtures/offsite (302 to
--   opts.offsite), obleth-fixtures/other-name (302 to the same server under
--   the host name "localhost": another origin).
--
-- Every request is recorded in hub.requests: {method, path, target, query,
-- headers, authorization}.
local cjson = require("cjson")

local M = {}

M.TOKENS = {
  granted = "hf_oblethGrantedToken0123456789abcdefXYZ",
  no_access = "hf_oblethNoAccessToken0123456789abcdefXYZ",
}

local function fixture_dir()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  local dir = src:match("^(.*)/spec/support/[^/]*$")
  return (dir or ".") .. "/spec/fixtures/hub"
end

--- A fixture as decoded JSON (model_*.json: a model-info body; error_*.json:
--- {status, headers, body}).
function M.fixture(name)
  local path = fixture_dir() .. "/" .. name .. ".json"
  local fh = assert(io.open(path), "no fixture " .. path)
  local text = fh:read("a")
  fh:close()
  return cjson.decode(text), text
end

--- Every model_*.json fixture, keyed by repo id.
function M.models()
  local out = {}
  local p = assert(io.popen("ls " .. fixture_dir()))
  for name in p:lines() do
    local base = name:match("^(model_.*)%.json$")
    if base then
      local doc = M.fixture(base)
      out[doc.id] = doc
    end
  end
  p:close()
  return out
end

local function copy(t)
  if type(t) ~= "table" then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = copy(v) end
  return c
end

local function json(status, body, headers)
  local h = { ["Content-Type"] = "application/json; charset=utf-8" }
  for k, v in pairs(headers or {}) do h[k] = v end
  return { status = status, headers = h, body = cjson.encode(body) }
end

local function error_answer(name, vars)
  local doc = M.fixture(name)
  local function fill(s)
    return (s:gsub("{(%w+)}", function(k) return vars and vars[k] or "" end))
  end
  local headers = {}
  for k, v in pairs(doc.headers) do headers[k] = fill(v) end
  local body = doc.body
  if type(body) == "table" then
    body = cjson.encode({ error = fill(body.error) })
  else
    body = fill(body)
  end
  return { status = doc.status, headers = headers, body = body }
end

local function strip_sizes(info)
  local c = copy(info)
  if type(c.siblings) == "table" then
    for _, s in ipairs(c.siblings) do s.size, s.lfs, s.blobId = nil, nil, nil end
  end
  return c
end

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

--- Start the stand-in Hub.
---@param opts table|nil {offsite = base URL a redirect of obleth-fixtures/offsite points to}
---@return table hub {url, port, requests, close(), reset()}
function M.start(opts)
  opts = opts or {}
  local http = require("obleth.http")
  local loop = require("obleth.loop")
  local models = M.models()
  local hub = { requests = {}, offsite = opts.offsite }

  local function handler(req)
    local headers = {}
    for k, v in pairs(req.headers) do headers[k] = v end
    hub.requests[#hub.requests + 1] = {
      method = req.method, path = req.path, target = req.target, query = req.query,
      headers = headers, authorization = headers.authorization,
    }
    local auth = headers.authorization
    local token = auth and auth:match("^Bearer (.+)$")
    if auth and token ~= M.TOKENS.granted and token ~= M.TOKENS.no_access then
      return error_answer("error_invalid_token")
    end
    local rest = req.path:match("^/api/models/(.+)$")
    if not rest then return json(404, { error = "Sorry, we can't find the page you are looking for." }) end
    local auth_check = false
    local repo, rev = rest, nil
    if rest:find("/auth%-check$") then
      repo, auth_check = rest:gsub("/auth%-check$", ""), true
    else
      local r, v = rest:match("^(.-)/revision/(.+)$")
      if r then repo, rev = r, unescape(v) end
    end
    repo = unescape(repo)

    if repo == "obleth-fixtures/rate-limited" then return error_answer("error_rate_limited") end
    if repo == "obleth-fixtures/rate-limited-2" then return error_answer("error_rate_limited_ratelimit_only") end
    if repo == "obleth-fixtures/server-error" then return error_answer("error_server") end
    if repo == "obleth-fixtures/slow" then loop.sleep(3); return json(200, {}) end
    if repo == "old-name/renamed-model" then
      return { status = 307, headers = { Location = "/api/models/Qwen/Qwen2.5-0.5B-Instruct?blobs=true" },
               body = "Temporary Redirect. Redirecting to /api/models/Qwen/Qwen2.5-0.5B-Instruct?blobs=true" }
    end
    if repo == "obleth-fixtures/offsite" and hub.offsite then
      return { status = 302, headers = { Location = hub.offsite .. "/api/models/obleth-fixtures/offsite?blobs=true" },
               body = "" }
    end
    if repo == "obleth-fixtures/other-name" then
      return { status = 302, headers = {
        Location = ("http://localhost:%d/api/models/Qwen/Qwen2.5-0.5B-Instruct?blobs=true"):format(hub.port) },
        body = "" }
    end

    local info = models[repo]
    if info and info.private and token ~= M.TOKENS.granted then info = nil end
    if not info then
      return error_answer(token and "error_repo_not_found" or "error_repo_not_found_anonymous")
    end
    if auth_check then
      if not info.gated then return json(200, {}) end
      if not token then return error_answer("error_gated_anonymous", { repo = repo }) end
      if token ~= M.TOKENS.granted then return error_answer("error_gated_no_access", { repo = repo }) end
      return json(200, {})
    end
    if rev and rev ~= "main" and rev ~= info.sha and rev ~= "refs/pr/1" then
      return error_answer("error_revision_not_found", { revision = rev })
    end
    local body = req.query.blobs == "true" and info or strip_sizes(info)
    return json(200, body)
  end

  local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = handler })
  hub.server = srv
  hub.port = srv:port()
  hub.url = ("http://127.0.0.1:%d"):format(hub.port)
  function hub.close() srv:close() end
  function hub.reset() hub.requests = {} end
  return hub
end

--- A server standing for "some other host": records requests, answers every
--- GET with the Qwen/Qwen2.5-0.5B-Instruct model info renamed to obleth-fixtures/offsite.
function M.start_other()
  local http = require("obleth.http")
  local other = { requests = {} }
  local info = M.fixture("model_safetensors")
  info.id = "obleth-fixtures/offsite"
  local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = function(req)
    local headers = {}
    for k, v in pairs(req.headers) do headers[k] = v end
    other.requests[#other.requests + 1] = { method = req.method, path = req.path, target = req.target,
      query = req.query, headers = headers, authorization = headers.authorization }
    return json(200, info)
  end })
  other.port = srv:port()
  other.url = ("http://127.0.0.1:%d"):format(other.port)
  function other.close() srv:close() end
  return other
end

return M
