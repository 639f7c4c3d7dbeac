-- Benchmark: what the router pays to learn a request's "model" and "stream":
-- obleth.jsonscan.fields against cjson.decode (the reference, in the same run),
-- on the router benchmark's small chat body and on a long chat of 400 messages
-- (about 120 KB). CPU time from os.clock; the best of 5 runs each.
--   obleth lua spec/bench/jsonscan.lua
local cjson = require "cjson"
local jsonscan = require "obleth.jsonscan"

local small = '{"model":"bench","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":5}'
local msgs = {}
for i = 1, 400 do
  msgs[i] = { role = i % 2 == 0 and "assistant" or "user", content = ("lorem ipsum dolor sit amet "):rep(10) }
end
local long = cjson.encode({ model = "m", messages = msgs, stream = true })

local function best(fn, reps)
  local b = math.huge
  for _ = 1, 5 do
    local t0 = os.clock()
    for _ = 1, reps do fn() end
    b = math.min(b, (os.clock() - t0) / reps)
  end
  return b
end

print("jsonscan: the router's read of model and stream, against cjson.decode (best of 5)")
print(("  %-22s %10s %12s %12s %8s"):format("body", "bytes", "cjson us", "jsonscan us", "ratio"))
for _, case in ipairs { { "small (router bench)", small, 100000 }, { "long chat, 400 msgs", long, 1000 } } do
  local name, body, reps = case[1], case[2], case[3]
  local ok, model = jsonscan.fields(body, "model", "stream")
  assert(ok and model == cjson.decode(body).model, "jsonscan and cjson disagree")
  local c = best(function() return cjson.decode(body) end, reps)
  local j = best(function() return jsonscan.fields(body, "model", "stream") end, reps)
  print(("  %-22s %10d %12.2f %12.2f %7.1fx"):format(name, #body, c * 1e6, j * 1e6, c / j))
end
