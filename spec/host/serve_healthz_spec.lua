-- GET /healthz, the readiness check a load balancer (make chaos-ha's HAProxy) or a Kubernetes probe
-- uses: 200 while the store answers, 503 while PostgreSQL is unreachable (here: stopped, then started
-- again on the same directory), no token needed. /metrics is no such check: it answers 200 from what
-- the process holds while the database is down.
local pgs = require "spec.support.pg"
local server = require "spec.support.server"
local util = require "spec.support.util"
local http = require "obleth.http"

local function get(srv, path, method)
  local r = assert(http.request { url = srv.base .. path, method = method or "GET", timeout = 10 })
  return r.status, r.body
end

describe("GET /healthz", function()
  it("answers 200 without a token on SQLite, and 405 to a POST", function()
    local srv = server.start {}
    finally(function() srv:stop() srv:cleanup() end)
    local st, body = get(srv, "/healthz")
    assert.equal(200, st)
    assert.equal('{"status":"ok"}', body)
    assert.equal(405, (get(srv, "/healthz", "POST")))
  end)

  local available, why = pgs.available()
  -- (its own server, started and stopped here: the run's shared one, OBLETH_TEST_PG_URL, is never stopped)
  if not available then
    it("fails while PostgreSQL is unreachable", function() pending(why or "needs Debian's postgresql-15") end)
    return
  end
  it("answers 503 while PostgreSQL is stopped, and 200 again once it is back", function()
    local dir = os.tmpname()
    os.remove(dir)
    local pg = util.root() .. "/spec/support/pg.sh"
    local fh = assert(io.popen(("%s start %s"):format(util.shq(pg), util.shq(dir))))
    local url = fh:read("l")
    fh:close()
    local srv
    finally(function()
      if srv then srv:stop() end
      os.execute(("%s stop %s"):format(util.shq(pg), util.shq(dir)))
    end)
    srv = server.start { db = url }
    assert.equal(200, (get(srv, "/healthz")))
    assert.is_true(os.execute(("%s down %s"):format(util.shq(pg), util.shq(dir))))
    local st, body = get(srv, "/healthz")
    assert.equal(503, st)
    assert.same({ status = "unavailable", reason = "storage" }, require("cjson").decode(body))
    assert.equal(200, (get(srv, "/metrics"))) -- why /metrics is not the readiness check
    assert.is_true(os.execute(("%s up %s"):format(util.shq(pg), util.shq(dir))))
    util.wait_until(function() return get(srv, "/healthz") == 200 end, 30, "/healthz to answer 200 again")
  end)
end)
