-- A front server for the res:proxy specs (spec/host/http_proxy*_spec.lua): it
-- proxies every request to 127.0.0.1:port and records what res:proxy returned.
--   local srv, base, results = require("spec.support.proxy_front")(port, opts)
-- port: a number, or a function read per request; opts: extra res:proxy options.
-- results[i] = {status, why, message, ttfb} of the i-th call (when nothing reached the
-- client res:proxy returns nil, {code, message}: why and message are that error's, and
-- error_shape is true when it had that shape); the front then answers 502 "proxy: <why>" itself.
local http = require("obleth.http")

return function(port, opts)
  local results = {}
  local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = function(_, res)
    local o = { host = "127.0.0.1", port = type(port) == "function" and port() or port }
    for k, v in pairs(opts or {}) do o[k] = v end
    local st, why, msg, ttfb = res:proxy(o)
    local shape
    if not st then
      shape = type(why) == "table" and type(why.code) == "string" and msg == nil
      why, msg = type(why) == "table" and why.code or why, type(why) == "table" and why.message or msg
    end
    results[#results + 1] = { status = st, why = why, message = msg, ttfb = ttfb, error_shape = shape }
    if not st and not res:sent() then
      res:send(502, { ["Content-Type"] = "text/plain" }, "proxy: " .. tostring(why))
    end
  end })
  return srv, "http://127.0.0.1:" .. srv:port(), results
end
