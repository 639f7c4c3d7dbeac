-- Reading a repo from the Hugging Face Hub's model API (host modules: http,
-- log, loop). Every call must run inside a task.
--
--   GET <endpoint>/api/models/<repo_id>[/revision/<rev, '/' as %2F>]?blobs=true
--
-- The endpoint defaults to https://huggingface.co and follows the HF_ENDPOINT
-- convention. The token goes only to the endpoint's own origin (scheme, host,
-- port): the HTTP client never follows redirects by itself, and a redirect to
-- any other origin is followed without the Authorization header.
--
-- Hub facts this relies on (huggingface_hub's hf_raise_for_status, the Hub's
-- JS client tests): an unknown repo answers 401 without a token and 404 with
-- one, both with `X-Error-Code: RepoNotFound`; a private repo you cannot see
-- looks exactly like an unknown one; a gated repo's model info is public and
-- only /api/models/<id>/auth-check (or a download) says 401 / 403 with
-- `X-Error-Code: GatedRepo`; an unknown revision is 404 `RevisionNotFound`;
-- a bad token is 401 "Invalid credentials in Authorization header"; rate
-- limits are 429 with `RateLimit: "api";r=0;t=<seconds>` (and Retry-After).
local cjson = require("cjson")
local detect = require("obleth.hf.detect")
local validate = require("obleth.hf.repo_id")

local M = {}

M.DEFAULT_ENDPOINT = "https://huggingface.co"
M.TTL = 60            -- seconds a successful answer is reused
M.NOT_FOUND_TTL = 5   -- seconds a "not found" is reused
M.MAX_ENTRIES = 256
local MAX_REDIRECTS = 3

local Client = {}
Client.__index = Client

--- Parse an http(s) URL into its origin and the rest.
---@return table|nil {scheme, host, port, origin, path}
local function parse_url(url)
  if type(url) ~= "string" then return nil end
  local scheme, authority, rest = url:match("^([Hh][Tt][Tt][Pp][Ss]?)://([^/?#]+)(.*)$")
  if not scheme or authority:find("@", 1, true) then return nil end
  scheme = scheme:lower()
  local host, port = authority:match("^(%[[%x:.]+%]):(%d+)$")
  if not host then host, port = authority:match("^([^:]+):(%d+)$") end
  if not host then host = authority end
  if host:find("[^%w%.%-%[%]:]") then return nil end
  port = tonumber(port) or (scheme == "https" and 443 or 80)
  host = host:lower()
  return { scheme = scheme, host = host, port = port, origin = ("%s://%s:%d"):format(scheme, host, port),
           path = rest }
end
M._parse_url = parse_url

--- The endpoint as a base URL without a trailing slash, or nil, err.
local function parse_endpoint(s)
  local u = parse_url(s)
  if not u or u.path:find("[?#]") then
    return nil, { code = "bad_endpoint",
                  message = "the Hugging Face endpoint (HF_ENDPOINT) must be an http(s) URL without a query" }
  end
  u.base = (s:gsub("/+$", ""))
  return u
end

local function resolve_location(current, location)
  if location:find("^[Hh][Tt][Tt][Pp][Ss]?://") then return location end
  local cur = parse_url(current)
  if location:sub(1, 2) == "//" then return cur.scheme .. ":" .. location end
  if location:sub(1, 1) == "/" then
    return ("%s://%s%s"):format(cur.scheme, current:match("^[^:]+://([^/?#]+)"), location)
  end
  return nil
end

local function header(res, name)
  local v = res.headers and res.headers[name]
  return type(v) == "string" and v or nil
end

-- The Hub's own words about an error: X-Error-Message, else {"error": ...}.
local function hub_message(res)
  local m = header(res, "x-error-message")
  if not m and type(res.body) == "string" and res.body ~= "" then
    local ok, doc = pcall(cjson.decode, res.body)
    if ok and type(doc) == "table" and type(doc.error) == "string" then m = doc.error end
  end
  if m and #m > 300 then m = m:sub(1, 300) .. "..." end
  return m
end

-- Seconds to wait from Retry-After (delta seconds), else from RateLimit's t=.
local function retry_after(res)
  local ra = header(res, "retry-after")
  local n = ra and tonumber(ra:match("^%s*(%d+)%s*$"))
  if n then return n end
  local rl = header(res, "ratelimit")
  n = rl and tonumber(rl:match("[;%s]t=(%d+)"))
  return n
end

--- A new client with its own cache.
---@param opts table|nil {ttl=seconds, not_found_ttl=seconds, now=function()->seconds, http=module, log=module}
function M.new(opts)
  opts = opts or {}
  return setmetatable({
    ttl = opts.ttl or M.TTL,
    not_found_ttl = opts.not_found_ttl or M.NOT_FOUND_TTL,
    now = opts.now or require("obleth.loop").monotonic,
    http = opts.http or require("obleth.http"),
    log = opts.log or require("obleth.log"),
    cache = {}, n_cached = 0,
  }, Client)
