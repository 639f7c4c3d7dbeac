-- The API side of `make demo`: save the Slurm connection, launch the
-- smoke-test model with 2 replicas, show progress until both are healthy.
--   obleth lua scripts/demo_drive.lua start | stop
local http = require "obleth.http"
local cjson = require "cjson"
local loop = require "obleth.loop"

local base = assert(os.getenv("OBLETH_ADMIN_BASE_URL"), "OBLETH_ADMIN_BASE_URL")
local token = assert(os.getenv("OBLETH_ADMIN_TOKEN"), "OBLETH_ADMIN_TOKEN")
local MODEL = "smoke"

local function api(method, path, body)
  local r, err = http.request { url = base .. path, method = method, timeout = 30,
    headers = { Authorization = "Bearer " .. token, ["Content-Type"] = "application/json" },
    body = body and cjson.encode(body) or nil }
  if not r then error(("%s %s: %s"):format(method, path, err.message), 0) end
  local ok, doc = pcall(cjson.decode, r.body)
  if ok then doc = require("obleth.provisioner.api").plain(doc) end
  if r.status >= 300 then
    error(("%s %s: HTTP %d %s"):format(method, path, r.status, ok and cjson.encode(doc) or r.body), 0)
  end
  return ok and doc or r.body
end

local function find_model()
  local list = api("GET", "/api/v1/models")
  for _, m in ipairs(list.models or list) do if m.name == MODEL then return m end end
end

local state_dir = os.getenv("OBLETH_DEMO_STATE") or "build/demo"

local function write_private(name, text)
  local path = state_dir .. "/" .. name
  local fh = assert(io.open(path, "w"))
  fh:write(text, "\n")
  fh:close()
  require("obleth.sys").chmod(path, tonumber("600", 8))
  return path
end

local cmd = ... or "start"
if cmd == "sweep" then
  -- cancel every live job tagged with this demo's installation id, straight through slurmrestd
  local fh = io.open(state_dir .. "/instance")
  local instance = fh and fh:read("l")
  if fh then fh:close() end
  if not instance then return 0 end
  local slurm = require "obleth.slurm"
  local conn = slurm.connect { url = os.getenv("OBLETH_SLURM_URL"), user = os.getenv("OBLETH_SLURM_USER"),
    token = os.getenv("OBLETH_SLURM_TOKEN") }
  if not conn then return 1 end
  local tag = require "obleth.provisioner.tag"
  for _, j in ipairs(conn:jobs() or {}) do
    local t = tag.parse(j)
    if t and t.instance == instance and require("obleth.provisioner.plan").LIVE[j.state.base] then
      conn:cancel(j.id)
      print(("demo: cancelled job %d"):format(j.id))
    end
  end
  return 0
end
if cmd == "stop" then
  local m = find_model()
  if m then
    pcall(api, "DELETE", "/api/v1/models/" .. m.id .. "/managed")
    -- wait (bounded) for the provisioner to cancel the jobs
    for _ = 1, 20 do
      local reps = api("GET", "/api/v1/models/" .. m.id .. "/replicas?state=live")
      if #(reps.replicas or reps) == 0 then break end
      loop.sleep(1)
    end
  end
  return 0
end

write_private("instance", api("GET", "/api/v1/provisioner/snapshot").instance)
print("demo: saving the Slurm connection (the dashboard's Slurm card on Deployments)")
api("PUT", "/api/v1/settings/slurm", {
  enabled = true, url = os.getenv("OBLETH_SLURM_URL"), user = os.getenv("OBLETH_SLURM_USER"),
  token = os.getenv("OBLETH_SLURM_TOKEN"), verify = true,
  defaults = { partition = "gpu", account = "research", log_dir = os.getenv("OBLETH_DEMO_LOG_DIR"),
    port_range = { 20000, 20999 } },
})
local test = api("POST", "/api/v1/settings/slurm/test", {})
local left = test.token and test.token.seconds_left
print(("demo: Test connection: slurmrestd API %s, Slurm %s, JWT expires in %s"):format(tostring(test.api_version),
  tostring(test.release), left and require("obleth.format").duration(left) or "?"))

