-- obleth.recipe on plain tables (no YAML, no host). Expected command lines
-- are written by hand from the quoting rule: each value is one '...' word,
-- runtime references become "${NAME}".
local recipe = require "obleth.recipe"

local function base(over)
  local r = {
    id = "t", name = "Test", engine = "custom",
    -- the stand-in programs take an input's text as data (obleth.recipe.contexts)
    programs = { "engine", "e" },
    inputs = {
      model = { type = "string", required = true },
      tp = { type = "integer", default = 1, min = 1, max = 8 },
      dtype = { type = "enum", values = { "auto", "bf16" }, default = "auto" },
      eager = { type = "boolean", default = false },
      ctx = { type = "integer" },
      weights = { type = "path" },
    },
    resources = { gpus_per_node = 2, time_limit = "2:00:00" },
    launch = { "engine", "{{ inputs.model }}", "--port", "$OBLETH_PORT" },
  }
  for k, v in pairs(over or {}) do r[k] = v end
  return r
end

-- The fields of a list of field errors ({field, message}), or of an error in the one shape
-- ({code = "invalid", field, message, errors = that list}: recipe.validate's and render's).
local function fields_of(errs)
  if errs.code ~= nil then
    assert.equal("invalid", errs.code)
    assert.equal(errs.errors[1].message, errs.message)
    errs = errs.errors
  end
  local out = {}
  for _, e in ipairs(errs) do out[#out + 1] = e.field end
  table.sort(out)
  return out
end

local function valid(tbl)
  local r, errs = recipe.validate(tbl)
  assert(r, errs and errs.errors[1] and (errs.errors[1].field .. ": " .. errs.errors[1].message))
  return r
end

describe("obleth.recipe", function()
  describe("validate", function()
    it("accepts a launch recipe and turns the time limit into minutes", function()
      local r = valid(base())
      assert.equal(120, r.resources.time_limit)
      assert.equal(2, r.resources.gpus_per_node)
      assert.equal("/health", r.health.path)
      assert.equal(600, r.health.startup_grace)
    end)

    it("names the field of every problem, with line and column from positions", function()
      local tbl = base({ engine = "tgi", colour = "red" })
      tbl.inputs.tp.max = "eight"
      local pos = setmetatable({}, { __mode = "k" })
      pos[tbl] = { engine = { line = 3, column = 1 }, colour = { line = 9, column = 1 } }
      pos[tbl.inputs.tp] = { max = { line = 7, column = 5 } }
      local r, errs = recipe.validate(tbl, pos)
      assert.is_nil(r)
      assert.same({ "colour", "engine", "inputs.tp.max" }, fields_of(errs))
      local by = {}
      for _, e in ipairs(errs.errors) do by[e.field] = e end
      assert.same({ 3, 1 }, { by.engine.line, by.engine.column })
      assert.same({ 7, 5 }, { by["inputs.tp.max"].line, by["inputs.tp.max"].column })
      assert.same({ 9, 1 }, { by.colour.line, by.colour.column })
    end)

    it("takes account and QoS under resources, and job logs and the rollover margin at the top", function()
      local r = valid(base({ resources = { account = "teaching", qos = "long" }, stdout = "/logs/%x-%j.out",
        stderr = "/logs/%x-%j.err", rollover_margin = 20, replicas = 2 }))
      assert.same({ "teaching", "long", "/logs/%x-%j.out", 20, 2 },
        { r.resources.account, r.resources.qos, r.stdout, r.rollover_margin, r.replicas })
      local res = recipe.resolve(r, {}, {})
      assert.same({ value = "teaching", provenance = "recipe" }, { value = res.values.account,
        provenance = res.provenance.account })
      assert.same({ "/logs/%x-%j.err", "recipe" }, { res.values.stderr, res.provenance.stderr })
      local _, errs = recipe.validate(base({ resources = { account = "a b", replicas = 2, stdout = "/x" },
        stdout = "/a\nb", rollover_margin = -1 }))
      assert.same({ "resources.account", "resources.replicas", "resources.stdout", "rollover_margin", "stdout" },
        fields_of(errs))
    end)

    it("requires exactly one of script and launch", function()
      local both = base({ script = "#!/bin/sh\nx\n" })
      assert.same({ "launch" }, fields_of(select(2, recipe.validate(both))))
      local none = base()
      none.launch = nil
      assert.same({ "script" }, fields_of(select(2, recipe.validate(none))))
    end)

    it("refuses a launch that is a string instead of an argv list", function()
      local r, errs = recipe.validate(base({ launch = "vllm serve x" }))
      assert.is_nil(r)
      assert.same({ "launch" }, fields_of(errs))
    end)

    it("refuses references to undeclared inputs and unknown namespaces", function()
      local _, errs = recipe.validate(base({ launch = { "e", "{{ inputs.nope }}", "{{ secrets.token }}",
        "{{ defaults.hf_token }}" } }))
      assert.same({ "launch[2]", "launch[3]", "launch[4]" }, fields_of(errs))
    end)

    it("refuses a $ in an argv element other than $NAME, ${NAME}, ${NAME:-word} or $$", function()
      local _, errs = recipe.validate(base({ launch = { "e", "$(id)" } }))
      assert.same({ "launch[2]" }, fields_of(errs))
      assert.is_table(recipe.validate(base({ launch = { "e", "$A", "${B}", "${C:-x/y}", "cost$$" } })))
    end)

    it("checks input declarations: enum values, min <= max, pattern, default of the right type", function()
      local tbl = base()
      tbl.inputs.dtype.values = {}
      tbl.inputs.tp.min, tbl.inputs.tp.max = 4, 2
      tbl.inputs.model.pattern = "[a-"
      tbl.inputs.eager.default = "maybe"
      local _, errs = recipe.validate(tbl)
      assert.same({ "inputs.dtype.values", "inputs.eager.default", "inputs.model.pattern", "inputs.tp.max" },
        fields_of(errs))
    end)

    it("checks resources with the managed spec's ranges and Slurm's time forms", function()
      local _, errs = recipe.validate(base({ resources = { nodes = 0, gpus_per_node = 65, time_limit = "UNLIMITED",
        memory_per_node = -1, partition = "gpu queue" } }))
      assert.same({ "resources.gpus_per_node", "resources.memory_per_node", "resources.nodes",
        "resources.partition", "resources.time_limit" }, fields_of(errs))
    end)

    it("refuses environment names a shell cannot hold", function()
      local _, errs = recipe.validate(base({ environment = { ["BAD-NAME"] = "x", GOOD = "y" } }))
      assert.same({ "environment.BAD-NAME" }, fields_of(errs))
    end)

    describe("script templates place every value where its quotes hold", function()
      local function script_errors(body)
        local tbl = base({ script = body })
        tbl.launch = nil
        local r, errs = recipe.validate(tbl)
        return r, errs
      end

      it("accepts values as whole words or glued to text outside quotes", function()
        assert.is_table(script_errors("#!/bin/sh\nengine {{ inputs.model }} --tp={{ inputs.tp }} \"$X\"\n"))
        assert.is_table(script_errors("#!/bin/bash\nM={{ inputs.model }}\nx=$(echo {{ inputs.model }})\n"))
        assert.is_table(script_errors("#!/bin/sh\nif [ -n {{ inputs.model }} ]; then a | b {{ inputs.tp }}; fi\n"))
      end)

      local bad = {
        { "inside double quotes", "engine \"{{ inputs.model }}\"\n" },
        { "inside single quotes", "engine '{{ inputs.model }}'\n" },
        { "inside $'...' after an escaped quote", "engine $'a\\' {{ inputs.model }} '\n" },
        { "inside backticks", "x=`echo {{ inputs.model }}`\n" },
        { "inside ${...}", "x=${Y:-{{ inputs.model }}}\n" },
        { "inside $((...))", "x=$(( {{ inputs.tp }} + 1 ))\n" },
        { "inside a comment", "engine # {{ inputs.model }}\n" },
        { "right after a backslash", "engine \\{{ inputs.model }}\n" },
        { "inside a heredoc body", "cat <<EOF\n{{ inputs.model }}\nEOF\n" },
        { "in an eval command", "eval run {{ inputs.model }}\n" },
        { "as the argument of -c", "sh -c {{ inputs.model }}\n" },
        { "inside double quotes around $(...)", "x=\"$(echo \"{{ inputs.model }}\")\"\n" },
      }
      for _, case in ipairs(bad) do
        it("refuses a value " .. case[1], function()
          local r, errs = script_errors("#!/bin/sh\n" .. case[2])
          assert.is_nil(r)
          assert.same({ "script" }, fields_of(errs))
        end)
      end

      it("accepts a value after a heredoc has ended", function()
        assert.is_table(script_errors("#!/bin/sh\ncat <<'EOF'\nplain $text\nEOF\nengine {{ inputs.model }}\n"))
      end)
    end)
  end)

  describe("render", function()
    it("quotes every argv element as one word and keeps $OBLETH_PORT a runtime reference", function()
      local r = valid(base())
      local out = assert(recipe.render(r, { model = "/m/llama" }, {}, { api_name = "llama" }))
      assert.equal([['engine' '/m/llama' '--port' "${OBLETH_PORT}"]], out.launch_command)
      assert.same({ "engine", "/m/llama", "--port", "$OBLETH_PORT" }, out.argv)
      assert.is_nil(out.script_body)
    end)

    it("glues text, values and runtime references into one word", function()
      local r = valid(base({ launch = { "e", "--model={{ inputs.model }}", "0.0.0.0:$OBLETH_PORT",
        "${OBLETH_BIN:-obleth}" } }))
      local out = assert(recipe.render(r, { model = "a b" }, {}, {}))
      assert.equal([['e' '--model=''a b' '0.0.0.0:'"${OBLETH_PORT}" "${OBLETH_BIN:-obleth}"]], out.launch_command)
    end)

    it("renders resources, model and defaults references", function()
      local r = valid(base({ launch = { "e", "{{ model.api_name }}", "{{ resources.gpus_per_node }}",
        "{{ defaults.model_cache_dir }}" } }))
      local out = assert(recipe.render(r, { model = "m" }, { model_cache_dir = "/c" }, { api_name = "n" },
        { gpus_per_node = 4 }))
      assert.equal([['e' 'n' '4' '/c']], out.launch_command)
      out = assert(recipe.render(r, { model = "m" }, { model_cache_dir = "/c" }, { api_name = "n" }))
      assert.equal([['e' 'n' '2' '/c']], out.launch_command, "falls back to the recipe's resources")
    end)

    it("adds `when` arguments only when the reference is set, or equals the value given", function()
      local r = valid(base({ launch = { "e",
        { when = "inputs.ctx", args = { "--ctx", "{{ inputs.ctx }}" } },
        { when = "inputs.eager", args = { "--eager" } },
        { when = { ["inputs.dtype"] = "bf16" }, args = { "--bf16" } } } }))
      local out = assert(recipe.render(r, { ctx = nil, eager = false, dtype = "auto" }, {}, {}))
      assert.equal("'e'", out.launch_command)
      out = assert(recipe.render(r, { ctx = 4096, eager = true, dtype = "bf16" }, {}, {}))
      assert.equal("'e' '--ctx' '4096' '--eager' '--bf16'", out.launch_command)
    end)

    it("expands a list value that is a whole element into one word per item", function()
      local r = valid(base({ launch = { "e", "{{ defaults.modules }}", "x" },
        preamble = { { when = "defaults.modules", line = "module load {{ defaults.modules }}" } } }))
      local out = assert(recipe.render(r, {}, { modules = { "cuda/12", "a b" } }, {}))
      assert.equal("'e' 'cuda/12' 'a b' 'x'", out.launch_command)
      -- in a preamble line each item reaches the shell as its own "${...}" word, its value in the job environment
      assert.same({ 'module load "${OBLETH_DEFAULTS_MODULES_1}" "${OBLETH_DEFAULTS_MODULES_2}"' }, out.preamble)
      assert.equal("cuda/12", out.environment.OBLETH_DEFAULTS_MODULES_1)
      assert.equal("a b", out.environment.OBLETH_DEFAULTS_MODULES_2)
      out = assert(recipe.render(r, {}, { modules = {} }, {}))
      assert.equal("'e' 'x'", out.launch_command)
      assert.same({}, out.preamble)
    end)

    it("refuses a list glued to other text", function()
      local r = valid(base({ launch = { "e", "--m={{ defaults.modules }}" } }))
      local out, errs = recipe.render(r, {}, { modules = { "a" } }, {})
      assert.is_nil(out)
      assert.equal("launch[2]", errs.errors[1].field)
    end)

    it("refuses a value holding a NUL byte", function()
      local r = valid(base())
      local out, errs = recipe.render(r, { model = "a\0b" }, {}, {})
      assert.is_nil(out)
      assert.equal("launch[2]", errs.errors[1].field)
    end)

    it("renders a script whose values never become script text: each is a quoted environment reference", function()
      local tbl = base({ script = "#!/bin/sh\nexec engine {{ inputs.model }} --name={{ model.api_name }}\n" })
      tbl.launch = nil
      local r = valid(tbl)
      local out = assert(recipe.render(r, { model = "x'y\nz" }, {}, { api_name = "$(id)" }))
      assert.equal('#!/bin/sh\nexec engine "${OBLETH_IN_MODEL}" --name="${OBLETH_MODEL_API_NAME}"\n', out.script_body)
      assert.equal("x'y\nz", out.environment.OBLETH_IN_MODEL)
      assert.equal("$(id)", out.environment.OBLETH_MODEL_API_NAME)
      assert.is_nil(out.launch_command)
    end)

    it("a value that starts with '-' is refused where it stands as an argument of its own", function()
      local r = valid(base())
      local out, errs = recipe.render(r, { model = "--trust-remote-code" }, {}, {})
      assert.is_nil(out)
      assert.equal("inputs.model", errs.errors[1].field)
      assert.matches("must not start with '%-'", errs.errors[1].message)
      -- glued to an option it is that option's value: fine
      local glued = valid(base({ launch = { "engine", "--model={{ inputs.model }}" } }))
      assert.is_truthy(recipe.render(glued, { model = "-x" }, {}, {}))
      -- a script's reference standing as a word is positional too
      local tbl = base({ script = "#!/bin/sh\nexec engine {{ inputs.model }} --tp={{ inputs.tp }}\n" })
      tbl.launch = nil
      out, errs = recipe.render(valid(tbl), { model = "-rf", tp = 1 }, {}, {})
      assert.is_nil(out)
      assert.equal("inputs.model", errs.errors[1].field)
      -- numbers may be negative
      local neg = valid(base({ inputs = { model = { type = "string" }, n = { type = "integer", min = -5 } },
        launch = { "engine", "{{ inputs.n }}" } }))
      assert.is_truthy(recipe.render(neg, { model = "m", n = -1 }, {}, {}))
    end)

    it("refuses references where the shell would parse the value again", function()
      for _, script in ipairs({ "bash -lc {{ inputs.model }}", "sh -xc {{ inputs.model }}", "eval {{ inputs.model }}",
        "let n={{ inputs.model }}", "[[ {{ inputs.model }} -gt 1 ]]", "ssh host {{ inputs.model }}",
        "trap {{ inputs.model }} EXIT" }) do
        local tbl = base({ script = "#!/bin/bash\n" .. script .. "\n" })
        tbl.launch = nil
        local r, errs = recipe.validate(tbl)
        assert.is_nil(r, script)
        assert.equal("script", errs.errors[1].field, script)
      end
    end)

    it("renders image and environment as plain strings and leaves out empty ones", function()
      local r = valid(base({ image = "{{ defaults.image_dir }}/vllm.sif",
        environment = { HF_HOME = "{{ defaults.model_cache_dir }}", EMPTY = "{{ inputs.weights }}", N = 3 } }))
      local out = assert(recipe.render(r, { model = "m" }, { image_dir = "/img", model_cache_dir = "/c" }, {}))
      assert.equal("/img/vllm.sif", out.image)
      assert.same({ HF_HOME = "/c", N = "3", OBLETH_APPTAINER_BINDS = "/c,/img" }, out.environment)
    end)

    it("takes a file name from Cluster defaults' image dir through the in_image_dir filter", function()
      local r = valid(base({ image = "{{ inputs.model | in_image_dir }}" }))
      assert.equal("/img/v.sif", assert(recipe.render(r, { model = "v.sif" }, { image_dir = "/img/" }, {})).image)
      assert.equal("/abs/v.sif", assert(recipe.render(r, { model = "/abs/v.sif" }, {}, {})).image)
      assert.is_nil(recipe.render(r, { model = "" }, {}, {}).image)
      local out, errs = recipe.render(r, { model = "v.sif" }, {}, {})
      assert.is_nil(out)
      assert.equal("inputs.model", errs.errors[1].field)
    end)

    it("passes the first shard of a split GGUF through the first_shard filter", function()
      local r = valid(base({ launch = { "llama-server", "-m", "{{ inputs.weights | first_shard }}" } }))
      local out = assert(recipe.render(r, { weights = "/m/q4-00003-of-00005.gguf" }, {}, {}))
      assert.equal("'llama-server' '-m' '/m/q4-00001-of-00005.gguf'", out.launch_command)
      out = assert(recipe.render(r, { weights = "/m/single.gguf" }, {}, {}))
      assert.equal("'llama-server' '-m' '/m/single.gguf'", out.launch_command)
    end)
  end)

  describe("resolve", function()
    local r
    before_each(function() r = valid(base()) end)

    it("an optional string input the user cleared is unset, even when a default filled it", function()
      local rr = valid({ id = "c", engine = "custom", programs = { "engine" },
        inputs = { repo = { type = "string", pattern = "[%w]+/[%w]+", default = "org/m" },
          file = { type = "path" } },
        launch = { "engine", { when = "inputs.repo", args = { "--repo", "{{ inputs.repo }}" } } } })
      local res = recipe.resolve(rr, { inputs = { repo = "" } }, {}, nil)
      assert.same({}, res.errors)
      assert.is_nil(res.values.inputs.repo)
      local out = assert(recipe.render(rr, res.values.inputs, {}, { api_name = "c" }, res.values))
      assert.same({ "engine" }, out.argv)
      -- left alone, the default stands
      res = recipe.resolve(rr, { inputs = {} }, {}, nil)
      assert.equal("org/m", res.values.inputs.repo)
    end)

    it("marks each value with where it came from", function()
      local res = recipe.resolve(r, { inputs = { model = "/m/x" }, qos = "long" },
        { partition = "gpu", account = "research", qos = "normal", log_dir = "/logs" },
        { account = "teaching", qos = "normal", evidence = { 3, 2, 1 } })
      assert.same({}, res.errors)
      assert.is_true(res.ok)
      local v, p = res.values, res.provenance
      assert.equal("gpu", v.partition); assert.equal("cluster_default", p.partition)
      assert.equal("teaching", v.account); assert.equal("learned", p.account)
      assert.equal("long", v.qos); assert.equal("user", p.qos)
      assert.equal(120, v.time_limit); assert.equal("recipe", p.time_limit)
      assert.equal(2, v.gpus_per_node); assert.equal("recipe", p.gpus_per_node)
      assert.equal(1, v.nodes); assert.equal("builtin", p.nodes) -- obleth's fallback, not the recipe's
      assert.equal("/logs/%x-%j.out", v.stdout); assert.equal("cluster_default", p.stdout)
      assert.equal("/m/x", v.inputs.model); assert.equal("user", p["inputs.model"])
      assert.equal(1, v.inputs.tp); assert.equal("recipe", p["inputs.tp"])
      assert.equal("t", v.api_name); assert.equal("recipe", p.api_name)
      assert.equal("/health", v.health.path); assert.equal("recipe", p["health.path"])
    end)

    it("what the cluster decides is the last layer: never over the user's choice, the built-in time limit gives way", function()
      local rr = valid({ id = "c", engine = "custom", programs = { "engine" }, launch = { "engine" } })
      local res = recipe.resolve(rr, { partition = "gpu" }, {}, nil)
      assert.equal("builtin", res.provenance.time_limit)
      recipe.apply_cluster(res, { partition = "debug", default_time = 30, max_time = 60, qos = "short" }, rr)
      local v, p = res.values, res.provenance
      assert.same({ "gpu", "user" }, { v.partition, p.partition })       -- the user chose it
      assert.same({ 30, "cluster_default" }, { v.time_limit, p.time_limit }) -- DefaultTime
      assert.same({ "short", "cluster_default" }, { v.qos, p.qos })
      local f = {}
      for _, x in ipairs(res.fields) do f[x.field] = x end
      assert.same({ field = "qos", value = "short", provenance = "cluster_default" }, f.qos)
      -- a partition nobody chose follows the cluster; a built-in time limit above MaxTime is capped
      res = recipe.resolve(rr, {}, { partition = "gpu" }, nil)
      recipe.apply_cluster(res, { partition = "debug", max_time = 10 }, rr)
      assert.same({ "debug", "cluster_default" }, { res.values.partition, res.provenance.partition })
      assert.same({ 10, "cluster_default" }, { res.values.time_limit, res.provenance.time_limit })
      -- a time limit the user gave is never changed; `max` takes MaxTime and keeps its provenance
      res = recipe.resolve(rr, { time_limit = "45" }, {}, nil)
      recipe.apply_cluster(res, { default_time = 30, max_time = 60 }, rr)
      assert.same({ 45, "user" }, { res.values.time_limit, res.provenance.time_limit })
      res = recipe.resolve(rr, { time_limit = "max" }, {}, nil)
      recipe.apply_cluster(res, { default_time = 30, max_time = 60 }, rr)
      assert.same({ 60, "user" }, { res.values.time_limit, res.provenance.time_limit })
      -- Slurm's default partition only when nothing named one
      res = recipe.resolve(rr, {}, {}, nil)
      recipe.apply_cluster(res, { default_partition = "batch" }, rr)
      assert.same({ "batch", "cluster_default" }, { res.values.partition, res.provenance.partition })
    end)

    it("lists the fields in form order: settings, health, then inputs", function()
      local res = recipe.resolve(r, { inputs = { model = "m" } }, {}, nil)
      local names = {}
      for _, f in ipairs(res.fields) do names[#names + 1] = f.field end
      assert.equal("api_name", names[1])
      assert.equal("time_limit", names[2])
      local last = names[#names]
      assert.matches("^inputs%.", last)
    end)

    it("coerces form strings and reports per-field errors", function()
      local res = recipe.resolve(r, { ["inputs.model"] = "m", ["inputs.tp"] = "9", nodes = "2",
        time_limit = "bogus", ["health.interval"] = "0", colour = "red" }, {}, nil)
      assert.is_false(res.ok)
      assert.same({ "colour", "health.interval", "inputs.tp", "time_limit" }, fields_of(res.errors))
      assert.equal(2, res.values.nodes)
    end)

    it("reports a missing required input", function()
      local res = recipe.resolve(r, {}, {}, nil)
      assert.same({ "inputs.model" }, fields_of(res.errors))
    end)

    it("takes a 1-day time limit in Slurm's D-HH form", function()
      local res = recipe.resolve(r, { inputs = { model = "m" }, time_limit = "1-00" }, {}, nil)
      assert.equal(1440, res.values.time_limit)
    end)

    it("checks path inputs are absolute and one line", function()
      local res = recipe.resolve(r, { inputs = { model = "m", weights = "relative/x" } }, {}, nil)
      assert.same({ "inputs.weights" }, fields_of(res.errors))
      res = recipe.resolve(r, { inputs = { model = "m", weights = "/a\n/b" } }, {}, nil)
      assert.same({ "inputs.weights" }, fields_of(res.errors))
    end)

    it("marks an input default built on a cluster default as cluster_default, and drops it when unset", function()
      local tbl = base()
      tbl.inputs.weights = { type = "path", default = "{{ defaults.model_cache_dir }}/w", required = true }
      local rr = valid(tbl)
      local res = recipe.resolve(rr, { inputs = { model = "m" } }, { model_cache_dir = "/c" }, nil)
      assert.equal("/c/w", res.values.inputs.weights)
      assert.equal("cluster_default", res.provenance["inputs.weights"])
      res = recipe.resolve(rr, { inputs = { model = "m" } }, {}, nil)
      assert.same({ "inputs.weights" }, fields_of(res.errors))
    end)

    it("builds a managed spec from resolved values and a render", function()
      local res = recipe.resolve(r, { inputs = { model = "m" }, api_name = "chat" }, { partition = "gpu" }, nil)
      local out = assert(recipe.render(r, res.values.inputs, {}, { api_name = res.values.api_name }, res.values))
      local spec = recipe.managed_spec(r, res.values, out)
      assert.equal("gpu", spec.partition)
      assert.equal(120, spec.time_limit)
      assert.equal("t", spec.recipe_id)
      assert.equal([['engine' 'm' '--port' "${OBLETH_PORT}"]], spec.launch_command)
      assert.same({}, spec.preamble)
    end)
  end)
end)

describe("obleth.recipe input patterns stay cheap", function()
  local function with_pattern(p)
    return recipe.validate({ id = "p", engine = "custom", programs = { "e" }, inputs = { x = { type = "string", pattern = p } },
      launch = { "e", "{{ inputs.x }}" } })
  end

  it("counts repetition operators outside sets and escapes only", function()
    assert.equal(2, recipe.pattern_repeats("[%w._-]+/[%w._-]+"))
    assert.equal(1, recipe.pattern_repeats(".+%.gguf"))
    assert.equal(0, recipe.pattern_repeats("%-%+%*[-+*?]"))
    assert.equal(5, recipe.pattern_repeats(".-.-.-.-.-!"))
  end)

  it("refuses a pattern with more than two repetition operators", function()
    local r, errs = with_pattern(".-.-.-.-.-!")
    assert.is_nil(r)
    assert.equal("inputs.x.pattern", errs.errors[1].field)
  end)

  it("checks the worst allowed pattern against the longest allowed value quickly", function()
    local r = assert(with_pattern(".-.-!"))
    local t0 = os.clock()
    local ok, err = recipe.check_input(r.inputs.x, ("a"):rep(recipe.MAX_PATTERN_VALUE), "inputs.x")
    assert.is_nil(ok)
    assert.matches("does not match", err)
    assert.is_true(os.clock() - t0 < 2, "took " .. (os.clock() - t0) .. " s")
    local _, long = recipe.check_input(r.inputs.x, ("a"):rep(recipe.MAX_PATTERN_VALUE + 1), "inputs.x")
    assert.matches("longer than", long)
  end)
end)

describe("obleth.recipe rules across inputs", function()
  local function rec(extra)
    local t = { id = "r", engine = "custom", launch = { "e" },
      inputs = { a = { type = "string" }, b = { type = "string" }, c = { type = "string" } } }
    for k, v in pairs(extra) do t[k] = v end
    return recipe.validate(t)
  end

  it("one_of: a form that sets none of a group gets a field error naming them", function()
    local r = assert(rec({ one_of = { { "a", "b" } } }))
    local res = recipe.resolve(r, { api_name = "m", inputs = {} }, {}, nil)
    assert.equal("inputs.a", res.errors[1].field)
    assert.matches("give one of inputs.a, inputs.b", res.errors[1].message, 1, true)
    assert.same({}, recipe.resolve(r, { api_name = "m", inputs = { b = "x" } }, {}, nil).errors)
  end)

  it("requires: setting an input needs the ones it names", function()
    local r = assert(rec({ requires = { a = { "c" } } }))
    local res = recipe.resolve(r, { api_name = "m", inputs = { a = "x" } }, {}, nil)
    assert.equal("inputs.c", res.errors[1].field)
    assert.same({}, recipe.resolve(r, { api_name = "m", inputs = { a = "x", c = "y" } }, {}, nil).errors)
    assert.same({}, recipe.resolve(r, { api_name = "m", inputs = {} }, {}, nil).errors)
  end)

  it("refuses rules that name inputs the recipe does not have", function()
    local r, errs = rec({ one_of = { { "a", "zz" } } })
    assert.is_nil(r)
    assert.equal("one_of[1][2]", errs.errors[1].field)
    r, errs = rec({ requires = { zz = { "a" } } })
    assert.is_nil(r)
    assert.equal("requires.zz", errs.errors[1].field)
  end)
end)