end

function Client:clear()
  self.cache, self.n_cached = {}, 0
end

function Client:_cache_get(key)
  local e = self.cache[key]
  if e and e.expires > self.now() then return e end
  if e then self.cache[key] = nil; self.n_cached = self.n_cached - 1 end
  return nil
end

function Client:_cache_put(key, entry, ttl)
  if ttl <= 0 then return end
  if self.n_cached >= M.MAX_ENTRIES then
    local now = self.now()
    for k, e in pairs(self.cache) do
      if e.expires <= now then self.cache[k] = nil; self.n_cached = self.n_cached - 1 end
    end
    if self.n_cached >= M.MAX_ENTRIES then self:clear() end
  end
  entry.expires = self.now() + ttl
  if not self.cache[key] then self.n_cached = self.n_cached + 1 end
  self.cache[key] = entry
end

-- GET url; the token is attached only while the URL's origin is the Hub's.
function Client:_get(url, token, hub, timeout)
  for _ = 0, MAX_REDIRECTS do
    local u = parse_url(url)
    if not u then
      return nil, { code = "hub_error", message = "the Hub redirected to a URL that is not http(s)" }
    end
    local headers = { Accept = "application/json", ["User-Agent"] = "obleth" }
    if token and u.origin == hub.origin then headers.Authorization = "Bearer " .. token end
    local res, err = self.http.request { url = url, headers = headers, timeout = timeout }
    if not res then
      return nil, { code = "hub_unreachable",
                    message = ("could not reach the Hugging Face Hub at %s (%s): check the network or HF_ENDPOINT")
                      :format(hub.base, err and err.code or "error"), cause = err and err.code }
    end
    local loc = header(res, "location")
    if res.status >= 300 and res.status < 400 and loc then
      local nxt = resolve_location(url, loc)
      if not nxt then return nil, { code = "hub_error", message = "the Hub sent a redirect obleth cannot follow" } end
      url = nxt
    else
      return res
    end
  end
  return nil, { code = "hub_error", message = "the Hub redirected too many times" }
end

local function page(hub, repo_id)
  return hub.base .. "/" .. repo_id
end

-- Turn an error answer into {code, message, ...}.
local function classify(res, ctx)
  local status, code = res.status, header(res, "x-error-code")
  local said = hub_message(res)
  local repo = ctx.repo_id
  if status == 429 then
    local wait = retry_after(res)
    return { code = "rate_limited", retry_after = wait,
             message = ("the Hugging Face Hub is rate limiting these requests: try again in %s"):format(
               wait and (wait .. " s") or "a few minutes")
               .. (ctx.token and "" or "; a Hugging Face token in Cluster defaults raises the limit") }
  end
  if status >= 500 then
    return { code = "hub_unreachable", message = ("the Hugging Face Hub answered %d: try again later"):format(status) }
  end
  if code == "GatedRepo" then
    if ctx.token then
      return { code = "no_access", message = ("%s is gated and the Hugging Face token in Cluster defaults has no"
        .. " access: request access on the repo page %s"):format(repo, page(ctx.hub, repo)) }
    end
    return { code = "gated_no_token", message = ("%s is gated: set the Hugging Face token in Cluster defaults"
      .. " (after requesting access on %s)"):format(repo, page(ctx.hub, repo)) }
  end
  if code == "RevisionNotFound" then
    return { code = "not_found", field = "revision",
             message = ("%s has no revision %q"):format(repo, ctx.revision or "main") }
  end
  if ctx.token and status == 401 and code ~= "RepoNotFound" and said and said:lower():find("credential") then
    return { code = "invalid_token", message = "the Hub refused the Hugging Face token in Cluster defaults"
      .. " (invalid or expired): replace it with a valid read token" }
  end
  if status == 401 or status == 404 or code == "RepoNotFound" then
    if ctx.token then
      return { code = "not_found", field = "repo_id",
               message = ("%s was not found on the Hugging Face Hub, or the token in Cluster defaults cannot see"
                 .. " it (private repo): check the repo id"):format(repo) }
    end
    return { code = "not_found", field = "repo_id",
             message = ("%s was not found on the Hugging Face Hub. If it is a private repo, set the Hugging Face"
               .. " token in Cluster defaults"):format(repo) }
  end
  if status == 403 then
    if ctx.token then
      return { code = "no_access", message = ("the Hugging Face token in Cluster defaults cannot read %s: request"
        .. " access on the repo page %s, or use a token with read permission"):format(repo, page(ctx.hub, repo)) }
    end
    return { code = "gated_no_token", message = ("the Hub refused access to %s: set the Hugging Face token in"
      .. " Cluster defaults"):format(repo) }
  end
  return { code = "hub_error", message = ("the Hugging Face Hub answered %d%s"):format(status,
    said and (": " .. said) or "") }
