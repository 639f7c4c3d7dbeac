-- Which engines can run a repo, decided from the Hub's model info alone.
-- Fixtures are in spec/fixtures/hub (see its README for where each shape comes from).
local cjson = require("cjson")
local detect = require("obleth.hf.detect")

local function root()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return src:match("^(.*)/spec/unit/[^/]*$") or "."
end

local function fixture(name)
  local fh = assert(io.open(root() .. "/spec/fixtures/hub/" .. name .. ".json"))
  local doc = cjson.decode(fh:read("a"))
  fh:close()
  return doc
end

local function engine(r, name)
  for _, e in ipairs(r.engines) do if e.engine == name then return e end end
  return nil
end

local function names(r)
  local out = {}
  for _, e in ipairs(r.engines) do out[#out + 1] = e.engine end
  return out
end

local function notes_text(t) return table.concat(t.notes, "\n") end

describe("obleth.hf.detect", function()
  it("single-file safetensors with config.json: vLLM and SGLang, sized from the file", function()
    local r = detect.detect(fixture("model_safetensors"), { gpu_type = "h100" })
    assert.same({ "safetensors" }, r.formats)
    assert.same({ "vllm", "sglang" }, names(r))
    local v = engine(r, "vllm")
    assert.equal(988097824, v.size_bytes)
    assert.same({ "config.json", "model.safetensors" }, v.choices[1].files)
    assert.equal("files", v.choices[1].size_source)
    assert.same({ recipe_id = "vllm", model = "Qwen/Qwen2.5-0.5B-Instruct",
      revision = "7ae557604adf67be50417f59c2c2f167def9a775", gpus = 1 },
      { recipe_id = v.choices[1].prefill.recipe_id, model = v.choices[1].prefill.inputs.model,
        revision = v.choices[1].prefill.inputs.revision, gpus = v.choices[1].prefill.gpus_per_node })
    assert.equal("sglang", engine(r, "sglang").choices[1].prefill.recipe_id)
  end)

  it("sharded safetensors with an index count every shard once", function()
    local r = detect.detect(fixture("model_sharded"), { gpu_type = "t4" })
    local v = engine(r, "vllm")
    -- 3945441440 + 3864726320 + 3864726424 + 3556377672
    assert.equal(15231271856, v.size_bytes)
    assert.same({ "config.json", "model.safetensors.index.json", "model-00001-of-00004.safetensors",
      "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors" },
      v.files)
    -- 15.23e9 * 1.2 = 18.28e9 B > 16 GiB (17.18e9 B) -> 2 T4s
    assert.equal(2, v.choices[1].prefill.gpus_per_node)
  end)

  it("the original/ consolidated .pth of a Llama repo is not offered, the HF shards are", function()
    local r = detect.detect(fixture("model_gated"))
    assert.same({ "vllm", "sglang" }, names(r))
    local v = engine(r, "vllm")
    assert.equal(1, #v.choices)
    assert.equal(4976698672 + 4999802720 + 4915916176 + 1168138808, v.size_bytes)
    for _, f in ipairs(v.files) do assert.is_nil(f:find("original/", 1, true)) end
  end)

  it("a missing shard makes the choice say the model is incomplete", function()
    local info = fixture("model_sharded")
    table.remove(info.siblings, 8) -- model-00002-of-00004.safetensors
    local r = detect.detect(info)
    assert.truthy(notes_text(r):find("3 of 4 safetensors shards", 1, true))
  end)

  it("GGUF only: llama.cpp and Ollama, one choice per quantization, no vLLM", function()
    local r = detect.detect(fixture("model_gguf"), { gpu_type = "l4" })
    assert.same({ "gguf" }, r.formats)
    assert.same({ "llama.cpp", "ollama" }, names(r))
    assert.truthy(notes_text(r):find("vLLM and SGLang cannot", 1, true))
    local l = engine(r, "llama.cpp")
    assert.equal(12, #l.choices)
    local quants = {}
    for _, c in ipairs(l.choices) do quants[#quants + 1] = c.quant end
    table.sort(quants)
    assert.same({ "F16", "IQ3_M", "IQ4_XS", "Q2_K", "Q3_K_L", "Q3_K_XL", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K",
      "Q6_K_L", "Q8_0" }, quants)
    -- smallest first, Q4_K_M is the default
    assert.equal("Q2_K", l.choices[1].quant)
    assert.equal("F16", l.choices[#l.choices].quant)
    local d = l.choices[l.default]
    assert.equal("Q4_K_M", d.quant)
    assert.equal("Llama-3.2-1B-Instruct-Q4_K_M.gguf", d.first_file)
    assert.equal(807694496, d.size_bytes)
    -- the llamacpp recipe's inputs: llama-server downloads the file itself
    assert.same({ hf_repo = "bartowski/Llama-3.2-1B-Instruct-GGUF", hf_file = "Llama-3.2-1B-Instruct-Q4_K_M.gguf" },
      d.prefill.inputs)
    assert.equal("llamacpp", d.prefill.recipe_id)
    local o = engine(r, "ollama")
    assert.equal("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", o.choices[o.default].prefill.inputs.pull)
    -- the imatrix file is not a model
    for _, c in ipairs(l.choices) do assert.is_nil(c.first_file:find("imatrix", 1, true)) end
    assert.equal("llama", r.architecture)
    assert.equal(131072, r.context_length)
  end)

  it("split GGUF in per-quantization folders, listed out of order, is one choice naming the first part", function()
    local r = detect.detect(fixture("model_split_gguf"), { gpu_type = "h100" })
    local l = engine(r, "llama.cpp")
    assert.equal(4, #l.choices) -- Q4_K_M, UD-Q2_K_XL, BF16, UD-IQ1_S; mmproj files are not models
    local by = {}
    for _, c in ipairs(l.choices) do by[c.quant] = c end
    local q4 = by.Q4_K_M
    assert.equal("Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", q4.first_file)
    assert.equal(49950000000 + 49860000000 + 42110000000, q4.size_bytes)
    assert.equal(3, #q4.files)
    assert.is_true(q4.split)
    assert.is_true(q4.complete)
    assert.equal("Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", q4.prefill.inputs.hf_file)
    assert.equal("BF16/Qwen3-235B-A22B-BF16-00001-of-00010.gguf", by.BF16.first_file)
    assert.equal(9 * 47000000000 + 47500000000, by.BF16.size_bytes)
    assert.equal("UD-Q2_K_XL/Qwen3-235B-A22B-UD-Q2_K_XL-00001-of-00002.gguf", by["UD-Q2_K_XL"].first_file)
    assert.equal("Qwen3-235B-A22B-UD-IQ1_S.gguf", by["UD-IQ1_S"].first_file)
    -- llama.cpp splits by layers: no power of two. BF16: 470.5e9 * 1.2 / 80 GiB = 6.6 -> 7
    assert.equal(7, by.BF16.prefill.gpus_per_node)
    assert.equal("Q4_K_M", l.choices[l.default].quant)
    -- the F16 vision projector goes with every choice
    assert.equal("mmproj-F16.gguf", q4.mmproj)
    assert.truthy(table.concat(q4.notes, " "):find("mmproj-F16.gguf", 1, true))
    -- Ollama cannot pull split GGUF from the Hub: marked, not hidden
    local o = engine(r, "ollama")
    assert.equal(4, #o.choices)
    for _, c in ipairs(o.choices) do
      assert.equal(not c.split, c.supported)
    end
    assert.equal("UD-IQ1_S", o.choices[o.default].quant)
  end)

  it("a split GGUF with a part missing is incomplete and not supported", function()
    local info = fixture("model_split_gguf")
    for i, s in ipairs(info.siblings) do
      if s.rfilename == "Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf" then table.remove(info.siblings, i) end
    end
    local r = detect.detect(info)
    for _, c in ipairs(engine(r, "llama.cpp").choices) do
      if c.quant == "Q4_K_M" then
        assert.is_false(c.complete)
        assert.is_false(c.supported)
      end
    end
    assert.truthy(notes_text(r):find("2 of its 3 parts", 1, true))
  end)

  it("a repo with safetensors and GGUF offers both families, each with only its own files", function()
    local r = detect.detect(fixture("model_both"))
    assert.same({ "safetensors", "gguf" }, r.formats)
    assert.same({ "vllm", "sglang", "llama.cpp", "ollama" }, names(r))
    local v = engine(r, "vllm")
    assert.equal(4945242264 + 67121608, v.size_bytes)
    for _, f in ipairs(v.files) do assert.is_nil(f:find("%.gguf$")) end
    local l = engine(r, "llama.cpp")
    assert.same({ "gemma-2b.gguf" }, l.files)
    assert.equal(10031780672, l.size_bytes)
    local o = engine(r, "ollama")
    assert.equal("hf.co/google/gemma-2b:latest", o.choices[1].prefill.inputs.pull)
  end)

  it("pytorch_model.bin only: vLLM and SGLang with a note about pickles", function()
    local r = detect.detect(fixture("model_pytorch_bin"))
    assert.same({ "pytorch" }, r.formats)
    assert.same({ "vllm", "sglang" }, names(r))
    local c = engine(r, "vllm").choices[1]
    assert.same({ "config.json", "pytorch_model.bin" }, c.files)
    assert.equal(250540281, c.size_bytes)
    assert.truthy(notes_text(c):find("pickle", 1, true))
  end)

  it("an adapter-only repo names its base model and how vLLM serves it", function()
    local r = detect.detect(fixture("model_adapter"))
    assert.same({ "adapter" }, r.formats)
    assert.same({ "vllm" }, names(r))
    assert.equal("meta-llama/Llama-3.1-8B-Instruct", r.base_model)
    local c = engine(r, "vllm").choices[1]
    assert.equal("lora", c.id)
    assert.same({ "--enable-lora", "--lora-modules", "llama-3.1-8b-sql-lora=obleth-fixtures/llama-3.1-8b-sql-lora" },
      c.args)
    assert.equal("meta-llama/Llama-3.1-8B-Instruct", c.prefill.inputs.model)
    assert.equal("llama-3.1-8b-sql-lora=obleth-fixtures/llama-3.1-8b-sql-lora", c.prefill.inputs.lora_modules)
    assert.truthy(notes_text(c):find("serve the base model meta-llama/Llama-3.1-8B-Instruct", 1, true))
  end)

  it("an adapter whose base the Hub does not name says to read adapter_config.json", function()
    local r = detect.detect(fixture("model_adapter_no_base"))
    assert.is_nil(r.base_model)
    local c = engine(r, "vllm").choices[1]
    assert.truthy(notes_text(c):find("base_model_name_or_path in adapter_config.json", 1, true))
    assert.is_nil(c.prefill.inputs.model)
    assert.same({ "adapter_config.json", "adapter_model.bin" }, c.files)
  end)

  it("the base model can come from a base_model:adapter: tag", function()
    local info = fixture("model_adapter")
    info.cardData = cjson.null
    local r = detect.detect(info)
    assert.equal("meta-llama/Llama-3.1-8B-Instruct", r.base_model)
  end)

  it("a base_model that is not a repo id never reaches the command line", function()
    local info = fixture("model_adapter")
    info.cardData.base_model = "https://evil.example/x; rm -rf /"
    info.tags = {}
    local r = detect.detect(info)
    assert.is_nil(r.base_model)
    assert.is_nil(engine(r, "vllm").choices[1].prefill.inputs.model)
  end)

  it("Mistral's repo with both layouts offers the HF layout and the native one on vLLM", function()
    local r = detect.detect(fixture("model_mistral"))
    local v = engine(r, "vllm")
    assert.equal(2, #v.choices)
    assert.equal("safetensors", v.choices[1].id)
    assert.equal(4949453792 + 4999819336 + 4546807800, v.choices[1].size_bytes)
    local m = v.choices[2]
    assert.equal("mistral", m.id)
    assert.same({ "--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral" }, m.args)
    assert.same({ "params.json", "tokenizer.model.v3", "consolidated.safetensors" }, m.files)
    assert.equal(14496078512, m.size_bytes)
    assert.is_true(m.prefill.inputs.mistral_format)
    assert.equal(1, #engine(r, "sglang").choices)
  end)

  it("Mistral native layout only: vLLM with the mistral formats, no SGLang", function()
    local r = detect.detect(fixture("model_mistral_native"))
    assert.same({ "vllm" }, names(r))
    local c = engine(r, "vllm").choices[1]
    assert.equal("mistral", c.id)
    assert.same({ "params.json", "tekken.json", "consolidated.safetensors" }, c.files)
    assert.truthy(notes_text(r):find("SGLang needs the Hugging Face layout", 1, true))
  end)

  it("siblings, safetensors, gguf, config and cardData null: no engines, a note, no error", function()
    local r = detect.detect(fixture("model_nulls"))
    assert.same({}, r.engines)
    assert.same({}, r.formats)
    assert.truthy(notes_text(r):find("no file list", 1, true))
  end)

  it("fields absent altogether: no error", function()
    local r = detect.detect({ id = "a/b" })
    assert.same({}, r.engines)
    r = detect.detect({})
    assert.equal("?", r.repo_id)
  end)

  it("siblings without sizes: engines found, size unknown, 1 GPU with a note", function()
    local r = detect.detect(fixture("model_no_sizes"), { gpu_type = "a100" })
    assert.same({ "vllm", "sglang", "llama.cpp", "ollama" }, names(r))
    local c = engine(r, "vllm").choices[1]
    assert.is_nil(c.size_bytes)
    assert.equal(1, c.prefill.gpus_per_node)
    assert.truthy(notes_text(c.prefill.gpu_estimate):find("size is not known", 1, true))
  end)

  it("without sizes, safetensors parameter counts give the size", function()
    local info = fixture("model_sharded")
    for _, s in ipairs(info.siblings) do s.size, s.lfs = nil, nil end
    local r = detect.detect(info)
    local c = engine(r, "vllm").choices[1]
    assert.equal(7615616512 * 2, c.size_bytes)
    assert.equal("safetensors.parameters", c.size_source)
  end)

  it("safetensors without config.json are not offered to vLLM", function()
    local r = detect.detect({ id = "a/b", siblings = { { rfilename = "model.safetensors", size = 10 } } })
    assert.same({}, r.engines)
    assert.truthy(notes_text(r):find("without config.json", 1, true))
  end)

  describe("parse_quant", function()
    for name, want in pairs({
      ["Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"] = "Q4_K_M",
      ["qwen2.5-7b-instruct-q8_0-00001-of-00003.gguf"] = "Q8_0",
      ["llama-2-7b.Q5_K_S.gguf"] = "Q5_K_S",
      ["Llama-3.2-1B-Instruct-IQ2_XS.gguf"] = "IQ2_XS",
      ["Phi-3-mini-4k-instruct-fp16.gguf"] = "F16",
      ["gemma-2-9b-it-BF16.gguf"] = "BF16",
      ["ggml-model-f16.gguf"] = "F16",
      ["Qwen3-30B-A3B-UD-Q4_K_XL.gguf"] = "UD-Q4_K_XL",
      ["Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"] = "Q4_K_M",
      ["Q6_K/model-00001-of-00002.gguf"] = "Q6_K",
      ["llama_3_8b_q4_k_m.gguf"] = "Q4_K_M",
      ["model.IQ4_NL.gguf"] = "IQ4_NL",
      ["gpt-oss-20b-MXFP4.gguf"] = "MXFP4",
      ["gemma-2b.gguf"] = false,
      ["Qwen3-8B.gguf"] = false,
    }) do
      it(name .. " -> " .. tostring(want), function()
        assert.equal(want or nil, detect.parse_quant((name:gsub("%-%d+%-of%-%d+%.gguf$", ".gguf"))))
      end)
    end
  end)
end)
