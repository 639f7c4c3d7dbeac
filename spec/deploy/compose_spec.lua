-- deploy/docker end to end: the image builds from the repository with no
-- registry, `up` without a profile runs only obleth, with COMPOSE_PROFILES=slurm the provisioner
-- brings the smoke-test model's replicas to healthy on the harness cluster, and after `down` no
-- job is left. Run by scripts/deploy-check.sh (make deploy-check), which starts the dockerd
-- (DOCKER_HOST), imports the base image and the cluster (build/cluster/env).
local loop = require "obleth.loop"
local http = require "obleth.http"
local cjson = require "cjson"
local slurm = require "obleth.slurm"
local tag = require "obleth.job.tag"
local util = require "spec.support.util"
local sys = require "obleth.sys"
local wait_until = util.wait_until
local plain = require("obleth.provisioner.client").plain

local URL, USER, TOKEN = os.getenv("OBLETH_SLURM_URL"), os.getenv("OBLETH_SLURM_USER"), os.getenv("OBLETH_SLURM_TOKEN")

describe("deploy/docker with docker-compose", function()
  if not os.getenv("DOCKER_HOST") or not URL then
    it("needs a dockerd and the harness cluster", function()
      pending("run through make deploy-check (DOCKER_HOST and OBLETH_SLURM_URL unset)")
    end)
    return
  end

  local root = util.root()
  local project = "oblethcheck"
  local secret_dir, logdir, port, base, admin, conn, instance, mid
  local timings = {}

  -- docker-compose from deploy/docker. The profile is set as the product page says, on the
  -- COMPOSE_PROFILES line of deploy/docker/.env (a copy of it, given with --env-file); the test's
  -- port, secret and project name are environment variables, which win over .env's.
  local function compose(args, profiles)
    local src = util.slurp(root .. "/deploy/docker/.env")
    local text, n = src:gsub("\nCOMPOSE_PROFILES=[^\n]*", "\nCOMPOSE_PROFILES=" .. (profiles or ""))
    assert(n == 1, "deploy/docker/.env has one COMPOSE_PROFILES= line")
    local envfile = secret_dir .. "/compose.env"
    local fh = assert(io.open(envfile, "w"))
    fh:write(text)
    fh:close()
    local env = { COMPOSE_PROJECT_NAME = project, OBLETH_LISTEN = "127.0.0.1:" .. port, OBLETH_ADMIN_BASE_URL = base,
      OBLETH_ADMIN_TOKEN_SECRET = secret_dir .. "/admin-token", OBLETH_PASS_INTERVAL = "1",
      OBLETH_IMAGE = "obleth:check",
      -- a container's nofile may not pass the daemon's hard limit (20000 on some CI sandboxes)
      OBLETH_NOFILE = tostring(math.min(65536, tonumber(select(2, util.sh("ulimit -Hn")):match("%d+")) or 65536)) }
    local a = {}
    for k, v in pairs(env) do a[#a + 1] = k .. "=" .. util.shq(v) end
    return util.sh(("cd %s && env -u COMPOSE_PROFILES %s docker-compose --env-file %s %s"):format(
      util.shq(root .. "/deploy/docker"), table.concat(a, " "), util.shq(envfile), args))
  end

  local function running()
    local code, out = compose("ps --services --filter status=running")
    assert.equal(0, code, out)
    local s = {}
    for name in out:gmatch("[^\n]+") do s[#s + 1] = name end
    table.sort(s)
    return table.concat(s, " ")
  end

  local function api(method, path, body)
    local r, err = http.request { url = base .. path, method = method, timeout = 10,
      headers = { Authorization = "Bearer " .. admin, ["Content-Type"] = body and "application/json" or nil },
      body = body and cjson.encode(body) or nil }
    if not r then return nil, err.message end
    local ok, doc = pcall(cjson.decode, r.body)
    return r.status, ok and plain(doc) or nil, r.body
  end

  local function ok(method, path, body)
    local st, doc, raw = api(method, path, body)
    assert(st and st < 300, ("%s %s -> %s %s"):format(method, path, tostring(st), tostring(raw)))
    return doc
  end

  local function live_jobs()
    local n = 0
    for _, j in ipairs(assert(conn:jobs())) do
      local t = tag.parse(j)
      local b = j.state.base
      if t and t.instance == instance and (b == "PENDING" or b == "RUNNING" or b == "CONFIGURING"
        or b == "COMPLETING") then n = n + 1 end
    end
    return n
  end

  local function healthy()
    local doc = ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
    local n = 0
    for _, r in ipairs(doc.replicas or doc) do if r.state == "healthy" then n = n + 1 end end
    return n
  end

  setup(function()
    secret_dir = os.tmpname()
    os.remove(secret_dir)
    assert(sys.mkdir(secret_dir, tonumber("700", 8)))
    admin = sys.random_hex(24)
    local fh = assert(io.open(secret_dir .. "/admin-token", "w"))
    fh:write(admin, "\n")
    fh:close()
    sys.chmod(secret_dir .. "/admin-token", tonumber("644", 8)) -- the containers' uid 10001 reads it
    logdir = os.tmpname()
    os.remove(logdir)
    os.execute("mkdir -p " .. util.shq(logdir) .. " && chmod 1777 " .. util.shq(logdir))
    local s = assert(http.server { host = "127.0.0.1", port = 0, handler = function() end })
    port = s:port()
    s:close()
    base = "http://127.0.0.1:" .. port
    conn = assert(slurm.connect { url = URL, user = USER, token = TOKEN })
  end)

  teardown(function()
    os.remove(root .. "/deploy/docker/policy.d/suggestions.lua") -- when a check stopped half-way
    if secret_dir then
      compose("down -v --remove-orphans", "slurm")
      if instance then
        for _, j in ipairs(conn:jobs() or {}) do
          local t = tag.parse(j)
          if t and t.instance == instance then conn:cancel(j.id) end
        end
      end
      os.execute("rm -rf " .. util.shq(secret_dir) .. " " .. util.shq(logdir))
    end
    for k, v in pairs(timings) do print(("deploy-check: %s %.1f s"):format(k, v)) end
  end)

  it("builds the image with no registry, and without the profile runs only obleth", function()
    local t0 = loop.monotonic()
    local code, out = compose("up -d --build")
    assert.equal(0, code, out)
    timings["image build and up"] = loop.monotonic() - t0
    wait_until(function() return api("GET", "/api/v1/settings/slurm") == 200 end, 60, "obleth to answer")
    assert.equal("obleth", running())
    -- the token is not on any command line or in the container's environment
    local _, inspect = util.sh("/usr/bin/docker inspect " .. project .. "_obleth_1")
    assert.is_nil(inspect:find(admin, 1, true))
    -- the image runs as a non-root user
    local _, user = util.sh("/usr/bin/docker inspect -f '{{.Config.User}}' obleth:check")
    assert.equal("obleth", (user:gsub("%s+$", "")))

    ok("PUT", "/api/v1/settings/slurm", { enabled = true, url = URL, user = USER, token = TOKEN,
      defaults = { partition = "gpu", account = "research", log_dir = logdir, port_range = { 26000, 26999 } } })
    instance = ok("GET", "/api/v1/provisioner/snapshot").instance
    local m = ok("POST", "/api/v1/models", { name = "smoke" })
    mid = (m.model or m).id
    -- the engine binary on the compute nodes (the harness's nodes are this machine)
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", { replicas = 2, partition = "gpu", account = "research",
      time_limit = 30, cpus_per_node = 1, memory_per_node = 200,
      launch_command = util.obleth() .. " smoke-engine --startup-delay 1",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 60, failure_threshold = 2 } })
    -- no provisioner: nothing checks in, nothing is submitted
    local st = ok("GET", "/api/v1/settings/slurm").provisioner
    assert.is_nil(st.checked_in_at)
    assert.equal(0, live_jobs())
  end)

  -- docs/policy.md: `obleth serve` runs suggestions, and Compose mounts the project's policy.d into it
  -- (deploy/docker/compose.yaml). An override written there changes the preview; removed, the built-in
  -- comes back.
  it("a suggestions.lua in the project's policy.d changes obleth serve's preview", function()
    local file = root .. "/deploy/docker/policy.d/suggestions.lua"
    local note = "deploy-check: from policy.d"
    local function noted()
      local pv = ok("POST", "/api/v1/deployments/preview", { recipe_id = "smoke-test",
        values = { partition = "gpu", account = "research", time_limit = 30 } })
      for _, s in ipairs(pv.suggestions or {}) do
        if s.message == note then return s end
      end
      return false
    end
    assert.is_false(noted())
    local fh = assert(io.open(file, "w"))
    -- in the style of docs/policy.md's example: the built-in's suggestions, and one more
    fh:write(([[
-- policy.d/suggestions.lua, written by spec/deploy/compose_spec.lua and removed by it
return {
  suggest = function(outcomes, ctx, opts)
    local out = builtin.suggest(outcomes, ctx, opts)
    out[#out + 1] = { kind = "time_limit", field = "time_limit", value = 45, message = %q, evidence = {} }
    return out
  end,
}
]]):format(note))
    fh:close()
    sys.chmod(file, tonumber("644", 8)) -- the container's uid 10001 reads it
    local ok_, err = pcall(function()
      local s = wait_until(noted, 30, "the preview to show the policy.d suggestion")
      assert.equal("time_limit", s.kind)
      assert.equal(45, s.value)
      assert.same({}, ok("GET", "/api/v1/settings/slurm").serve_policy_errors)
    end)
    os.remove(file)
    assert(ok_, err)
    wait_until(function() return not noted() end, 30, "the built-in suggestions policy to come back")
  end)

  it("with COMPOSE_PROFILES=slurm the provisioner brings the replicas to healthy", function()
    local t0 = loop.monotonic()
    local code, out = compose("up -d --build", "slurm")
    assert.equal(0, code, out)
    assert.equal("obleth provisioner", running())
    wait_until(function() return healthy() == 2 end, 180, "2 healthy replicas")
    timings["provisioner up to 2 healthy replicas"] = loop.monotonic() - t0
    assert.equal(2, live_jobs())
    local lease = ok("GET", "/api/v1/settings/slurm").provisioner.lease
    assert.equal("compose", lease.holder)
    -- a client request through obleth's router reaches a replica
    local key = ok("POST", "/api/v1/keys", { name = "check" }).key
    local r = assert(http.request { url = base .. "/v1/chat/completions", method = "POST", timeout = 10,
      headers = { Authorization = "Bearer " .. key, ["Content-Type"] = "application/json" },
      body = cjson.encode { model = "smoke", messages = { { role = "user", content = "hi" } } } })
    assert.equal(200, r.status, r.body)
  end)

  it("down leaves no job behind", function()
    -- the deployment is deleted first: the provisioner cancels its jobs, then everything stops
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return live_jobs() == 0 end, 60, "the provisioner to cancel the jobs")
    -- the provisioner stops on SIGTERM after its pass, with status 0, and gives the lease up
    local code, out = compose("stop provisioner", "slurm")
    assert.equal(0, code, out)
    local _, exit_code = util.sh("/usr/bin/docker inspect -f '{{.State.ExitCode}}' " .. project .. "_provisioner_1")
    assert.equal("0", (exit_code:gsub("%s+$", "")))
    local _, logs = compose("logs --no-color provisioner", "slurm")
    assert.matches("event=lease_released", logs, 1, true)
    assert.is_nil(logs:find(admin, 1, true))
    assert.is_nil(logs:find(TOKEN, 1, true))
    local t0 = loop.monotonic()
    code, out = compose("down -v", "slurm")
    assert.equal(0, code, out)
    timings["down"] = loop.monotonic() - t0
    assert.equal("", running())
    assert.equal(0, live_jobs())
  end)
end)
