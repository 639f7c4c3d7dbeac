-- The engine tier: a real engine serving a real model as a Slurm job. On the 26.05 harness cluster
-- (Debian sid root, which has llama.cpp-tools' llama-server and python3-gguf), a tiny random-weight
-- llama GGUF is written at test time (spec/engines/tools/write_tiny_gguf.py: no download), the
-- llama.cpp library recipe is launched through the launch flow (preview, then launch, with Cluster
-- defaults set as a site would), and the replica answers through obleth's router with a client key:
-- 503 before it is healthy, a chat completion, a completion, a streamed chat arriving as separate
-- chunks; then a restart (a new job turns healthy) and the deletion (no job left). Also From Hugging
-- Face end to end: the fake Hub's GGUF repo, its llama.cpp choice launched on the local file.
-- Writes its measurements to $OBLETH_ENGINE_REPORT (spec/engine/run.sh prints the summary line).
local cjson = require "cjson"
local http = require "obleth.http"
local loop = require "obleth.loop"
local sys = require "obleth.sys"
local util = require "spec.support.util"
local wait_until, sh, shq = util.wait_until, util.sh, util.shq
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"
local fake_hub = require "spec.support.fake_hub"
local plain = require("obleth.provisioner.client").plain

describe("the llama.cpp library recipe with the real llama-server (engine tier)", function()
  local cluster_dir = os.getenv("OBLETH_CLUSTER_DIR") or ""
  local rootfs = cluster_dir .. "/root"
  if not harness.URL or not io.open(rootfs .. "/usr/bin/llama-server") then
    it("needs the 26.05 harness cluster (spec/engine/run.sh starts it)", function()
      error("no harness cluster with llama-server: OBLETH_CLUSTER_DIR=" .. cluster_dir
        .. " (run spec/engine/run.sh, or make engine-check)")
    end)
    return
  end

  local NAME = "tiny-llama"
  local root = util.root()
  local cluster, srv, prov, key, hub, dir, gguf, mid
  local report = {}

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  local function v1(path, body, opts)
    local o = { url = srv.base .. path, method = "POST", timeout = 60, body = cjson.encode(body),
      headers = { ["Content-Type"] = "application/json", Authorization = "Bearer " .. key } }
    for k, v in pairs(opts or {}) do o[k] = v end
    return http.request(o)
  end

  local function replicas(model_id)
    local _, doc = srv:request("GET", ("/api/v1/models/%d/replicas"):format(model_id))
    return doc and doc.replicas or {}
  end

  local function job_log(job)
    local _, out = sh(("cat %s/*-%d.out %s/*-%d.err 2>/dev/null"):format(shq(cluster.logdir), job,
      shq(cluster.logdir), job))
    return out
  end

  -- the model's healthy replica (other than `not_job`), waiting for it; a failure quotes the job log
  local function healthy(model_id, not_job, secs)
    return wait_until(function()
      local last = ""
      for _, r in ipairs(replicas(model_id)) do
        if type(r.job_id) == "number" then
          if r.state == "healthy" and r.job_id ~= not_job then return r end
          last = ("%s job %d; log: %s"):format(r.state, math.tointeger(r.job_id), job_log(math.tointeger(r.job_id)):sub(-1200))
        end
      end
      return nil, last
    end, secs or 180, "a healthy llama.cpp replica")
  end

  setup(function()
    cluster = harness.start { port_range = { 28000, 28999 } }
    srv = cluster.srv
    hub = fake_hub.start()
    dir = ("%s/build/engine-spec/%s"):format(root, sys.random_hex(4))
    assert(os.execute(("mkdir -p %s/models %s/cache && chmod 1777 %s/cache"):format(shq(dir), shq(dir), shq(dir))))
    -- the model, written at test time in the sid root, where python3-gguf is (the repository is
    -- bind-mounted there at its own path)
    gguf = dir .. "/models/tiny-llama.gguf"
    local code, out = sh(("chroot %s /usr/bin/python3 %s/spec/engines/tools/write_tiny_gguf.py %s "
      .. "--embd 256 --layers 4 --ff 1024"):format(
      shq(rootfs), shq(root), shq(gguf)))
    assert(code == 0, "writing the GGUF: " .. out)
    sh("chmod -R a+rX " .. shq(dir))
    local fh = assert(io.open(gguf, "rb"))
    report.gguf_bytes = fh:seek("end")
    fh:close()
    -- Cluster defaults as a site sets them: partition, account, where models and job logs live
    ok("PUT", "/api/v1/settings/slurm", { enabled = true, url = harness.URL, user = harness.USER, token = harness.TOKEN,
      defaults = { partition = "gpu", account = "research", log_dir = cluster.logdir, port_range = { 28000, 28999 },
        model_cache_dir = dir .. "/cache" } })
    key = ok("POST", "/api/v1/keys", { name = "engine tier" }).key
  end)

  teardown(function()
    if prov then prov:stop() end
    if cluster then cluster:stop() end
    if hub then hub.close() end
    if dir then os.execute("rm -rf " .. shq(dir)) end
    local path = os.getenv("OBLETH_ENGINE_REPORT")
    if path then
      local f = io.open(path, "w")
      if f then f:write(cjson.encode(report)); f:close() end
    end
  end)

  local values = { gpus_per_node = 1, cpus_per_node = 2, memory_per_node = 1024,
    ["health.interval"] = 1, ["health.timeout"] = 1, ["health.startup_grace"] = 300 }

  it("previews the llama.cpp recipe on the local GGUF: no problem, llama-server -m <file> --offline -c 0 -t", function()
    local v = { inputs = { gguf_path = gguf } }
    for k, x in pairs(values) do v[k] = x end
    local pv = plain(ok("POST", "/api/v1/deployments/preview", { recipe_id = "llamacpp", api_model_name = NAME, values = v }))
    assert.same({}, pv.errors or {})
    assert.is_true(pv.ok)
    assert.matches("'llama-server' '-m' " .. shq(gguf) .. " '--offline'", pv.job_script, 1, true)
    assert.matches("'-c' '0' '-t' \"${SLURM_CPUS_ON_NODE:-1}\"", pv.job_script, 1, true)
    assert.equal(240, pv.settings.time_limit.value, "time_limit max: the partition's MaxTime")
  end)

  it("launches it; the router answers 503 until the replica is healthy, then it is healthy", function()
    local v = { inputs = { gguf_path = gguf } }
    for k, x in pairs(values) do v[k] = x end
    local res = ok("POST", "/api/v1/deployments/launch", { recipe_id = "llamacpp", api_model_name = NAME, values = v })
    mid = res.model.id
    -- no replica is healthy yet (the provisioner has not even submitted it): 503, not a hang
    local r = assert(v1("/v1/chat/completions", { model = NAME, messages = { { role = "user", content = "hi" } } }))
    assert.equal(503, r.status, r.body)
    local t0 = loop.monotonic()
    prov = provisioner.start { base = srv.base, token = srv.token }
    local rep = healthy(mid)
    report.healthy_s = loop.monotonic() - t0
    report.job = math.tointeger(rep.job_id)
    local _, st = harness.cli(("squeue -h -j %d -o %%T"):format(report.job))
    assert.matches("RUNNING", st)
  end)

  it("answers a chat completion through the router", function()
    local r = assert(v1("/v1/chat/completions", { model = NAME, max_tokens = 8,
      messages = { { role = "user", content = "hello tiny model" } } }))
    report.chat_status = r.status
    assert.equal(200, r.status, r.body)
    local doc = cjson.decode(r.body)
    assert.equal("assistant", doc.choices[1].message.role)
    assert.is_string(doc.choices[1].message.content)
    assert.is_true(doc.usage.completion_tokens >= 1)
  end)

  it("answers a completion through the router", function()
    local r = assert(v1("/v1/completions", { model = NAME, prompt = "the tiny model says", max_tokens = 8 }))
    assert.equal(200, r.status, r.body)
    local doc = cjson.decode(r.body)
    assert.is_string(doc.choices[1].text)
  end)

  -- How many reads the events arrive in depends on the machine, not on the router: the tiny model writes
  -- its 48 tokens within a few milliseconds, so a client may read all of them at once (CI read 46 events
  -- in one piece on a quiet machine). What shows the router took the streaming path is how it framed the
  -- answer: chunked as the engine's events arrive, never a held body sent with a Content-Length. That the
  -- router passes each event on as the engine writes it is pinned with an engine whose timing the spec
  -- controls (spec/host/router_proxy_spec.lua).
  it("streams a chat reply through the router: chunked as it arrives, each event a chat.completion.chunk", function()
    local r = assert(v1("/v1/chat/completions", { model = NAME, stream = true, max_tokens = 48, ignore_eos = true,
      messages = { { role = "user", content = "stream a reply" } } }, { stream = true }))
    assert.equal(200, r.status)
    assert.matches("text/event-stream", r.headers["content-type"], 1, true)
    assert.matches("chunked", r.headers["transfer-encoding"] or "", 1, true)
    assert.is_nil(r.headers["content-length"])
    local chunks, parts = 0, {}
    while true do
      local c, err = r:read()
      assert.is_nil(err)
      if not c then break end
      if c:find("data: ", 1, true) then chunks = chunks + 1 end
      parts[#parts + 1] = c
    end
    report.stream_chunks = chunks
    local body, events, text = table.concat(parts), 0, {}
    assert.matches("data: %[DONE%]%s*$", body)
    for data in body:gmatch("data: ([^\n]*)") do
      if data ~= "[DONE]" then
        local ev = cjson.decode(data)
        assert.equal("chat.completion.chunk", ev.object)
        local delta = ev.choices[1] and ev.choices[1].delta
        if delta and type(delta.content) == "string" then text[#text + 1] = delta.content end
        events = events + 1
      end
    end
    assert.is_true(events >= 10, ("%d events in %d pieces"):format(events, chunks))
    assert.is_true(#text >= 10, ("%d events carried text"):format(#text))
  end)

  it("restarts: the replica's job is replaced by a new one that turns healthy", function()
    local old
    for _, r in ipairs(replicas(mid)) do if r.state == "healthy" then old = r end end
    assert(old, "no healthy replica")
    ok("POST", ("/api/v1/replicas/%d/restart"):format(math.tointeger(old.id)))
    local new = healthy(mid, old.job_id)
    assert.are_not.equal(old.job_id, new.job_id)
    local r = assert(v1("/v1/chat/completions", { model = NAME, max_tokens = 4,
      messages = { { role = "user", content = "again" } } }))
    assert.equal(200, r.status, r.body)
  end)

  it("deletes: no job of the model is left", function()
    assert.equal(204, (srv:request("DELETE", ("/api/v1/models/%d/managed"):format(mid))))
    wait_until(function() return #cluster:live_jobs(mid, { COMPLETING = true }) == 0 end, 90, "the model's jobs to end")
  end)

  it("From Hugging Face: the fake Hub's GGUF repo, its llama.cpp choice launched on the local file, answers", function()
    -- obleth serve reads the Hub at HF_ENDPOINT: a second server, on the same database's settings
    local s2 = require("spec.support.server").start { env = { HF_ENDPOINT = hub.url } }
    local function ok2(method, path, body)
      local status, doc, raw = s2:request(method, path, body)
      assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
      return doc
    end
    local p2
    local okr, err = pcall(function()
      ok2("PUT", "/api/v1/settings/slurm", { enabled = true, url = harness.URL, user = harness.USER, token = harness.TOKEN,
        defaults = { partition = "gpu", account = "research", log_dir = cluster.logdir, port_range = { 28000, 28999 },
          model_cache_dir = dir .. "/cache" } })
      local k2 = ok2("POST", "/api/v1/keys", { name = "engine tier hf" }).key
      local info = plain(ok2("POST", "/api/v1/hf/inspect", { repo_id = "bartowski/Llama-3.2-1B-Instruct-GGUF" }))
      local choice
      for _, e in ipairs(info.engines) do
        if e.engine == "llama.cpp" then
          for _, c in ipairs(e.choices) do if c.id == e.default or (not choice and c.supported) then choice = c end end
        end
      end
      assert(choice, "no llama.cpp choice: " .. cjson.encode(info.engines))
      assert.equal("llamacpp", choice.prefill.recipe_id)
      -- the choice's settings, with the file on the cluster instead of the Hub download
      local v = { inputs = { gguf_path = gguf, hf_repo = "", hf_file = "" } }
      for k, x in pairs(values) do v[k] = x end
      local hf = { repo_id = info.repo_id, engine = "llama.cpp", choice = choice.id }
      local pv = plain(ok2("POST", "/api/v1/deployments/preview", { hf = hf, api_model_name = "hf-tiny", values = v }))
      assert.same({}, pv.errors or {})
      assert.matches("'-m' " .. shq(gguf), pv.job_script, 1, true)
      assert.is_nil(pv.job_script:find("--hf-repo", 1, true))
      local res = ok2("POST", "/api/v1/deployments/launch", { hf = hf, api_model_name = "hf-tiny", values = v })
      p2 = provisioner.start { base = s2.base, token = s2.token }
      local m2 = res.model.id
      wait_until(function()
        local _, doc = s2:request("GET", ("/api/v1/models/%d/replicas"):format(m2))
        for _, r in ipairs(doc and doc.replicas or {}) do if r.state == "healthy" then return true end end
        return nil, cjson.encode(doc)
      end, 180, "the From Hugging Face replica healthy")
      local r = assert(http.request({ url = s2.base .. "/v1/chat/completions", method = "POST", timeout = 60,
        headers = { ["Content-Type"] = "application/json", Authorization = "Bearer " .. k2 },
        body = cjson.encode({ model = "hf-tiny", max_tokens = 4, messages = { { role = "user", content = "hi" } } }) }))
      assert.equal(200, r.status, r.body)
      assert.equal(204, (s2:request("DELETE", ("/api/v1/models/%d/managed"):format(m2))))
    end)
    if p2 then p2:stop() end
    -- jobs of s2's installation
    local _, snap = s2:request("GET", "/api/v1/provisioner/snapshot")
    local tag = require "obleth.job.tag"
    wait_until(function()
      for _, j in ipairs(assert(cluster.conn:jobs())) do
        local t = tag.parse(j)
        if t and snap and t.instance == snap.instance and harness.LIVE[j.state.base] then
          cluster.conn:cancel(j.id)
          return nil, "job " .. tostring(j.id)
        end
      end
      return true
    end, 60, "the From Hugging Face jobs to end")
    s2:stop(); s2:cleanup()
    assert(okr, err)
  end)
end)
