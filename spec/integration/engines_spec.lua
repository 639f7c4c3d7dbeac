-- Every library recipe executed: launched through the launch flow (obleth serve + provisioner) on
-- the harness cluster, its rendered script run by bash in a Slurm job against the stand-in
-- engines of spec/engines (vllm, sglang.launch_server, llama-server, ollama, ray, apptainer),
-- which accept exactly their engine's flags and environment. The stand-ins come onto PATH the way
-- a site's engines do: where the cluster's nodes have Lmod (the 22.05 harness), Cluster defaults
-- name a module (engines/standin, an Lmod modulefile under spec/engines/modulefiles) and MODULEPATH,
-- and the job's script initialises Lmod itself; where they have none (the rooted 24.11 / 26.05
-- harnesses), Cluster defaults' environment puts them first on PATH and PYTHONPATH.
--
-- A recipe that passes an unknown flag (the stand-in exits with the engine's error), leaves a
-- process behind after its job ended, or never turns healthy fails its case. Cases: 1 GPU, several
-- GPUs, 2 nodes for multi-node vLLM (a Ray head and a worker over srun), with and without an
-- Apptainer image (a stand-in `apptainer` that gives the engine only --nv's GPUs and the binds).
-- With a Hugging Face token in Cluster defaults, the token is in no job script, no `scontrol show
-- job -d` output and no job log of any recipe, and it reaches the engines that use it through the
-- site's token file (HF_TOKEN_PATH).
local cjson = require "cjson"
local http = require "obleth.http"
local sys = require "obleth.sys"
local util = require "spec.support.util"
local wait_until, sh, shq = util.wait_until, util.sh, util.shq
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"

local TOKEN = "hf_oblethEngineSpecToken" .. sys.random_hex(8)

describe("library recipes against the stand-in engines (spec/engines)", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running") end)
    return
  end

  local root = util.root()
  local cluster, srv, prov, key
  local dir -- outside /tmp and $HOME: an Apptainer job sees it only when it is bound
  local launched = {} -- case id -> {model_id, launch}

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  local function v1(path, body, opts)
    local o = { url = srv.base .. path, method = "POST", timeout = 20, body = cjson.encode(body),
      headers = { ["Content-Type"] = "application/json", Authorization = "Bearer " .. key } }
    for k, v in pairs(opts or {}) do o[k] = v end
    return http.request(o)
  end

  local function write(path, content, mode)
    local fh = assert(io.open(path, "wb"))
    fh:write(content)
    fh:close()
    if mode then sh(("chmod %s %s"):format(mode, shq(path))) end
  end

  -- the stand-ins' records (spec/engines/standin.py record()) of one job
  local function records(job)
    local out = {}
    local p = io.popen("ls " .. shq(dir .. "/standin") .. " 2>/dev/null")
    for name in p:lines() do
      if name:match("%.json$") then
        local fh = io.open(dir .. "/standin/" .. name)
        if fh then
          local okj, rec = pcall(cjson.decode, fh:read("a"))
          fh:close()
          if okj and (job == nil or tostring(rec.job) == tostring(job)) then out[#out + 1] = rec end
        end
      end
    end
    p:close()
    return out
  end

  local function alive(pid)
    local fh = io.open(("/proc/%d/cmdline"):format(math.tointeger(pid)))
    if not fh then return false end
    local cmd = fh:read("a") or ""
    fh:close()
    local st = io.open(("/proc/%d/stat"):format(math.tointeger(pid)))
    local stat = st and st:read("a") or ""
    if st then st:close() end
    return cmd:find("spec/engines", 1, true) ~= nil and not stat:match("%) Z ")
  end

  local function job_logs(job)
    local code, out = sh(("cat %s/*-%s.out %s/*-%s.err"):format(shq(cluster.logdir), job, shq(cluster.logdir), job))
    return code == 0 and out or out
  end

  local function model_jobs(mid) return cluster:live_jobs(mid, { COMPLETING = true }) end

  local CASES = {
    -- the 2-node cases first: launched (and so submitted) first, they get two nodes with free GPUs
    -- before the 1- and 2-GPU jobs fill the cluster (16 of its 20 GPUs in all)
    { id = "vllm-multinode", recipe = "vllm-multinode", nodes = 2, gpus = 2, cpus = 2, engine = "vllm", ray = true,
      inputs = function(d) return { model = d .. "/models/llama" } end },
    { id = "vllm-multinode-image", recipe = "vllm-multinode", nodes = 2, gpus = 1, cpus = 2, engine = "vllm",
      ray = true, image = true, inputs = function(d) return { model = d .. "/models/llama", image = "vllm.sif" } end },
    { id = "vllm-1gpu", recipe = "vllm", gpus = 1, engine = "vllm", token = "file",
      inputs = { model = "Qwen/Qwen2.5-0.5B-Instruct" } },
    { id = "vllm-2gpu-image", recipe = "vllm", gpus = 2, engine = "vllm", token = "file", image = true,
      inputs = function(d) return { model = d .. "/models/llama", image = "vllm.sif" } end },
    { id = "sglang-2gpu", recipe = "sglang", gpus = 2, engine = "sglang", token = "file",
      inputs = function(d) return { model = d .. "/models/llama" } end },
    { id = "sglang-image", recipe = "sglang", gpus = 1, engine = "sglang", token = "file", image = true,
      inputs = { model = "Qwen/Qwen2.5-0.5B-Instruct", image = "sglang.sif" } },
    { id = "llamacpp-file-image", recipe = "llamacpp", gpus = 1, engine = "llama-server", image = true,
      inputs = function(d) return { gguf_path = d .. "/models/gguf/tiny-00002-of-00002.gguf", image = "llamacpp.sif" } end },
    { id = "llamacpp-hf", recipe = "llamacpp", gpus = 1, engine = "llama-server", token = "env",
      inputs = { hf_repo = "obleth-fixtures/tiny-GGUF", hf_file = "tiny-Q4_K_M.gguf" } },
    { id = "ollama-gguf", recipe = "ollama", gpus = 1, engine = "ollama-serve",
      inputs = function(d) return { gguf_path = d .. "/models/gguf/single.gguf" } end },
    { id = "ollama-pull-image", recipe = "ollama", gpus = 1, engine = "ollama-serve", image = true,
      inputs = { pull = "llama3.2:1b", image = "ollama.sif" } },
    { id = "smoke-test", recipe = "smoke-test", gpus = 0, engine = nil, inputs = { startup_delay = 1 } },
  }

  -- OBLETH_ENGINE_CASES=id,id runs only those cases (while working on a recipe)
  local only = os.getenv("OBLETH_ENGINE_CASES")
  if only and only ~= "" then
    local keep, want = {}, {}
    for id in only:gmatch("[^,%s]+") do want[id] = true end
    for _, c in ipairs(CASES) do if want[c.id] then keep[#keep + 1] = c end end
    CASES = keep
  end

  setup(function()
    cluster = harness.start { port_range = { 27000, 27999 } }
    srv = cluster.srv
    dir = ("%s/build/engines-spec/%s"):format(root, sys.random_hex(4))
    for _, d in ipairs({ "cache", "images", "models/llama", "models/gguf", "standin" }) do
      assert(os.execute("mkdir -p " .. shq(dir .. "/" .. d)))
    end
    sh(("chmod 1777 %s %s"):format(shq(dir .. "/cache"), shq(dir .. "/standin")))
    for _, img in ipairs({ "vllm", "sglang", "llamacpp", "ollama" }) do write(dir .. "/images/" .. img .. ".sif", "SIF") end
    write(dir .. "/models/llama/config.json", '{"architectures": ["LlamaForCausalLM"]}')
    write(dir .. "/models/gguf/tiny-00001-of-00002.gguf", "GGUF\3\0\0\0")
    write(dir .. "/models/gguf/tiny-00002-of-00002.gguf", "GGUF\3\0\0\0")
    write(dir .. "/models/gguf/single.gguf", "GGUF\3\0\0\0")
    -- the site's token file: the job user's alone
    write(dir .. "/hf-token", TOKEN .. "\n")
    -- (as the cluster's nodes know the job user: inside the root for a rooted release)
    local code, out = harness.cli(("chown obleth %s && chmod 600 %s"):format(shq(dir .. "/hf-token"),
      shq(dir .. "/hf-token")))
    assert(code == 0, out)
    sh("chmod -R a+rX " .. shq(dir))
    local env = { OBLETH_STANDIN_DIR = dir .. "/standin", OBLETH_STANDIN_LOAD_SECONDS = "1" }
    local modules = {}
    local nodes_root = os.getenv("OBLETH_CLUSTER_DIR") or ""
    local lmod = io.open((io.open(nodes_root .. "/root/usr/bin/scontrol") and nodes_root .. "/root" or "")
      .. "/usr/share/lmod/lmod/init/bash")
    if lmod then
      lmod:close()
      modules, env.MODULEPATH = { "engines/standin" }, root .. "/spec/engines/modulefiles"
    else
      env.PATH = root .. "/spec/engines/bin:/usr/local/bin:/usr/bin:/bin"
      env.PYTHONPATH = root .. "/spec/engines/py"
    end
    ok("PUT", "/api/v1/settings/slurm", { enabled = true, url = harness.URL, user = harness.USER, token = harness.TOKEN,
      defaults = { partition = "gpu", account = "research", log_dir = cluster.logdir, port_range = { 27000, 27999 },
        model_cache_dir = dir .. "/cache", image_dir = dir .. "/images", hf_token = TOKEN,
        hf_token_path = dir .. "/hf-token", modules = modules, environment = env } })
    key = ok("POST", "/api/v1/keys", { name = "engines spec" }).key
    prov = provisioner.start { base = srv.base, token = srv.token }
    for _, c in ipairs(CASES) do
      local inputs = type(c.inputs) == "function" and c.inputs(dir) or c.inputs
      local values = { nodes = c.nodes or 1, gpus_per_node = c.gpus, cpus_per_node = c.cpus or 1, memory_per_node = 256,
        inputs = inputs, ["health.interval"] = 2, ["health.timeout"] = 1, ["health.startup_grace"] = 300 }
      if c.recipe == "smoke-test" then values.gpus_per_node, values.memory_per_node = nil, nil end
      local res = ok("POST", "/api/v1/deployments/launch", { recipe_id = c.recipe, api_model_name = c.id, values = values })
      launched[c.id] = { model_id = res.model.id, res = res }
    end
  end)

  teardown(function()
    if srv and key then
      for _, l in pairs(launched) do srv:request("DELETE", ("/api/v1/models/%d/managed"):format(l.model_id)) end
    end
    if prov then prov:stop() end
    if cluster then cluster:stop() end
    if dir then os.execute("rm -rf " .. shq(dir)) end
  end)

  -- the healthy replica of a case and its job, waiting for it; a failure says why from the job's log
  local function healthy(c)
    local l = launched[c.id]
    return wait_until(function()
      local _, doc = srv:request("GET", ("/api/v1/models/%d/replicas"):format(l.model_id))
      for _, r in ipairs(doc and doc.replicas or {}) do
        if r.state == "healthy" and type(r.job_id) == "number" then return r end
      end
      local jobs, logs = {}, {}
      for _, r in ipairs(doc and doc.replicas or {}) do
        if type(r.job_id) == "number" then
          local _, reason = harness.cli(("squeue -h -j %d -o '%%T %%R'"):format(math.tointeger(tonumber(r.job_id))))
          jobs[#jobs + 1] = ("%s:%d (%s)"):format(r.state, math.tointeger(tonumber(r.job_id)), reason:gsub("%s+$", ""))
          logs[#logs + 1] = job_logs(math.tointeger(tonumber(r.job_id))):sub(-1500)
        end
      end
      return nil, ("%s: replicas %s; job log: %s"):format(c.id, table.concat(jobs, " "), table.concat(logs, "\n---\n"))
    end, 240, c.id .. " healthy")
  end

  for _, c in ipairs(CASES) do
    local what = ("%s: %s on %d node(s) x %d GPU(s)%s turns healthy, answers through the router, and keeps "
      .. "the Hugging Face token out of the job"):format(c.id, c.recipe, c.nodes or 1, c.gpus,
      c.image and " in an Apptainer image" or "")
    it(what, function()
      local r = healthy(c)
      local job = math.tointeger(tonumber(r.job_id))
      local recs = records(job)
      if c.engine then
        local eng
        for _, rec in ipairs(recs) do if rec.engine == c.engine and rec.ready ~= nil or rec.engine == c.engine
          and rec.listening ~= nil then eng = rec end end
        assert(eng, ("%s: no running %s stand-in in job %d: %s"):format(c.id, c.engine, job, cjson.encode(recs)))
        assert.equal(c.image == true, eng.in_container, "in the container")
        if c.token == "file" then
          assert.equal("file", eng.token, "the engine reads the token file (HF_TOKEN_PATH)")
          assert.equal(#TOKEN, eng.token_len)
        elseif c.token == "env" then
          assert.equal("env", eng.token)
          assert.equal(#TOKEN, eng.token_len)
        end
        if c.engine == "ollama-serve" then
          -- The harness's nodes all have NodeAddr 127.0.0.1, so the provisioner's health check also
          -- reaches the create phase's loopback server: wait for the server on 0.0.0.0, then the
          -- loopback one must be gone (one live ollama serve in the job)
          local live = wait_until(function()
            local n, public = 0, false
            for _, rec in ipairs(records(job)) do
              if rec.engine == "ollama-serve" and alive(rec.pid) then
                n = n + 1
                if rec.host == "0.0.0.0" and rec.listening then public = true end
              end
            end
            if public then return n end
            return nil, "no ollama serve listening on 0.0.0.0; job log: " .. job_logs(job):sub(-1500)
          end, 60, c.id .. ": ollama serve on 0.0.0.0")
          assert.equal(1, live, "live ollama serve processes in the job")
          for _, rec in ipairs(records(job)) do
            if rec.engine == "ollama-serve" and rec.host == "0.0.0.0" then
              assert.equal("cuda", rec.library, "Ollama found the GPU (ROCR/HIP_VISIBLE_DEVICES unset)")
            end
          end
        end
        if c.image then
          local app = false
          for _, rec in ipairs(recs) do if rec.engine == "apptainer" then app = rec.nv end end
          assert.is_true(app, "apptainer exec --nv")
        end
        if c.ray then
          assert.equal(c.nodes, #eng.ray_nodes, "Ray nodes")
          for _, n in ipairs(eng.ray_nodes) do
            assert.equal(c.gpus, n.gpus)
            assert.equal(c.cpus, n.cpus, "a Ray step has the node's CPUs (srun -c)")
          end
          assert.is_string(eng.vllm_host_ip)
        end
      end
      local log = job_logs(job)
      assert.is_falsy(log:find("address already in use", 1, true), log)
      assert.is_falsy(log:find("unrecognized arguments", 1, true) or log:find("invalid argument", 1, true)
        or log:find("unknown flag", 1, true) or log:find("No such option", 1, true), log)
      -- through obleth's router with a client key
      local resp = assert(v1("/v1/chat/completions", { model = c.id, messages = { { role = "user", content = "hi" } } }))
      assert.equal(200, resp.status, resp.body)
      -- the token is in no job script, no scontrol show job -d output, no job log
      local _, script = harness.cli(("scontrol write batch_script %d -"):format(job))
      assert.is_truthy(script:find("#!", 1, true), script)
      assert.is_falsy(script:find(TOKEN, 1, true), "the token is in the job script")
      local _, show = harness.cli(("scontrol show job -d %d"):format(job))
      assert.is_truthy(show:find("JobId=" .. job, 1, true), show)
      assert.is_falsy(show:find(TOKEN, 1, true), "the token is in scontrol show job -d")
      local _, showdd = harness.cli(("scontrol show job -dd %d"):format(job))
      assert.is_falsy(showdd:find(TOKEN, 1, true), "the token is in scontrol show job -dd")
      assert.is_falsy(job_logs(job):find(TOKEN, 1, true), "the token is in the job log")
      launched[c.id].job = job
    end)
  end

  it("leaves no engine process behind once the deployments are deleted and their jobs ended", function()
    for _, c in ipairs(CASES) do
      local l = launched[c.id]
      assert.equal(204, (srv:request("DELETE", ("/api/v1/models/%d/managed"):format(l.model_id))))
    end
    for _, c in ipairs(CASES) do
      local l = launched[c.id]
      wait_until(function() return #model_jobs(l.model_id) == 0 end, 90, c.id .. "'s jobs to end")
    end
    local left = {}
    for _, rec in ipairs(records(nil)) do
      if alive(rec.pid) then
        left[#left + 1] = ("%s pid %d (job %s)"):format(rec.engine, rec.pid, tostring(rec.job))
        sys.kill(math.tointeger(rec.pid), "KILL") -- this spec's stand-in: not left running after the spec
      end
    end
    assert.same({}, left)
  end)
end)
