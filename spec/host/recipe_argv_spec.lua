-- End to end: hostile recipe inputs, rendered into a job script by
-- obleth.recipe, run by /bin/sh against a stand-in "engine" that writes its
-- argv NUL-separated to a file. Each hostile value must arrive as exactly one
-- literal argument and no injected command may run. Also: every library
-- recipe in recipes/ loads from YAML, renders, and parses as shell.
local recipe = require "obleth.recipe"
local shell = require "obleth.util.shell"

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true
end

local function mkdtemp()
  local d = os.tmpname()
  os.remove(d)
  assert(sh("mkdir -p " .. shell.quote(d)))
  return d
end

local function write(path, text, mode)
  local fh = assert(io.open(path, "wb"))
  fh:write(text)
  fh:close()
  if mode then assert(sh("chmod " .. mode .. " " .. shell.quote(path))) end
end

local function read(path)
  local fh = io.open(path, "rb")
  if not fh then return nil end
  local s = fh:read("a")
  fh:close()
  return s
end

local function exists(path)
  local fh = io.open(path, "rb")
  if fh then fh:close() return true end
  return sh("test -e " .. shell.quote(path))
end

-- argv written by the stand-in engine, NUL-separated: "a\0b\0" -> {"a", "b"}
local function split_nul(s)
  local out = {}
  for arg in s:gmatch("([^%z]*)%z") do out[#out + 1] = arg end
  return out
end

local function root()
  local ok, sys = pcall(require, "obleth.sys")
  if ok and sys.paths and sys.paths.share then return sys.paths.share end
  return "."
end

describe("recipe rendering against /bin/sh", function()
  local dir, bin, out, pwned, sentinel, hostile

  before_each(function()
    dir = mkdtemp()
    bin = dir .. "/bin"
    assert(sh("mkdir -p " .. shell.quote(bin)))
    out = dir .. "/argv"
    pwned = dir .. "/pwned"
    sentinel = dir .. "/sentinel"
    assert(sh("mkdir -p " .. shell.quote(sentinel)))
    -- the stand-in engine: prints each argument ("$@") followed by a NUL byte
    write(bin .. "/engine", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\000' \"$a\"; done >\"$ARGV_OUT\"\n", "755")
    hostile = {
      "'; rm -rf " .. sentinel .. "; '",
      "$(touch " .. pwned .. ")",
      "`touch " .. pwned .. "`",
      "a; touch " .. pwned,
      "a && touch " .. pwned,
      "a || touch " .. pwned,
      "a | touch " .. pwned,
      "> " .. pwned,
      "line1\nline2\ntouch " .. pwned,
      'say "hi" \\"',
      "back\\slash\\",
      "*",
      "x --flag=x", -- a value that starts with "-" is refused as a positional (see below)
      "$OBLETH_PORT ${HOME} $((1+1)) $$",
      "'",
      "\"",
      "",
      "  spaced  out  ",
      "\ttab",
      "~",
      "!",
      "#not a comment",
      "{a,b}",
      "$(touch " .. pwned .. ")'\"`touch " .. pwned .. "`",
    }
  end)

  after_each(function()
    sh("rm -rf " .. shell.quote(dir))
  end)

  -- run a rendered job the way a Slurm batch step would: preamble, then
  -- the command (or the script body) under /bin/sh
  local function run(rendered)
    local body
    if rendered.script_body then
      body = rendered.script_body
    else
      body = "#!/bin/sh\n" .. table.concat(rendered.preamble, "\n") .. "\n" .. rendered.launch_command .. "\n"
    end
    local script = dir .. "/job.sh"
    write(script, body)
    -- the job environment, as Slurm sets it from the submit's environment
    local envs = {}
    for k, v in pairs(rendered.environment or {}) do envs[#envs + 1] = k .. "=" .. shell.quote(v) end
    local cmd = ("cd %s && env PATH=%s OBLETH_PORT=20001 ARGV_OUT=%s %s /bin/sh %s"):format(
      shell.quote(dir), shell.quote(bin .. ":/usr/bin:/bin"), shell.quote(out), table.concat(envs, " "),
      shell.quote(script))
    assert(sh(cmd), "the job script failed:\n" .. body)
    return split_nul(assert(read(out), "the engine did not run"))
  end

  local function hostile_recipe(kind)
    local inputs, argv = {}, { "engine" }
    for i = 1, #hostile do
      inputs["v" .. i] = { type = "string" }
      argv[#argv + 1] = "{{ inputs.v" .. i .. " }}"
    end
    argv[#argv + 1] = "--name={{ model.api_name }}"
    argv[#argv + 1] = "{{ defaults.model_cache_dir }}"
    argv[#argv + 1] = "{{ defaults.modules }}"
    argv[#argv + 1] = "--port=$OBLETH_PORT"
    local tbl = { id = "hostile", name = "Hostile", engine = "custom", inputs = inputs, programs = { "engine" } }
    if kind == "launch" then
      tbl.launch = argv
    else
      local words = {}
      for i, a in ipairs(argv) do words[i] = a end
      words[#words] = "--port=\"$OBLETH_PORT\""
      tbl.script = "#!/bin/sh\nset -e\n# a comment\nexec " .. table.concat(words, " ") .. "\n"
    end
    return assert(recipe.validate(tbl))
  end

  local function values()
    local v = {}
    for i, h in ipairs(hostile) do v["v" .. i] = h end
    return v
  end

  local function expected()
    local want = {} -- the engine's own arguments ("$@", without the program name)
    for _, h in ipairs(hostile) do want[#want + 1] = h end
    want[#want + 1] = "--name=" .. hostile[2]
    want[#want + 1] = hostile[9]
    want[#want + 1] = hostile[1]
    want[#want + 1] = hostile[4]
    want[#want + 1] = "--port=20001"
    return want
  end

  for _, kind in ipairs({ "launch", "script" }) do
    it(("a %s recipe delivers every hostile value as one literal argument and runs nothing"):format(kind), function()
      local r = hostile_recipe(kind)
      local rendered = assert(recipe.render(r, values(),
        { model_cache_dir = hostile[9], modules = { hostile[1], hostile[4] } }, { api_name = hostile[2] }))
      local got = run(rendered)
      assert.same(expected(), got)
      assert.is_false(exists(pwned), "an injected command ran")
      assert.is_true(exists(sentinel), "an injected rm ran")
    end)
  end

  for _, kind in ipairs({ "launch", "script" }) do
    it(("a %s recipe refuses a value starting with '-' where it stands alone (it would be an option)"):format(kind),
      function()
        local r = hostile_recipe(kind)
        local v = values()
        v.v3 = "--trust-remote-code"
        local rendered, errs = recipe.render(r, v, { model_cache_dir = "/c", modules = {} }, { api_name = "m" })
        assert.is_nil(rendered)
        assert.equal("inputs.v3", errs.errors[1].field)
      end)
  end

  -- templates found by trying to break it: each either is refused when the
  -- recipe is checked, or runs with the value as data
  local tricky = {
    -- a heredoc body is the input of a command (which may be an interpreter): refused, whatever the delimiter
    { "heredoc with an odd delimiter", "#!/bin/bash\ncat <<EOF+X\nEOF\n{{ inputs.x }}\nEOF+X\n", "refused" },
    { "case inside a command substitution", '#!/bin/bash\necho "$(case a in a) echo " {{ inputs.x }} " ;; esac)"\n', "runs" },
    { "a shell's -c in a flag cluster", "#!/bin/bash\nbash -lc {{ inputs.x }}\n", "refused" },
    { "a heredoc split over lines", "#!/bin/bash\ncat <<EOF\n{{ inputs.x }}\nEOF\n", "refused" },
    { "a quote split over lines", '#!/bin/bash\necho "\n{{ inputs.x }}\n"\n', "refused" },
    { "arithmetic", "#!/bin/bash\necho $(( {{ inputs.x }} ))\n", "refused" },
  }
  -- the third column is the one outcome each template has: "refused" by recipe.validate (the error
  -- names the line), or "runs" with the value as data
  for _, t in ipairs(tricky) do
    local tbl = { id = "tricky", engine = "custom", inputs = { x = { type = "string" } }, script = t[2] }
    if t[3] == "refused" then
      it(("a script template with %s is refused when the recipe is checked, naming the line"):format(t[1]),
        function()
          local r, errs = recipe.validate(tbl)
          assert.is_nil(r)
          assert.matches("^line %d+: ", errs.errors[1].message)
        end)
    else
      it(("a script template with %s is accepted and never runs a hostile value"):format(t[1]), function()
        local r, errs = recipe.validate(tbl)
        assert.is_table(r, errs and errs.errors[1] and errs.errors[1].message)
        local value = "$(touch " .. pwned .. ")`touch " .. pwned .. "`;touch " .. pwned
        local rendered = assert(recipe.render(r, { x = value }, {}, { api_name = "m" }))
        local envs = {}
        for k, v in pairs(rendered.environment or {}) do envs[#envs + 1] = k .. "=" .. shell.quote(v) end
        write(dir .. "/tricky.sh", rendered.script_body)
        os.execute(("cd %s && env %s /bin/bash %s >/dev/null 2>&1"):format(shell.quote(dir),
          table.concat(envs, " "), shell.quote(dir .. "/tricky.sh")))
        assert.is_false(exists(pwned), "an injected command ran for: " .. t[1])
      end)
    end
  end

  it("values go through resolve unchanged (hostile strings are valid string inputs)", function()
    local r = hostile_recipe("launch")
    local user = { inputs = values(), api_name = "ok-name" }
    local res = recipe.resolve(r, user, {}, nil)
    assert.same({}, res.errors)
    local rendered = assert(recipe.render(r, res.values.inputs, { model_cache_dir = "/c" },
      { api_name = res.values.api_name }, res.values))
    local got = run(rendered)
    for i, h in ipairs(hostile) do assert.equal(h, got[i]) end
    assert.is_false(exists(pwned))
  end)

  it("a preamble line with a hostile list value loads each item as one argument", function()
    write(bin .. "/module", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\000' \"$a\"; done >>\"$ARGV_OUT.mod\"\n", "755")
    local r = assert(recipe.validate({ id = "p", engine = "custom", launch = { "engine", "x" },
      preamble = { { when = "defaults.modules", line = "module load {{ defaults.modules }}" } } }))
    local rendered = assert(recipe.render(r, {}, { modules = { hostile[2], hostile[9] } }, {}))
    run(rendered)
    assert.same({ "load", hostile[2], hostile[9] }, split_nul(assert(read(out .. ".mod"))))
    assert.is_false(exists(pwned))
  end)

  it("a recipe from YAML with hostile user values renders to the same literal argv", function()
    local text = table.concat({
      "id: yaml-hostile",
      "engine: custom",
      "inputs:",
      "  model: {type: string, required: true}",
      "  extra: {type: string, default: plain}",
      "launch: [engine, serve, '{{ inputs.model }}', '--extra={{ inputs.extra }}', --port, $OBLETH_PORT]",
      "programs: [engine]",
      "",
    }, "\n")
    local r = assert(recipe.load_text(text))
    local res = recipe.resolve(r, { inputs = { model = hostile[1], extra = hostile[3] } }, {}, nil)
    assert.same({}, res.errors)
    local got = run(assert(recipe.render(r, res.values.inputs, {}, { api_name = "m" })))
    assert.same({ "serve", hostile[1], "--extra=" .. hostile[3], "--port", "20001" }, got)
    assert.is_true(exists(sentinel))
    assert.is_false(exists(pwned))
  end)

  it("a NUL byte in a value is refused before anything runs", function()
    local r = hostile_recipe("launch")
    local v = values()
    v.v1 = "a\0b"
    local rendered, errs = recipe.render(r, v, {}, { api_name = "m" })
    assert.is_nil(rendered)
    assert.equal("launch[2]", errs.errors[1].field)
  end)

  describe("YAML errors carry line and column", function()
    it("a wrong type on line 5 points at that key", function()
      local text = "id: x\nengine: custom\ninputs:\n  tp:\n    type: integer\n    max: eight\nlaunch: [e]\n"
      local r, errs = recipe.load_text(text)
      assert.is_nil(r)
      assert.equal("inputs.tp.max", errs.errors[1].field)
      assert.equal(6, errs.errors[1].line)
      assert.equal(5, errs.errors[1].column)
    end)

    it("a syntax error gives the parser's position", function()
      local r, errs = recipe.load_text("id: [x\n")
      assert.is_nil(r)
      assert.is_number(errs.errors[1].line)
    end)
  end)
end)

describe("library recipes", function()
  local names = { "smoke-test", "vllm", "sglang", "llamacpp", "ollama", "vllm-multinode" }
  local defaults = { model_cache_dir = "/site/models", image_dir = "/site/images", log_dir = "/site/logs",
    modules = { "cuda/12" }, partition = "gpu", account = "research", qos = "normal" }
  local user = { inputs = { model = "/site/models/llama", gguf_path = "/site/models/q-00002-of-00003.gguf" },
    api_name = "chat" }

  local function load(name)
    local r, errs = recipe.load_file(root() .. "/recipes/" .. name .. ".yaml")
    assert(r, name .. ": " .. (errs and errs.errors[1] and (errs.errors[1].field .. " " .. tostring(errs.errors[1].line) .. ": "
      .. errs.errors[1].message) or "?"))
    return r
  end

  local function render(name, extra)
    local r = load(name)
    local u = { inputs = {}, api_name = user.api_name }
    for k in pairs(r.inputs) do u.inputs[k] = user.inputs[k] end
    for k, v in pairs(extra or {}) do u.inputs[k] = v end
    local res = recipe.resolve(r, u, defaults, nil)
    assert(res.ok, name .. ": " .. (res.errors[1] and (res.errors[1].field .. " " .. res.errors[1].message) or ""))
    return r, assert(recipe.render(r, res.values.inputs, defaults, { api_name = res.values.api_name }, res.values)), res
  end

  it("vllm's positional model input does not take --trust-remote-code", function()
    local r = load("vllm")
    local res = recipe.resolve(r, { inputs = { model = "--trust-remote-code" }, api_name = "m" }, defaults, nil)
    local out, errs = recipe.render(r, res.values.inputs, defaults, { api_name = "m" }, res.values)
    assert.is_nil(out)
    assert.equal("inputs.model", errs.errors[1].field)
  end)

  for _, name in ipairs(names) do
    it(name .. ": every setting says where it came from in the form's words (none is obleth's built-in)", function()
      local r = load(name)
      local res = recipe.resolve(r, { inputs = { model = "/m", gguf_path = "/m/x.gguf" } }, {}, nil)
      for f, p in pairs(res.provenance) do assert.are_not.equal("builtin", p, name .. ": " .. f) end
    end)

    it(name .. " loads, has id = file name, and hard-codes no site path", function()
      local r = load(name)
      assert.equal(name, r.id)
      local text = read(root() .. "/recipes/" .. name .. ".yaml")
      for _, p in ipairs({ "/site", "/scratch", "/home/", "/opt/", "/shared", "/data/" }) do
        assert.is_nil(text:find(p, 1, true), name .. " mentions " .. p)
      end
    end)

    it(name .. " renders to a job that /bin/bash can parse", function()
      local _, out = render(name)
      local body = out.script_body or ("#!/bin/bash\n" .. table.concat(out.preamble, "\n") .. "\n"
        .. out.launch_command .. "\n")
      local d = mkdtemp()
      write(d .. "/job.sh", body)
      local ok = sh("bash -n " .. shell.quote(d .. "/job.sh") .. " 2>/dev/null")
      sh("rm -rf " .. shell.quote(d))
      assert.is_true(ok, body)
    end)
  end

  it("vllm: vllm serve <model> --host 0.0.0.0 --port $OBLETH_PORT --served-model-name <api> "
    .. "--tensor-parallel-size <gpus>; readiness /health", function()
    local r, out = render("vllm")
    assert.same({ "vllm", "serve", "/site/models/llama", "--host", "0.0.0.0", "--port", "$OBLETH_PORT",
      "--served-model-name", "chat", "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.9",
      "--dtype", "auto" }, out.argv)
    assert.equal("/health", r.health.path)
    -- Cluster defaults' modules are loaded once, by the job script's prologue (obleth.job), not the recipe
    assert.same({}, out.preamble)
    assert.same({ HF_HOME = "/site/models", OBLETH_APPTAINER_BINDS = "/site/models,/site/images,/site/models/llama" },
      out.environment)
    assert.is_nil(out.image)
  end)

  it("vllm runs in an Apptainer image when one is given", function()
    local _, out = render("vllm", { image = "/site/images/vllm.sif" })
    assert.equal("/site/images/vllm.sif", out.image)
  end)

  for _, name in ipairs({ "vllm", "sglang", "llamacpp", "ollama", "vllm-multinode" }) do
    it(name .. ": an image given as a file name is taken from Cluster defaults' image dir", function()
      local _, out = render(name, { image = "engine.sif" })
      local where = out.image or out.environment.OBLETH_IN_IMAGE
      assert.equal("/site/images/engine.sif", where)
      local r = load(name)
      local res = recipe.resolve(r, { inputs = { model = "/m", gguf_path = "/m/x.gguf", image = "engine.sif" },
        api_name = "m" }, { model_cache_dir = "/c" }, nil)
      local none, errs = recipe.render(r, res.values.inputs, { model_cache_dir = "/c" }, { api_name = "m" },
        res.values)
      assert.is_nil(none)
      assert.equal("inputs.image", errs.errors[1].field)
      assert.matches("set Image dir in Cluster defaults", errs.errors[1].message, 1, true)
    end)
  end

  it("sglang: launch_server with --model-path, --served-model-name, --tp-size and a free --nccl-port; readiness "
    .. "/health_generate (after the warm-up)", function()
    local r, out = render("sglang")
    assert.same({ "python3", "-m", "sglang.launch_server", "--model-path", "/site/models/llama", "--host", "0.0.0.0",
      "--port", "$OBLETH_PORT", "--served-model-name", "chat", "--tp-size", "1", "--nccl-port", "$OBLETH_NCCL_PORT" },
      out.argv)
    assert.same({ "OBLETH_NCCL_PORT=$(obleth_free_port)" }, out.preamble)
    assert.equal("/health_generate", r.health.path)
  end)

  it("llamacpp: llama-server on the first shard of a split GGUF, --offline, with --alias, -ngl 999, the model's "
    .. "context (-c 0) and a thread per CPU Slurm gave the job", function()
    local r, out = render("llamacpp")
    assert.same({ "llama-server", "-m", "/site/models/q-00001-of-00003.gguf", "--offline", "--host", "0.0.0.0",
      "--port", "$OBLETH_PORT", "--alias", "chat", "-ngl", "999", "-c", "0", "-t", "${SLURM_CPUS_ON_NODE:-1}" },
      out.argv)
    assert.equal("/health", r.health.path)
    assert.same({}, out.preamble)
    local _, hf = render("llamacpp", { gguf_path = "", hf_repo = "org/m-GGUF", hf_file = "m-Q4_K_M.gguf" })
    assert.equal(1, #hf.preamble)
    assert.matches('HF_TOKEN=$(cat "$HF_TOKEN_PATH")', hf.preamble[1], 1, true)
    assert.is_nil(table.concat(hf.argv, " "):find("--offline", 1, true))
  end)

  it("every GPU library recipe asks for the longest time the partition allows (time_limit: max)", function()
    for _, name in ipairs({ "vllm", "sglang", "llamacpp", "ollama", "vllm-multinode" }) do
      local r = load(name)
      assert.equal("max", r.resources.time_limit, name)
      local res = recipe.resolve(r, { inputs = { model = "/m", gguf_path = "/m/x.gguf" } }, defaults, nil)
      assert.is_true(res.values.time_limit_max, name)
    end
  end)

  it("llamacpp refuses a file that is not .gguf", function()
    local r = load("llamacpp")
    local res = recipe.resolve(r, { inputs = { gguf_path = "/m/model.safetensors" } }, defaults, nil)
    assert.equal("inputs.gguf_path", res.errors[1].field)
  end)

  it("ollama: models dir under the cluster's model cache, bound to 0.0.0.0:$OBLETH_PORT", function()
    local r, out, res = render("ollama")
    assert.equal("/site/models/ollama", res.values.inputs.models_dir)
    assert.equal("cluster_default", res.provenance["inputs.models_dir"])
    assert.matches('export OLLAMA_MODELS="${OBLETH_IN_MODELS_DIR}"', out.script_body, 1, true)
    assert.equal("/site/models/ollama", out.environment.OBLETH_IN_MODELS_DIR)
    assert.matches('OLLAMA_HOST="0.0.0.0:${OBLETH_PORT}"', out.script_body, 1, true)
    assert.matches('"${RUN[@]}" ollama create "$NAME"', out.script_body, 1, true)
    -- the loopback server is the program itself, not a backgrounded shell function: $! is its pid
    assert.matches('"${RUN[@]}" ollama serve &\npid=$!', out.script_body, 1, true)
    assert.matches("unset ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES", out.script_body, 1, true)
    assert.matches('NAME="${OBLETH_MODEL_API_NAME}"', out.script_body, 1, true)
    assert.equal("chat", out.environment.OBLETH_MODEL_API_NAME)
    assert.equal("/api/tags", r.health.path)
  end)

  it("ollama needs a model cache dir (or an explicit models_dir)", function()
    local r = load("ollama")
    local res = recipe.resolve(r, { inputs = { gguf_path = "/m/x.gguf" } }, {}, nil)
    assert.equal("inputs.models_dir", res.errors[1].field)
  end)

  it("vllm-multinode: Ray head and workers by srun, TP = GPUs per node, PP = nodes", function()
    local r, out = render("vllm-multinode")
    assert.equal(2, r.resources.nodes)
    assert.matches('TP="${OBLETH_RESOURCES_GPUS_PER_NODE}"', out.script_body, 1, true)
    assert.matches('PP="${OBLETH_RESOURCES_NODES}"', out.script_body, 1, true)
    assert.equal("4", out.environment.OBLETH_RESOURCES_GPUS_PER_NODE)
    assert.equal("2", out.environment.OBLETH_RESOURCES_NODES)
    assert.matches("ray start --head", out.script_body, 1, true)
    assert.matches("--pipeline-parallel-size \"$PP\"", out.script_body, 1, true)
    assert.matches("--tensor-parallel-size \"$TP\"", out.script_body, 1, true)
  end)

  it("smoke-test: 1 node, 1 CPU, 512 MiB, no GPU, 30 min, partition from the cluster defaults", function()
    local r, out, res = render("smoke-test")
    assert.same({ "${OBLETH_BIN:-obleth}", "smoke-engine", "--startup-delay", "2", "--mode", "ok" }, out.argv)
    assert.same({ 1, 1, 512, 0, 30 }, { res.values.nodes, res.values.cpus_per_node, res.values.memory_per_node,
      res.values.gpus_per_node, res.values.time_limit })
    assert.equal("gpu", res.values.partition)
    assert.equal("cluster_default", res.provenance.partition)
    assert.same({ path = "/health", interval = 2, timeout = 2, startup_grace = 60, failure_threshold = 3 }, r.health)
  end)

  it("smoke-test in exit mode passes --exit-after", function()
    local _, out = render("smoke-test", { mode = "exit" })
    assert.same({ "${OBLETH_BIN:-obleth}", "smoke-engine", "--startup-delay", "2", "--mode", "exit",
      "--exit-after", "30" }, out.argv)
  end)

  it("smoke-test's rendered command starts the real smoke engine's argument parser", function()
    local _, out = render("smoke-test")
    assert.equal([["${OBLETH_BIN:-obleth}" 'smoke-engine' '--startup-delay' '2' '--mode' 'ok']], out.launch_command)
  end)
end)


-- bash evaluates an array subscript (and arithmetic) in a name or an arithmetic
-- context: a value `a[$(touch CANARY)]` there runs the command, quotes or not. Each
-- context below must be refused at validation; if one were accepted, the rendered
-- script runs under bash and must not create the canary.
describe("recipe scripts: name and arithmetic contexts under bash", function()
  local dir, canary

  before_each(function()
    dir = mkdtemp()
    canary = dir .. "/pwned"
  end)

  after_each(function()
    sh("rm -rf " .. shell.quote(dir))
  end)

  local function script_recipe(line)
    return {
      id = "t", name = "Test", engine = "custom",
      inputs = { x = { type = "string", required = true } },
      script = "#!/bin/bash\narr=(a b c)\nf() {\n  " .. line .. "\n}\n" .. line .. "\nf\ntrue\n",
    }
  end

  local contexts = {
    "printf -v {{ inputs.x }} '%s' 1",
    "printf -v{{ inputs.x }} '%s' 1",
    "read {{ inputs.x }} </dev/null",
    "read -r -a {{ inputs.x }} </dev/null",
    "test -v {{ inputs.x }}",
    "[ -v {{ inputs.x }} ]",
    "local {{ inputs.x }}=1",
    "export {{ inputs.x }}=1",
    "readonly {{ inputs.x }}=1",
    "unset {{ inputs.x }}",
    "mapfile -t {{ inputs.x }} </dev/null",
    "readarray {{ inputs.x }} </dev/null",
    "getopts ab {{ inputs.x }}",
    "arr[{{ inputs.x }}]=1",
    "arr+=([{{ inputs.x }}]=1)",
    "echo $[ {{ inputs.x }} ]",
    "echo \"$[ {{ inputs.x }} ]\"",
    "(( {{ inputs.x }} ))",
    "((n={{ inputs.x }}))",
    "for (( i={{ inputs.x }}; i<1; i++ )); do :; done",
    "declare -i n; n={{ inputs.x }}",
  }

  for _, line in ipairs(contexts) do
    it("refuses a reference in `" .. line .. "` and the value never runs", function()
      local value = "a[$(touch " .. canary .. ")]"
      local r, errs = recipe.validate(script_recipe(line))
      if r then
        local out = assert(recipe.render(r, { x = value }, {}, {}))
        local script = dir .. "/job.sh"
        write(script, out.script_body)
        local envs = {}
        for k, v in pairs(out.environment) do envs[#envs + 1] = k .. "=" .. shell.quote(v) end
        sh(("cd %s && env %s bash %s >/dev/null 2>&1"):format(shell.quote(dir), table.concat(envs, " "),
          shell.quote(script)))
        assert.is_false(exists(canary), "bash ran the value as code in: " .. line)
      end
      assert.is_nil(r, "accepted: " .. line)
      assert.equal("script", errs.errors[1].field)
      assert.matches("line %d+", errs.errors[1].message)
    end)
  end

  it("a variable that carries an input's text into arithmetic is refused when the recipe is checked", function()
    -- the reference itself is in a plain assignment; bash evaluates n's value in $((n))
    local r, errs = recipe.validate(script_recipe("n={{ inputs.x }}; echo $((n)) >/dev/null"))
    assert.is_nil(r)
    assert.equal("script", errs.errors[1].field)
    assert.matches("^line %d+: n carries an input's text into arithmetic", errs.errors[1].message)
    -- a whole number input may: its value is digits
    local int = script_recipe("n={{ inputs.x }}; echo $((n)) >/dev/null")
    int.inputs.x.type = "integer"
    assert.is_table(recipe.validate(int))
  end)

  it("a value that could run as a subscript is refused at render wherever a script holds it", function()
    local r = assert(recipe.validate(script_recipe("echo {{ inputs.x }} >/dev/null")))
    local out, errs = recipe.render(r, { x = "a[$(touch " .. canary .. ")]" }, {}, {})
    assert.is_nil(out)
    assert.equal("inputs.x", errs.errors[1].field)
    assert.matches("subscript", errs.errors[1].message)
    out = assert(recipe.render(r, { x = "8" }, {}, {}))
    assert.equal("8", out.environment.OBLETH_IN_X)
  end)

  it("values with brackets or with $ (not both) still reach the script as data under bash", function()
    local r = assert(recipe.validate(script_recipe("echo {{ inputs.x }} >>" .. shell.quote(dir .. "/out"))))
    for _, v in ipairs({ "n[1-2]", "$(touch " .. canary .. ")", "`touch " .. canary .. "`" }) do
      os.remove(dir .. "/out")
      local out = assert(recipe.render(r, { x = v }, {}, {}))
      local script = dir .. "/job.sh"
      write(script, out.script_body)
      assert(sh(("cd %s && env OBLETH_IN_X=%s bash %s"):format(shell.quote(dir),
        shell.quote(out.environment.OBLETH_IN_X), shell.quote(script))))
      assert.is_false(exists(canary))
      assert.equal((v .. "\n"):rep(2), read(dir .. "/out"))
    end
  end)
end)
