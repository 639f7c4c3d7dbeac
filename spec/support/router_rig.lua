-- What the in-process router specs share: smoke engines on real ports, a port
-- nothing listens on, and requests to the router with a client key.
--   local rig = require("spec.support.router_rig").new()
--   local store, process, srv = rig:start{admin_token = "...", router = {...}, clock = fn?}
--     obleth serve (obleth.serve: .context, .router, .api) over a SQLite store in memory on a real port, with a
--     client key (rig.key)
--   local e, url, srv = rig:engine("label", {model = "m", ...})  -- obleth.testing options
--   rig.dead_url()
--   rig.base, rig.key = "http://127.0.0.1:port", "obk_..."     -- set once the router is up
--   rig:req(method, path, body_table_or_string?, headers?, http_opts?) -> answer (raises on transport errors)
--     headers.Authorization = false sends none; the default is "Bearer <rig.key>"
--   rig:close()  closes the engines, and the server and store of start
local http = require "obleth.http"
local cjson = require "cjson"
local smoke = require "obleth.testing"

local M = {}
local Rig = {}
Rig.__index = Rig

function M.new()
  return setmetatable({ servers = {} }, Rig)
end

function Rig:engine(label, opts)
  opts = opts or {}
  opts.model = opts.model or "m"
  opts.replica = label
  local e = smoke.new(opts)
  local s = assert(http.server { host = "127.0.0.1", port = 0, handler = e:handler() })
  self.servers[#self.servers + 1] = s
  return e, "http://127.0.0.1:" .. s:port(), s
end

--- A URL on a port nothing listens on.
function M.dead_url()
  local s = assert(http.server { host = "127.0.0.1", port = 0, handler = function() end })
  local port = s:port()
  s:close()
  return "http://127.0.0.1:" .. port
end
Rig.dead_url = M.dead_url

function Rig:req(method, path, body, headers, opts)
  local h = { Authorization = "Bearer " .. self.key }
  for k, v in pairs(headers or {}) do h[k] = v end
  if h.Authorization == false then h.Authorization = nil end
  if type(body) == "table" then body = cjson.encode(body); h["Content-Type"] = "application/json" end
  local o = { url = self.base .. path, method = method, headers = h, body = body, timeout = 10 }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(http.request(o))
end

function Rig:start(opts)
  local store = assert(require("obleth.store").open(":memory:"))
  local process = require("obleth.serve").new { store = store, admin_token = opts.admin_token, router = opts.router,
    clock = opts.clock }
  local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = process:handler() })
  self.base = "http://127.0.0.1:" .. srv:port()
  local g = require("obleth.api.keys").generate()
  assert(store:create_api_key { name = "spec", prefix = g.prefix, hash = g.hash })
  self.key = g.key
  self.store, self.srv = store, srv
  return store, process, srv
end

--- Close the engines, and what start made.
function Rig:close()
  for _, s in ipairs(self.servers) do s:close() end
  self.servers = {}
  if self.srv then self.srv:close() end
  if self.store then self.store:close() end
  self.srv, self.store = nil, nil
end

return M
