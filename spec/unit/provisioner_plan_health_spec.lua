-- The pass's health step (obleth.provisioner.plan.health): what one check's result means for a replica,
-- and the endpoints and restarts of a whole pass.
local health = require "obleth.provisioner.plan.health"

local NOW = 1764500000
local H = { startup_grace = 60, failure_threshold = 2, interval = 5, path = "/ready", timeout = 2 }
local OK, FAIL = { ok = true, status = 200 }, { ok = false, status = 503, error = "HTTP 503" }

describe("provisioner plan, health step: judge", function()
  it("starting: a passing check makes it healthy; failing ones are waited for until the startup grace ends", function()
    local r = { state = "starting", started_at = NOW - 10, problem = "x" }
    assert.is_nil(health.judge(r, OK, H, NOW))
    assert.same({ "healthy", NOW, 0 }, { r.state, r.healthy_at, r.check_failures })
    assert.is_nil(r.problem)
    r = { state = "starting", started_at = NOW - 10 }
    assert.is_nil(health.judge(r, FAIL, H, NOW))
    assert.equal("starting", r.state)
    r = { state = "starting", started_at = NOW - 61 }
    assert.equal("startup grace exceeded", health.judge(r, FAIL, H, NOW))
    assert.equal("ending", r.state)
    assert.matches("not healthy 61 s after start %(startup grace 60 s%): HTTP 503", r.problem)
  end)

  it("healthy: unhealthy after failure_threshold failed checks in a row; a passing check resets the count", function()
    local r = { state = "healthy" }
    health.judge(r, FAIL, H, NOW)
    assert.same({ "healthy", 1 }, { r.state, r.check_failures })
    health.judge(r, OK, H, NOW)
    assert.equal(0, r.check_failures)
    health.judge(r, FAIL, H, NOW)
    health.judge(r, { ok = false, error = "timeout" }, H, NOW)
    assert.same({ "unhealthy", NOW, "health check failing: timeout" }, { r.state, r.unhealthy_since, r.problem })
    assert.same({ ok = false, error = "timeout", at = NOW }, r.last_check)
  end)

  it("unhealthy: back to healthy on a passing check; restarted once unhealthy past the grace", function()
    local r = { state = "unhealthy", unhealthy_since = NOW - 10, problem = "x" }
    health.judge(r, OK, H, NOW)
    assert.same({ "healthy", nil, nil }, { r.state, r.unhealthy_since, r.problem })
    r = { state = "unhealthy", unhealthy_since = NOW - 61 }
    assert.equal("unhealthy past grace", health.judge(r, FAIL, H, NOW))
    assert.same({ "ending", "unhealthy for longer than the grace period" }, { r.state, r.problem })
  end)

  it("the defaults: a 600 s startup grace and 3 failures", function()
    local r = { state = "starting", started_at = NOW - 599 }
    assert.is_nil(health.judge(r, FAIL, {}, NOW))
    r = { state = "healthy", check_failures = 2 }
    health.judge(r, FAIL, {}, NOW)
    assert.equal("unhealthy", r.state)
  end)
end)

describe("provisioner plan, health step: apply and due", function()
  local function state(rows) return { models = { { id = 4, spec = { health = H }, rows = rows } } } end

  it("the endpoints are the healthy replicas', sorted; restarts come with their job and why", function()
    local a = { nonce = "a", state = "healthy", endpoint = "http://n2:1" }
    local b = { nonce = "b", state = "starting", started_at = NOW - 1, endpoint = "http://n1:1" }
    local c = { nonce = "c", state = "starting", started_at = NOW - 100, endpoint = "http://n3:1", job_id = 9 }
    local eps, cancels = health.apply(state({ a, b, c }), { b = OK, c = FAIL }, NOW)
    assert.same({ ["4"] = { "http://n1:1", "http://n2:1" } }, eps)
    assert.same({ { row = c, job_id = 9, why = "startup grace exceeded" } }, cancels)
    assert.is_nil(a._touched, "a replica without a result is left as it is")
  end)

  it("due: running replicas with an endpoint whose interval has passed, at the spec's path and timeout", function()
    local a = { nonce = "a", state = "healthy", endpoint = "http://h:1" }
    local p = { nonce = "p", state = "submitted", endpoint = "http://h:2" }
    local st = state({ a, p })
    assert.same({ { row = a, url = "http://h:1/ready", timeout = 2 } }, health.due(st, {}, NOW))
    assert.same({}, health.due(st, { a = NOW - 4 }, NOW))
    assert.equal(1, #health.due(st, { a = NOW - 5 }, NOW))
  end)
end)
