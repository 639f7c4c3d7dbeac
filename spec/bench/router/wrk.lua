-- wrk script for spec/bench/router.sh: POST one small chat completion per request
-- and print one machine-readable line at the end:
--   RESULT rps=<requests/s> p50_us=<µs> p99_us=<µs> requests=<n> errors=<n> non2xx=<n>
-- Environment: BENCH_MODEL (model name), BENCH_KEY (client key, optional),
-- BENCH_DELAY_MS (optional: each connection waits 0 to 2 * BENCH_DELAY_MS ms, at
-- random, before each request, so C connections send about C * 1000 / BENCH_DELAY_MS
-- requests/s — a fixed rate instead of as fast as the proxy answers, with the
-- connections' requests spread out rather than arriving together; the wait is not
-- counted in the latency).
-- wrk runs this under its own LuaJIT (not the obleth runtime), with its globals.
-- luacheck: globals wrk init done delay
local model = os.getenv("BENCH_MODEL") or "bench"
local key = os.getenv("BENCH_KEY")
local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "")

if delay_ms then
  -- each thread has its own Lua state: seed it apart from the others
  function init() math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16)) end
  function delay() return math.random(0, 2 * delay_ms) end
end

wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
if key and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
wrk.body = '{"model":"' .. model .. '","messages":[{"role":"user","content":"Say hello in five words."}],'
  .. '"max_tokens":5}'

function done(summary, latency)
  local secs = summary.duration / 1e6
  local errs = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(("RESULT rps=%.1f p50_us=%d p99_us=%d requests=%d errors=%d non2xx=%d\n"):format(
    summary.requests / secs, latency:percentile(50), latency:percentile(99), summary.requests, errs,
    summary.errors.status))
end