-- the launch flow a person goes through on New deployment: the library recipe smoke-test, checked by
-- the preview, then launched (recorded in the launch history the suggestions learn from)
local values = { replicas = 2, partition = "gpu", account = "research", time_limit = 30, memory_per_node = 256 }
local pv = api("POST", "/api/v1/deployments/preview", { recipe_id = "smoke-test", api_model_name = MODEL,
  values = values })
if not pv.ok then
  io.stderr:write("demo: the launch preview refused the settings: " .. cjson.encode(pv.errors or pv) .. "\n")
  return 1
end
local launched = api("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = MODEL,
  values = values })
local m = launched.model
print(("demo: launched model %q (id %d) from the library recipe smoke-test with 2 replicas (launch #%d)")
  :format(MODEL, m.id, launched.launch.id))

local t0 = loop.monotonic()
local last
while true do
  local reps = api("GET", "/api/v1/models/" .. m.id .. "/replicas")
  reps = reps.replicas or reps
  local parts, healthy = {}, 0
  table.sort(reps, function(a, b) return (a.slot or 0) < (b.slot or 0) or (a.slot == b.slot and a.id < b.id) end)
  for _, r in ipairs(reps) do
    local e = r["end"]
    parts[#parts + 1] = ("replica %s: %s%s%s"):format(tostring(r.slot), r.state,
      r.job_id and (" (job " .. r.job_id .. (r.node and (" on " .. r.node) or "") .. ")") or "",
      e and e.state and (" — " .. e.state .. (e.node and (" on " .. e.node) or "") .. ", replaced")
        or (r.problem and (" — " .. r.problem) or ""))
    if r.state == "healthy" then healthy = healthy + 1 end
  end
  local line = table.concat(parts, "; ")
  if line ~= last then
    print(("  [%4.1fs] %s"):format(loop.monotonic() - t0, line ~= "" and line or "waiting for the provisioner"))
  end
  last = line
  if healthy >= 2 then break end
  if loop.monotonic() - t0 > 180 then
    io.stderr:write("demo: replicas did not become healthy within 3 minutes; see build/demo/provisioner.log\n")
    return 1
  end
  loop.sleep(1)
end

local model = api("GET", "/api/v1/models/" .. m.id)
model = model.model or model
print(("\ndemo: model %q is %s with endpoints:"):format(MODEL, tostring(model.status)))
for _, e in ipairs(model.endpoints or {}) do print("  " .. (type(e) == "table" and e.url or e)) end
local ep = model.endpoints and model.endpoints[1]
ep = type(ep) == "table" and ep.url or ep
local body = cjson.encode { model = MODEL, messages = { { role = "user", content = "hello" } } }

-- a client API key, and one call through obleth's router
local key = api("POST", "/api/v1/keys", { name = "demo" }).key
local key_file = write_private("api-key", key)
print("\nCall the model through obleth (requests go only to healthy replicas):")
print(("  curl -s %s/v1/chat/completions -H \"Authorization: Bearer $(cat %s)\" \\\n"
  .. "    -H 'Content-Type: application/json' -d '%s'"):format(base, key_file, body))
local r = http.request { url = base .. "/v1/chat/completions", method = "POST", timeout = 10,
  headers = { ["Content-Type"] = "application/json", Authorization = "Bearer " .. key }, body = body }
if r and r.status == 200 then
  print("  → " .. tostring(cjson.decode(r.body).choices[1].message.content))
else
  print("  → HTTP " .. tostring(r and r.status) .. " " .. tostring(r and r.body))
end
print("\nCall a replica directly:")
print(("  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -d '%s'"):format(ep, body))
print(("\nThe Management API: %s/api/v1/models with the admin token:\n"
  .. "  curl -s -H \"Authorization: Bearer $(cat %s/admin-token)\" %s/api/v1/models"):format(base, state_dir, base))
return 0
