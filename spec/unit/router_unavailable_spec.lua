-- obleth.router.unavailable: the 503 message says why no replica can answer and
-- how long to wait. Pure: no host needed.
local unavailable = require "obleth.router.unavailable"

local NOW = 1764496800
local model = { id = 7, name = "llama" }
local spec = { enabled = true, replicas = 1 }

local function explain(over)
  local f = { model = model, spec = spec, replicas = {}, slurm_enabled = true, checked_in_at = NOW - 2, now = NOW }
  for k, v in pairs(over or {}) do f[k] = v end
  return unavailable.explain(f)
end

describe("router 503 reasons", function()
  it("a model with no deployment says so", function()
    local msg, retry, code = explain { spec = false }
    assert.matches('model "llama" has no healthy replica yet', msg, 1, true)
    assert.matches("no deployment", msg, 1, true)
    assert.equal(60, retry)
    assert.equal("no_deployment", code)
  end)

  it("a staged model with no replica yet is waiting for the provisioner", function()
    local msg, retry, code = explain()
    assert.matches("staged and waiting for the provisioner to submit a job", msg, 1, true)
    assert.equal(10, retry)
    assert.equal("waiting", code)
  end)

  it("a queued job gives Slurm's pending reason", function()
    local msg, retry = explain { replicas = { { slot = 1, state = "submitted", job_id = 42, pending_reason = "Resources" } } }
    assert.matches("job 42 is pending in Slurm (reason: Resources)", msg, 1, true)
    assert.equal(15, retry)
  end)

  it("a job that may never start shows its problem and a longer wait", function()
    local msg, retry = explain { replicas = { { slot = 1, state = "submitted", job_id = 42,
      pending_reason = "PartitionConfig", problem = "the partition does not allow account teaching" } } }
    assert.matches("job 42 is pending in Slurm and may never start: the partition does not allow account teaching",
      msg, 1, true)
    assert.equal(60, retry)
  end)

  it("a running job whose health check does not pass yet is starting, with the shortest wait", function()
    local msg, retry, code = explain { replicas = {
      { slot = 2, state = "submitted", job_id = 43, pending_reason = "Priority" },
      { slot = 1, state = "starting", job_id = 41, node = "n1" } } }
    assert.matches("job 41 is running on n1 and starting", msg, 1, true)
    assert.matches("job 43 is pending in Slurm (reason: Priority)", msg, 1, true)
    -- starting comes first, and its 5 s wins
    assert.is_true(msg:find("job 41", 1, true) < msg:find("job 43", 1, true))
    assert.equal(5, retry)
    assert.equal("starting", code)
  end)

  it("a lost replica says how to try once more", function()
    local msg, retry = explain { replicas = { { slot = 1, state = "lost" } } }
    assert.matches("replica 1 is lost", msg, 1, true)
    assert.matches("POST /api/v1/models/7/replicas/clear-lost", msg, 1, true)
    assert.equal(60, retry)
  end)

  it("a paused deployment, Slurm turned off and a refused submit are each named", function()
    local msg = explain { spec = { enabled = false, provision_error = { message = "Invalid account" } },
      slurm_enabled = false }
    assert.matches("paused", msg, 1, true)
    assert.matches("Slurm is turned off", msg, 1, true)
    assert.matches("Slurm refused the job: Invalid account", msg, 1, true)
    assert.not_matches("staged and waiting", msg, 1, true)
  end)

  it("mentions a provisioner that never checked in or went quiet", function()
    assert.matches("never checked in", (explain { checked_in_at = false }), 1, true)
    assert.matches("last checked in 300 s ago", (explain { checked_in_at = NOW - 300 }), 1, true)
    assert.not_matches("checked in", (explain { checked_in_at = NOW - 5 }), 1, true)
  end)

  it("lists at most four replicas and counts the rest", function()
    local reps = {}
    for i = 1, 6 do reps[i] = { slot = i, state = "pending" } end
    local msg = explain { replicas = reps }
    local n = select(2, msg:gsub("waiting to be submitted", ""))
    assert.equal(4, n)
    assert.matches("2 more replicas", msg, 1, true)
  end)
end)

describe("router 503 for an autoscaled model at zero", function()
  local as = { enabled = true, autoscale = { min_replicas = 0, max_replicas = 2, target_inflight = 4,
    scale_down_after = 300, idle_to_zero_after = 1200 } }

  it("names the pending job, Slurm's reason and estimated start; Retry-After is the policy's", function()
    -- 14:02 UTC on the day of NOW (1764496800 = 2025-11-30 10:00 UTC): NOW + 4 h 2 min
    local start = NOW + 4 * 3600 + 120
    local msg, retry, code = explain { spec = as,
      replicas = { { slot = 1, state = "submitted", job_id = 123, pending_reason = "Priority" } },
      wake = { job_id = 123, reason = "Priority", estimated_start = start, retry_after = 14520 } }
    assert.equal('model "llama" is scaled to zero, waking: job 123 pending (Priority), estimated start 14:02 UTC', msg)
    assert.equal(14520, retry)
    assert.equal("waking", code)
  end)

  it("before the provisioner submitted: the next pass submits a job", function()
    local msg, retry = explain { spec = as, wake = { retry_after = 30 } }
    assert.equal('model "llama" is scaled to zero, waking: the provisioner submits a job on its next pass', msg)
    assert.equal(30, retry)
  end)

  it("a paused deployment or an absent provisioner is said as before, not as waking", function()
    local msg = explain { spec = { enabled = false, autoscale = as.autoscale }, wake = { retry_after = 30 } }
    assert.matches("paused", msg)
    msg = explain { spec = as, wake = { retry_after = 30 }, checked_in_at = NOW - 600 }
    assert.matches("last checked in 600 s ago", msg)
  end)
end)
