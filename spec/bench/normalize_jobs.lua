-- Benchmark: decode and normalize a `GET /slurm/vX/jobs` response of 10,000
-- jobs, per API version, against plain cjson.decode of the same bytes (the
-- reference, in the same run). Job records come from the real recordings
-- (and the written fixtures for v0.0.39 and v0.0.44), repeated with distinct
-- ids. CPU time from os.clock; the best of 5 runs each.
--   obleth lua spec/bench/normalize_jobs.lua [N]
local cjson = require "cjson"
local normalize = require "obleth.slurm.normalize"

local N = tonumber(arg and arg[1]) or 10000
local shared = os.getenv("OBLETH_SHARED") or "../shared"
local sources = {
  { "v0.0.38", shared .. "/cases/slurmrestd/v0.0.38/jobs.json" },
  { "v0.0.39", "spec/fixtures/slurmrestd/v0.0.39/jobs.json" },
  { "v0.0.40", shared .. "/cases/slurmrestd/v0.0.40/jobs.json" },
  { "v0.0.41", shared .. "/cases/slurmrestd/v0.0.41/jobs.json" },
  { "v0.0.42", shared .. "/cases/slurmrestd/v0.0.42/jobs.json" },
  { "v0.0.43", shared .. "/cases/slurmrestd/captures/25.05/0.0.43/slurm-jobs.json" },
  { "v0.0.44", "spec/fixtures/slurmrestd/v0.0.44/jobs.json" },
}

local function read(p)
  local f = io.open(p, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function best(fn, reps)
  local b = math.huge
  for _ = 1, reps do
    collectgarbage("collect")
    local t0 = os.clock()
    fn()
    local dt = os.clock() - t0
    if dt < b then b = dt end
  end
  return b
end

print(("jobs per response: %d (best of 5, CPU seconds)"):format(N))
print(("%-8s %9s %12s %14s %7s"):format("version", "bytes", "cjson.decode", "decode+norm", "ratio"))
for _, s in ipairs(sources) do
  local text = read(s[2])
  if not text then
    print(("%-8s missing %s"):format(s[1], s[2]))
  else
    local doc = cjson.decode(text)
    local jobs = doc.jobs
    local big = {}
    for i = 1, N do
      local j = jobs[(i - 1) % #jobs + 1]
      local c = {}
      for k, v in pairs(j) do c[k] = v end
      c.job_id = 100000 + i
      big[i] = c
    end
    doc.jobs = big
    local bytes = cjson.encode(doc)
    local t_ref = best(function() cjson.decode(bytes) end, 5)
    local t_norm = best(function() normalize.jobs(cjson.decode(bytes), s[1]) end, 5)
    assert(#normalize.jobs(cjson.decode(bytes), s[1]) == N)
    print(("%-8s %9d %12.4f %14.4f %6.2fx"):format(s[1], #bytes, t_ref, t_norm, t_norm / t_ref))
  end
end
