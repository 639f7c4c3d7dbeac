--- obleth.web — the dashboard's files, served by `obleth serve` (docs/dashboard.md).
--
-- The web build (`make`) writes `index.html` and `assets/<name>-<hash>.<ext>`
-- into the web directory (build/web in a source tree, $PREFIX/share/obleth/web
-- once installed). The page paths answer index.html (revalidated every time);
-- /assets/<file> answers the file, cacheable for a year (its name changes with
-- its content); the build also writes <file>.gz, answered with Content-Encoding: gzip
-- when the request's Accept-Encoding takes gzip (every asset answer says
-- Vary: Accept-Encoding). Every answer carries the security headers below.
local sys = require "obleth.sys"

local M = {}

--- No inline script or style, no eval, nothing from another origin, no framing.
M.CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
  .. "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

--- Headers of every dashboard answer (pages, assets, errors).
M.HEADERS = {
  ["Content-Security-Policy"] = M.CSP,
  ["X-Content-Type-Options"] = "nosniff",
  ["Referrer-Policy"] = "no-referrer",
  ["X-Frame-Options"] = "DENY",
}

--- Content types by file extension; other files are application/octet-stream.
M.TYPES = {
  html = "text/html; charset=utf-8", js = "text/javascript; charset=utf-8", mjs = "text/javascript; charset=utf-8",
  css = "text/css; charset=utf-8", map = "application/json", json = "application/json",
  svg = "image/svg+xml", png = "image/png", ico = "image/x-icon", webp = "image/webp", jpg = "image/jpeg",
  txt = "text/plain; charset=utf-8", woff2 = "font/woff2",
}

M.ASSET_CACHE = "public, max-age=31536000, immutable"
--- Bytes of assets kept in memory (files are read once: their names change with their content).
M.CACHE_LIMIT = 64 * 1024 * 1024

--- The page paths of the app (each answers index.html).
---@param path string the request path (no query)
---@return boolean
function M.is_page(path)
  if path == "/" or path == "/signin" or path == "/deployments" or path == "/deployments/new" or path == "/keys"
    or path == "/cluster" or path == "/tokens" or path == "/audit" then
    return true
  end
  return path:match("^/deployments/[^/]+$") ~= nil or path:match("^/docs/[a-z0-9-]+$") ~= nil
end

--- The web directory used when none is given: `build/web` when obleth runs
--- from a source tree, else `share/obleth/web` beside the installed Lua modules.
---@param share string|nil default sys.paths.share
function M.default_dir(share)
  share = share or sys.paths.share or "."
  local st = sys.stat(share .. "/host/main.c")
  if st and st.type == "file" then return share .. "/build/web" end
  return share .. "/web"
end

local Web = {}
Web.__index = Web

--- The file server for `dir`.
---@param opts {dir: string}
function M.new(opts)
  return setmetatable({ dir = opts.dir, assets = {}, cached = 0, index = nil }, Web)
end

local function _read(path)
  local fh = io.open(path, "rb")
  if not fh then return nil end
  local body = fh:read("a")
  fh:close()
  return body
end

local function _headers(extra)
  local h = {}
  for k, v in pairs(M.HEADERS) do h[k] = v end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

--- A plain-text answer with the dashboard's headers.
---@param status integer
---@param msg string
---@param extra table|nil more headers
function M.text(status, msg, extra)
  local h = _headers(extra)
  h["Content-Type"] = "text/plain; charset=utf-8"
  h["Cache-Control"] = "no-store"
  return { status = status, headers = h, body = msg .. "\n" }
end
local _text = M.text

-- index.html, re-read when its size or modification time changes (a rebuild)
function Web:_index()
  local path = self.dir .. "/index.html"
  local st = sys.stat(path)
  if not st or st.type ~= "file" then return nil end
  local c = self.index
  if c and c.mtime == st.mtime and c.size == st.size then return c.body end
  local body = _read(path)
  if body then self.index = { mtime = st.mtime, size = st.size, body = body } end
  return body
end

-- An asset by file name: one plain name (no directories, no dot files).
function Web:_asset(name)
  if not name:match("^[%w][%w._-]*$") or name:find("..", 1, true) then return nil end
  local c = self.assets[name]
  if c then return c end
  local path = self.dir .. "/assets/" .. name
  local st = sys.stat(path)
  if not st or st.type ~= "file" then return nil end
  local body = _read(path)
  if not body then return nil end
  local ext = name:match("%.([%w]+)$")
  c = { body = body, type = M.TYPES[ext and ext:lower() or ""] or "application/octet-stream" }
  local gst = sys.stat(path .. ".gz")
  if gst and gst.type == "file" then c.gzip = _read(path .. ".gz") end
  local size = #body + (c.gzip and #c.gzip or 0)
  if self.cached + size <= M.CACHE_LIMIT then
    self.assets[name] = c
    self.cached = self.cached + size
  end
  return c
end

--- True when an Accept-Encoding header takes gzip (RFC 9110: "gzip" or "*" without q=0).
---@param h string|nil
---@return boolean
function M.accepts_gzip(h)
  if type(h) ~= "string" then return false end
  local star
  for item in h:gmatch("[^,]+") do
    local coding, params = item:match("^%s*([%w%*%-]+)%s*(.-)%s*$")
    if coding then
      local q = params:match("[qQ]%s*=%s*([%d.]+)")
      local ok = not q or (tonumber(q) or 0) > 0
      coding = coding:lower()
      if coding == "gzip" or coding == "x-gzip" then return ok end
      if coding == "*" then star = ok end
    end
  end
  return star == true
end

--- Answer a request outside /api/, /v1/ and /metrics.
---@param req {method: string, path: string}
---@return table {status, headers, body}
function Web:serve(req)
  local path = req.path or "/"
  local page = M.is_page(path)
  local asset = path:match("^/assets/(.+)$")
  if not page and not asset then return _text(404, "not found") end
  if req.method ~= "GET" and req.method ~= "HEAD" then
    return _text(405, "method not allowed", { Allow = "GET, HEAD" })
  end
  if page then
    local body = self:_index()
    if not body then
      return _text(503, ("the dashboard is not built: no %s/index.html. Run `make` in the source tree "
        .. "(or `make install`), or point `obleth serve --web-dir` (OBLETH_WEB_DIR) at a built dashboard.")
        :format(self.dir))
    end
    return { status = 200, body = body,
      headers = _headers { ["Content-Type"] = M.TYPES.html, ["Cache-Control"] = "no-cache" } }
  end
  local a = self:_asset(asset)
  if not a then return _text(404, "not found") end
  local h = _headers { ["Content-Type"] = a.type, ["Cache-Control"] = M.ASSET_CACHE, Vary = "Accept-Encoding" }
  if a.gzip and M.accepts_gzip((req.headers or {})["accept-encoding"]) then
    h["Content-Encoding"] = "gzip"
    return { status = 200, body = a.gzip, headers = h }
  end
  return { status = 200, body = a.body, headers = h }
end

return M
