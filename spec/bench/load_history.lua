-- Benchmark: obleth serve's load history sample (obleth.deployment.load_history.sample_all, every
-- load_history.SAMPLE s) at 1,000 and 5,000 models of 2 replicas each, on SQLite: without managed specs,
-- with a fixed spec each, and with every tenth spec autoscaled. Prints the CPU of a whole sample (the
-- first reads every spec; the later ones only the specs whose generation moved) and the longest piece
-- between two pauses: obleth serve yields to its event loop there, so that piece is what the sample
-- can hold the router (goal: at most 10 ms, docs/performance.md).
--   obleth lua spec/bench/load_history.lua [models ...]
local sizes = {}
for _, a in ipairs(arg or {}) do sizes[#sizes + 1] = tonumber(a) end
if #sizes == 0 then sizes = { 1000, 5000 } end
collectgarbage("generational") -- as obleth serve runs (obleth.cli.serve)
local history = require "obleth.deployment.load_history"
local scale = require("obleth.policy").get("scale")

local function run(n, specs, auto_every)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir))
  local store = assert(require("obleth.store").open(dir .. "/bench.db"))
  local reps = {}
  assert(store:transaction(function()
    for m = 1, n do
      local model = assert(store:create_model { name = ("model-%d"):format(m) })
      if specs then
        local spec = { replicas = 2 }
        if auto_every and m % auto_every == 0 then
          spec = { autoscale = { min_replicas = 0, max_replicas = 3, target_inflight = 4 } }
        end
        assert(store:put_spec(model.id, spec))
      end
      for s = 1, 2 do
        reps[#reps + 1] = { nonce = ("%08x%08x"):format(m, s), model_id = model.id, slot = s, state = "healthy",
          job_id = 1000 + 2 * m + s, node = "n1", port = 20000 + s, check_failures = 0,
          slurm = { state = "RUNNING", start_time = os.time() - 60, end_time = os.time() + 3540, estimated = false } }
      end
    end
    return true
  end))
  assert(store:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = reps, outcomes = {},
    endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
  local window = require("obleth.router.load").new {}
  local h = history.new {}
  local out = {}
  for i = 1, 3 do
    local pieces, t_piece = {}, os.clock()
    local t0 = os.clock()
    h:sample_all(store, window, scale, function()
      pieces[#pieces + 1] = os.clock() - t_piece
      t_piece = os.clock()
    end)
    pieces[#pieces + 1] = os.clock() - t_piece
    table.sort(pieces)
    out[i] = ("%.1f ms: %d pieces, median %.1f, longest %.1f"):format((os.clock() - t0) * 1000, #pieces,
      pieces[(#pieces + 1) // 2] * 1000, pieces[#pieces] * 1000)
  end
  store:close()
  os.execute("rm -rf " .. dir)
  return out
end

print(("%-7s %-26s %-44s %-44s %s"):format("models", "specs", "first sample (CPU)", "second", "third"))
for _, n in ipairs(sizes) do
  for _, c in ipairs({ { "none", false }, { "fixed", true }, { "fixed, 1 in 10 autoscaled", true, 10 } }) do
    local r = run(n, c[2], c[3])
    print(("%-7d %-26s %-44s %-44s %s"):format(n, c[1], r[1], r[2], r[3]))
  end
end
print(("goal: a piece at most 10 ms (pages of %d models; a longest piece far above the median is the "
  .. "generational collector's major collection, which any piece of work in obleth serve can meet)"):format(history.PAGE))