end

local function valid_token(t)
  return #t >= 4 and #t <= 512 and not t:find("[^%w%-%._~%+/=]")
end

--- Inspect a repo: read its model info and detect the engines that can run it.
---@param repo_id string
---@param opts table|nil {revision=string, token=string, endpoint=string, timeout=seconds (15), gpu_type=string}
---@return table|nil result the detect result (see obleth.hf.detect) plus repo_id, revision (commit sha),
---  requested_revision, gated (false|"auto"|"manual"), private, endpoint, access ("public"|"granted"|
---  "unconfirmed"), cached
---@return table|nil err {code="invalid_repo_id"|"invalid_revision"|"bad_endpoint"|"invalid_token"|
---  "gated_no_token"|"no_access"|"not_found"|"rate_limited"|"hub_unreachable"|"hub_error", message,
---  field?, retry_after?}
function Client:inspect(repo_id, opts)
  opts = opts or {}
  local rid, err = validate.repo_id(repo_id)
  if not rid then err.field = "repo_id"; return nil, err end
  local rev = opts.revision
  if rev == "" then rev = nil end
  if rev ~= nil then
    rev, err = validate.revision(rev)
    if not rev then err.field = "revision"; return nil, err end
  end
  local hub
  hub, err = parse_endpoint(opts.endpoint or os.getenv("HF_ENDPOINT") or M.DEFAULT_ENDPOINT)
  if not hub then return nil, err end
  local token = opts.token
  if type(token) ~= "string" or token == "" then token = nil end
  if token then
    self.log.add_secret(token)
    if not valid_token(token) then
      return nil, { code = "invalid_token",
                    message = "the Hugging Face token in Cluster defaults is malformed: paste the token again" }
    end
  end
  local timeout = opts.timeout or 15
  local ctx = { repo_id = rid, revision = rev, token = token, hub = hub }

  local key = table.concat({ hub.base, rid, rev or "", token and "token" or "anonymous" }, "\0")
  local entry = self:_cache_get(key)
  local cached = entry ~= nil
  if not entry then
    entry = self:_fetch(ctx, timeout)
    if entry.err then
      if entry.err.code == "not_found" then self:_cache_put(key, entry, self.not_found_ttl) end
    else
      self:_cache_put(key, entry, self.ttl)
    end
  end
  self.log.info("hf_inspect", { repo = rid, revision = rev, cached = cached,
    result = entry.err and entry.err.code or "ok", authenticated = token ~= nil })
  if entry.err then
    local e = {}
    for k, v in pairs(entry.err) do e[k] = v end
    return nil, e
  end

  local info = entry.info
  local r = detect.detect(info, { gpu_type = opts.gpu_type, repo_id = rid, revision = rev })
  r.requested_revision = rev
  r.gated = type(info.gated) == "string" and info.gated or false
  r.private = info.private == true
  r.endpoint = hub.base
  r.access = entry.access
  r.cached = cached
  if entry.note then table.insert(r.notes, 1, entry.note) end
  if type(info.id) == "string" and info.id ~= rid then
    table.insert(r.notes, 1, ("the Hub answered for %s (the repo was renamed or moved)"):format(info.id))
  end
  return r
end

-- One round trip (two for a gated repo with a token): {info, access, note} or {err}.
function Client:_fetch(ctx, timeout)
  local hub, rid, rev, token = ctx.hub, ctx.repo_id, ctx.revision, ctx.token
  local url = hub.base .. "/api/models/" .. rid
    .. (rev and ("/revision/" .. validate.encode_revision(rev)) or "") .. "?blobs=true"
  local res, err = self:_get(url, token, hub, timeout)
  if not res then return { err = err } end
  if res.status ~= 200 then return { err = classify(res, ctx) } end
  local ok, info = pcall(cjson.decode, res.body or "")
  if not ok or type(info) ~= "table" or (info.id == nil and info.siblings == nil) then
    return { err = { code = "hub_error", message = "the Hugging Face Hub sent model info obleth cannot read" } }
  end
  if type(info.gated) ~= "string" then
    return { info = info, access = token and "granted" or "public" }
  end
  if not token then
    return { err = classify({ status = 401, headers = { ["x-error-code"] = "GatedRepo" } }, ctx) }
  end
  -- gated, with a token: the model info is public, so ask whether the token may download
  res, err = self:_get(hub.base .. "/api/models/" .. rid .. "/auth-check", token, hub, timeout)
  if not res then return { err = err } end
  if res.status == 200 then return { info = info, access = "granted" } end
  if res.status == 404 and not header(res, "x-error-code") then
    return { info = info, access = "unconfirmed",
             note = "the Hub endpoint could not confirm that the token has access to this gated repo" }
  end
  return { err = classify(res, ctx) }
end

return M
