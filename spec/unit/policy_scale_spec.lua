-- Autoscaling decisions with values worked out by hand. Settings unless a test says otherwise:
-- target_inflight 4, min 0, max 5, scale_down_after 300 s, idle_to_zero_after 1200 s; the policy's
-- down_utilization 0.8 means a replica counts for 4 × 0.8 = 3.2 requests when scaling down.
local scale = require "obleth.policy.scale"

local NOW = 100000
local AS = { min_replicas = 0, max_replicas = 5, target_inflight = 4, scale_down_after = 300,
  idle_to_zero_after = 1200 }

local function replicas(...)
  local out = {}
  for i, st in ipairs({ ... }) do out[i] = { slot = i, state = st, job_id = 100 + i } end
  return out
end

-- ten-second buckets from now - span to now, all at one demand
local function flat(span, inflight)
  local out = {}
  for at = NOW - span, NOW - 10, 10 do out[#out + 1] = { at = at, span = 10, inflight = inflight, queued = 0 } end
  return out
end

local function decide(load, reps, as)
  return scale.decide({ now = NOW, autoscale = as or AS, replicas = reps, load = load })
end

describe("policy.scale", function()
  it("scales up at once to ceil(demand / target_inflight)", function()
    -- 9 in flight + 2 queued = 11 requests; 11 / 4 = 2.75 → 3 replicas, from 1
    local d = decide({ inflight = 9, queued = 2, last_request_at = NOW, samples = flat(600, 3) },
      replicas("healthy"))
    assert.equal(3, d.desired)
    assert.equal("up", d.change)
    assert.equal(11, d.evidence.demand)
    assert.equal(3, d.evidence.need)
    assert.equal(1, d.current)
  end)

  it("counts replicas pending in Slurm's queue as capacity on its way, and lists them soonest first", function()
    -- 11 requests want 3; 1 healthy + 2 pending = 3 already: nothing more
    local reps = replicas("healthy", "pending", "pending")
    reps[2].slurm = { reason = "Priority", start_time = NOW + 600 }
    reps[3].slurm = { reason = "Resources", start_time = NOW + 120 }
    local d = decide({ inflight = 9, queued = 2, last_request_at = NOW, samples = flat(600, 11) }, reps)
    assert.equal(3, d.desired)
    assert.equal("none", d.change)
    assert.equal(103, d.evidence.starting[1].job_id)
    assert.equal(NOW + 120, d.evidence.starting[1].estimated_start)
    assert.equal("Priority", d.evidence.starting[2].reason)
  end)

  it("never asks for more than max_replicas", function()
    -- 40 requests / 4 = 10, capped at 5
    local d = decide({ inflight = 40, last_request_at = NOW, samples = flat(600, 40) }, replicas("healthy"))
    assert.equal(5, d.desired)
    assert.matches("max_replicas 5", d.reason)
  end)

  it("rate × mean latency counts when the requests are shorter than a sample", function()
    -- 3 req/s × 2.5 s = 7.5 concurrent although none is in flight at the pass; 7.5 / 4 → 2
    local d = decide({ inflight = 0, queued = 0, rate = 3, latency = 2.5, last_request_at = NOW,
      samples = flat(600, 0) }, replicas("healthy"))
    assert.equal(7.5, d.evidence.demand)
    assert.equal(2, d.desired)
  end)

  it("tokens count when target_tokens_per_s is set and the engine reports them", function()
    -- 1 request in flight needs 1; 2500 tok/s over 1000 per replica → 3
    local d = scale.decide({ now = NOW, autoscale = AS, replicas = replicas("healthy"),
      load = { inflight = 1, tokens_per_s = 2500, last_request_at = NOW, samples = flat(600, 1) } },
      { target_tokens_per_s = 1000 })
    assert.equal(3, d.desired)
    -- without the setting the tokens are evidence only
    local d2 = decide({ inflight = 1, tokens_per_s = 2500, last_request_at = NOW, samples = flat(600, 1) },
      replicas("healthy"))
    assert.equal(1, d2.desired)
  end)

  describe("scaling down (hysteresis)", function()
    it("waits a whole scale_down_after window below 80 % of target", function()
      -- 3 replicas, now 2 in flight; but 7 requests 200 s ago: peak 7 / 3.2 = 2.19 → 3 stay
      local samples = flat(600, 2)
      samples[#samples + 1] = { at = NOW - 200, span = 10, inflight = 7 }
      local d = decide({ inflight = 2, last_request_at = NOW, samples = samples },
        replicas("healthy", "healthy", "healthy"))
      assert.equal(3, d.desired)
      assert.equal("none", d.change)
      assert.equal(7, d.evidence.peak)
      assert.equal(3, d.evidence.down_need)
    end)

    it("a burst older than scale_down_after no longer holds its replicas", function()
      -- the 7 was 400 s ago, outside the 300 s window: peak 2 / 3.2 → 1 replica
      local samples = flat(600, 2)
      samples[#samples + 1] = { at = NOW - 400, span = 10, inflight = 7 }
      local d = decide({ inflight = 2, last_request_at = NOW, samples = samples },
        replicas("healthy", "healthy", "healthy"))
      assert.equal(1, d.desired)
      assert.equal("down", d.change)
      assert.matches("peak demand 2 over the last 300 s fits 1", d.reason)
    end)

    it("a load hovering at the boundary neither adds nor removes a replica", function()
      -- 2 replicas; the load swings between 4 and 7 requests: up needs ceil(7/4) = 2 (no add),
      -- down needs ceil(7/3.2) = 3 > 2 (no removal); at 4 alone, ceil(4/3.2) = 2 still
      local samples = {}
      for i = 1, 60 do samples[i] = { at = NOW - 600 + (i - 1) * 10, span = 10, inflight = i % 2 == 0 and 7 or 4 } end
      for _, now_inflight in ipairs({ 4, 7 }) do
        local d = decide({ inflight = now_inflight, last_request_at = NOW, samples = samples },
          replicas("healthy", "healthy"))
        assert.equal(2, d.desired)
        assert.equal("none", d.change)
      end
      local d = decide({ inflight = 4, last_request_at = NOW, samples = flat(600, 4) }, replicas("healthy", "healthy"))
      assert.equal(2, d.desired, "4 requests / 3.2 = 1.25 → 2: a load at exactly one replica's target keeps two")
    end)

    it("never scales down before the window reaches back scale_down_after", function()
      -- samples only for the last 100 s: no scale-down whatever they say
      local d = decide({ inflight = 0, last_request_at = NOW - 50, samples = flat(100, 0) },
        replicas("healthy", "healthy", "healthy"))
      assert.equal(3, d.desired)
      assert.equal("hold", d.change)
    end)

    it("a sparse window (buckets only where there was load) counts from observed_since", function()
      -- no bucket in the last 300 s, but the window began 1000 s ago: nothing in flight → 1 replica
      local d = decide({ inflight = 0, last_request_at = NOW - 100, observed_since = NOW - 1000,
        samples = { { at = NOW - 900, span = 10, inflight = 9 } } }, replicas("healthy", "healthy", "healthy"))
      assert.equal(1, d.desired)
      -- begun 200 s ago (obleth serve restarted): too short to scale down
      d = decide({ inflight = 0, last_request_at = NOW - 100, observed_since = NOW - 200, samples = {} },
        replicas("healthy", "healthy", "healthy"))
      assert.equal("hold", d.change)
    end)

    it("keeps one replica while a request came within idle_to_zero_after", function()
      -- idle 600 s < 1200 s: down to 1, not 0
      local d = decide({ inflight = 0, last_request_at = NOW - 600, samples = flat(900, 0) },
        replicas("healthy", "healthy"))
      assert.equal(1, d.desired)
      assert.equal(1, d.evidence.floor)
    end)

    it("keeps min_replicas", function()
      local as = { min_replicas = 2, max_replicas = 5, target_inflight = 4, scale_down_after = 300,
        idle_to_zero_after = 1200 }
      local d = decide({ inflight = 0, last_request_at = NOW - 5000, samples = flat(900, 0) },
        replicas("healthy", "healthy", "healthy"), as)
      assert.equal(2, d.desired)
    end)
  end)

  describe("scale to zero and wake", function()
    it("goes to zero after idle_to_zero_after without a request", function()
      -- last request 1200 s ago = idle_to_zero_after
      local d = decide({ inflight = 0, last_request_at = NOW - 1200, samples = flat(1500, 0) }, replicas("healthy"))
      assert.equal(0, d.desired)
      assert.equal("to_zero", d.change)
      assert.matches("no request for 1200 s", d.reason)
    end)

    it("one second short of idle_to_zero_after keeps the replica", function()
      local d = decide({ inflight = 0, last_request_at = NOW - 1199, samples = flat(1500, 0) }, replicas("healthy"))
      assert.equal(1, d.desired)
    end)

    it("a model that never had a request counts idle from the start of the window", function()
      local d = decide({ inflight = 0, observed_since = NOW - 1300, samples = flat(1300, 0) }, replicas("healthy"))
      assert.equal(0, d.desired)
    end)

    it("at zero says since when it is idle", function()
      local d = decide({ inflight = 0, last_request_at = NOW - 1200, samples = {} }, {})
      assert.equal("scaled to zero after 20 min idle — wakes on the next request", d.reason)
    end)

    it("stays at zero without demand (a restart's fresh window wakes nothing)", function()
      local d = decide({ inflight = 0, observed_since = NOW, samples = {} }, {})
      assert.equal(0, d.desired)
      assert.equal("none", d.change)
      assert.matches("wakes on the next request", d.reason)
      assert.is_nil(d.wake)
    end)

    it("a request waiting at zero wakes one replica at once", function()
      local d = decide({ inflight = 0, queued = 1, last_request_at = NOW, observed_since = NOW - 5000,
        samples = flat(600, 0) }, {})
      assert.equal(1, d.desired)
      assert.equal("wake", d.change)
      -- nothing submitted yet: Retry-After falls back to retry_after_unknown (30 s)
      assert.equal(30, d.wake.retry_after)
    end)

    it("a burst at zero wakes ceil(queued / target) at once", function()
      -- 10 queued / 4 → 3
      local d = decide({ queued = 10, last_request_at = NOW, samples = flat(600, 0) }, {})
      assert.equal(3, d.desired)
    end)

    it("names the pending job, its reason and estimated start, and the Retry-After until then", function()
      local reps = replicas("pending")
      reps[1].slurm = { reason = "Priority", start_time = NOW + 95, estimated = true }
      local d = decide({ queued = 1, last_request_at = NOW, samples = flat(600, 1) }, reps)
      assert.equal(1, d.desired)
      assert.equal("none", d.change)
      assert.same({ job_id = 101, reason = "Priority", estimated_start = NOW + 95, retry_after = 95 }, d.wake)
    end)

    it("an estimated start already passed (the job loads the model) gives retry_after_unknown (30 s)", function()
      local reps = replicas("starting")
      reps[1].slurm = { start_time = NOW - 20 }
      local d = decide({ queued = 1, last_request_at = NOW, samples = flat(600, 1) }, reps)
      assert.equal(30, d.wake.retry_after)
    end)
  end)

  it("replicas on their way out do not count as current", function()
    local d = decide({ inflight = 5, last_request_at = NOW, samples = flat(600, 5) },
      replicas("healthy", "ending", "ended"))
    assert.equal(1, d.current)
    assert.equal(2, d.desired)
  end)

  it("the spec's settings win over DEFAULTS; DEFAULTS fill what the spec leaves out", function()
    local s = scale.new({ target_inflight = 8, down_utilization = 0.5 }).settings({ max_replicas = 3 })
    assert.equal(8, s.target_inflight)
    assert.equal(3, s.max_replicas)
    assert.equal(0.5, s.down_utilization)
    assert.equal(300, s.scale_down_after)
  end)
end)

describe("policy.scale on decoded rows", function()
  it("takes JSON nulls (light userdata) in a replica row as nothing", function()
    local null = require("cjson").null
    local d = scale.decide({ now = 1000, autoscale = { min_replicas = 0, max_replicas = 2, target_inflight = 4,
      scale_down_after = 300, idle_to_zero_after = 1200 },
      replicas = { { slot = 1, state = "submitted", job_id = null, pending_reason = null, slurm = null },
        { slot = 2, state = "submitted", job_id = 9, slurm = { reason = null, start_time = null } } },
      load = { queued = 1, last_request_at = 1000 } })
    assert.equal(2, d.current)
    assert.is_nil(d.wake.job_id, "no estimated start either way: the lower slot first")
    assert.is_nil(d.evidence.starting[2].estimated_start)
  end)
end)
