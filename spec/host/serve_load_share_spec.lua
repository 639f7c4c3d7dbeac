-- Two `obleth serve` on one PostgreSQL (Debian's, started here on a unix socket in its own directory:
-- no TCP port to collide with a harness cluster's), as behind a load
-- balancer: streams sent to each are counted by each router, and the provisioner's snapshot, read
-- through either, carries their sum as the model's load; /metrics says what the scale policy wants for
-- it. An instance SIGKILLed stops counting once its expiry has passed (here 3 s, publishing every 1 s:
-- OBLETH_LOAD_SHARE_INTERVAL / OBLETH_LOAD_SHARE_EXPIRY).
local pgs = require "spec.support.pg"
local available, why = pgs.available()

describe("the router's load window shared by two obleth serve on PostgreSQL", function()
  if not available then
    it("needs PostgreSQL", function() pending(why or "needs Debian's postgresql-15") end)
    return
  end
  local server = require "spec.support.server"
  local util = require "spec.support.util"
  local loop = require "obleth.loop"
  local http = require "obleth.http"
  local sys = require "obleth.sys"
  local cjson = require "cjson"
  local smoke = require "obleth.testing"
  local a, b, engine_srv, dir
  local pg = util.root() .. "/spec/support/pg.sh"

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    local fh = assert(io.popen(("%s start %s"):format(util.shq(pg), util.shq(dir))))
    local url = fh:read("l")
    fh:close()
    assert(url and url:match("^postgresql://"), "PostgreSQL did not start in " .. dir)
    local token = sys.random_hex(24)
    local env = { OBLETH_LOAD_SHARE_INTERVAL = "1", OBLETH_LOAD_SHARE_EXPIRY = "3" }
    a = server.start { db = url, token = token, env = env }
    b = server.start { db = url, token = token, env = env }
    -- each stream lasts 600 × 0.1 s: in flight for the whole test
    local engine = smoke.new { model = "shared-m", tokens = 600, token_delay = 0.1 }
    engine_srv = assert(http.server { host = "127.0.0.1", port = 0, handler = engine:handler() })
  end)
  teardown(function()
    if a then a:stop() end
    if b then b:stop("KILL") end
    if engine_srv then engine_srv:close() end
    if dir then os.execute(("%s stop %s"):format(util.shq(pg), util.shq(dir))) end
  end)

  local function ok(srv, method, path, body)
    local st, doc, raw = srv:request(method, path, body)
    assert(st and st < 300, ("%s %s -> %s %s"):format(method, path, tostring(st), tostring(raw)))
    return doc
  end

  local function snapshot_load(srv, name)
    for _, m in ipairs(ok(srv, "GET", "/api/v1/provisioner/snapshot").models) do
      if m.name == name then return m.load end
    end
    error("no model " .. name .. " in the snapshot of " .. srv.base)
  end

  local function metric(srv, line_start)
    local r = assert(http.request { url = srv.base .. "/metrics", timeout = 10 })
    for line in r.body:gmatch("[^\n]+") do
      if line:sub(1, #line_start) == line_start then return tonumber(line:match("(%S+)$")) end
    end
  end

  local function stream(srv)
    return http.request { url = srv.base .. "/v1/chat/completions", method = "POST", timeout = 120,
      headers = { ["Content-Type"] = "application/json" },
      body = cjson.encode { model = "shared-m", stream = true, messages = { { role = "user", content = "hi" } } } }
  end

  it("the snapshot and /metrics of either instance count the streams sent to both; a killed one stops counting "
    .. "after its expiry", function()
    ok(a, "PUT", "/api/v1/settings/router", { keyless = true })
    local m = ok(a, "POST", "/api/v1/models", { name = "shared-m" })
    m = m.model or m
    -- an autoscaled spec (the provisioner is not running: nothing is submitted), served by the engine here
    ok(a, "PUT", "/api/v1/models/" .. m.id .. "/managed?check=false", { partition = "gpu", account = "research",
      time_limit = 10, nodes = 1, cpus_per_node = 1, memory_per_node = 200, launch_command = "obleth smoke-engine",
      autoscale = { min_replicas = 0, max_replicas = 4, target_inflight = 2, scale_down_after = 300,
        idle_to_zero_after = 600 } })
    ok(b, "POST", "/api/v1/models/" .. m.id .. "/endpoints", { url = "http://127.0.0.1:" .. engine_srv:port() })
    util.wait_until(function() return metric(a, "obleth_load_share_instances ") == 2 and
      metric(b, "obleth_load_share_instances ") == 2 end, 30, "each instance to see the other")

    -- 3 streams through a, 2 through b, all in flight
    for i = 1, 5 do loop.spawn(function() stream(i <= 3 and a or b) end) end
    util.wait_until(function() return snapshot_load(a, "shared-m").inflight == 5 end, 30,
      "a's snapshot to count the 5 streams in flight")
    util.wait_until(function() return snapshot_load(b, "shared-m").inflight == 5 end, 30,
      "b's snapshot to count the 5 streams in flight")
    local la = snapshot_load(a, "shared-m")
    local peak = 0
    for _, s in ipairs(la.samples) do peak = math.max(peak, s.inflight + s.queued) end
    assert.equal(5, peak, "the buckets of the window add up too")
    -- what the scale policy wants on either: ceil(5 / target_inflight 2) = 3 (alone, a would say 2, b 1)
    assert.equal(3, metric(a, 'obleth_model_desired_replicas{model="shared-m"}'))
    assert.equal(3, metric(b, 'obleth_model_desired_replicas{model="shared-m"}'))

    -- b dies without a word: once its last publish is 3 s old, a counts its own 3 only
    b:stop("KILL")
    util.wait_until(function() return snapshot_load(a, "shared-m").inflight == 3 end, 30,
      "a's snapshot to stop counting b's 2 streams")
    assert.equal(1, metric(a, "obleth_load_share_instances "))
    assert.equal(2, metric(a, 'obleth_model_desired_replicas{model="shared-m"}'))
  end)
end)
