-- From Hugging Face to a launch preview: obleth serve reads the stand-in Hub
-- (HF_ENDPOINT), and each engine's choice previews as a runnable job of the
-- matching library recipe. No Slurm needed: without a connection the preview
-- skips the cluster checks (with a warning) but still renders the job.
local server = require "spec.support.server"
local fake_hub = require "spec.support.fake_hub"
local plain = require("obleth.provisioner.client").plain

describe("launch preview from a Hugging Face choice", function()
  local hub, srv
  setup(function()
    hub = fake_hub.start()
    srv = server.start { env = { HF_ENDPOINT = hub.url } }
  end)
  teardown(function()
    srv:stop(); srv:cleanup()
    hub.close()
  end)

  local function preview(hf)
    local status, doc, raw = srv:request("POST", "/api/v1/deployments/preview", { hf = hf, api_model_name = "m" })
    assert.equal(200, status, raw)
    return plain(doc)
  end

  it("a GGUF quantization runs on llama.cpp, which downloads that file from the repo", function()
    local p = preview({ repo_id = "bartowski/Llama-3.2-1B-Instruct-GGUF", engine = "llama.cpp" })
    local inputs = p.settings["inputs.hf_repo"] and p.settings or nil
    assert.is_table(inputs, "no hf_repo setting in the preview")
    assert.equal("bartowski/Llama-3.2-1B-Instruct-GGUF", p.settings["inputs.hf_repo"].value)
    assert.equal("Llama-3.2-1B-Instruct-Q4_K_M.gguf", p.settings["inputs.hf_file"].value)
    assert.matches("'--hf-repo'", p.job_script, 1, true)
    assert.matches("'--hf-file'", p.job_script, 1, true)
    for _, w in ipairs(p.warnings or {}) do assert.is_nil(w:find("has no input", 1, true), w) end
  end)

  it("a safetensors repo runs on vLLM with the repo id as the model", function()
    local p = preview({ repo_id = "Qwen/Qwen2.5-0.5B-Instruct", engine = "vllm" })
    assert.equal("Qwen/Qwen2.5-0.5B-Instruct", p.settings["inputs.model"].value)
    assert.matches("'vllm' 'serve' 'Qwen/Qwen2.5-0.5B-Instruct'", p.job_script, 1, true)
    for _, w in ipairs(p.warnings or {}) do assert.is_nil(w:find("has no input", 1, true), w) end
  end)

  it("Also save these settings as a recipe: the saved recipe keeps the repo id and the GPUs the choice set", function()
    local p = preview({ repo_id = "Qwen/Qwen2.5-0.5B-Instruct", engine = "vllm" })
    local gpus = p.settings.gpus_per_node.value
    assert.is_true(gpus > 0, "the choice sets GPUs")
    local status, doc, raw = srv:request("POST", "/api/v1/deployments/launch", {
      hf = { repo_id = "Qwen/Qwen2.5-0.5B-Instruct", engine = "vllm" }, api_model_name = "qwen-saved",
      values = { replicas = 0, partition = "gpu" }, save_recipe = { id = "qwen-mine" } })
    assert.equal(201, status, raw)
    assert.equal("qwen-mine", doc.recipe.id)
    local again = plain(select(2, srv:request("POST", "/api/v1/deployments/preview", { recipe_id = "qwen-mine",
      api_model_name = "qwen-2" })))
    assert.same({ value = "Qwen/Qwen2.5-0.5B-Instruct", provenance = "recipe" }, again.settings["inputs.model"])
    assert.same({ value = gpus, provenance = "recipe" }, again.settings.gpus_per_node)
    assert.same({}, again.errors or {})
  end)

  it("an engine that cannot run the repo is a field error", function()
    local status, doc = srv:request("POST", "/api/v1/deployments/preview",
      { hf = { repo_id = "bartowski/Llama-3.2-1B-Instruct-GGUF", engine = "vllm" }, api_model_name = "m" })
    assert.equal(422, status)
    assert.equal("hf.engine", doc.error.field)
  end)
  it("Edit as YAML: a second YAML document is a diagnostic on its separator line, not ignored", function()
    local status, doc = srv:request("POST", "/api/v1/deployments/check-yaml",
      { yaml = "replicas: 2\n---\nreplicas: 3\n", recipe_id = "smoke-test" })
    assert.equal(200, status)
    assert.is_false(doc.ok)
    assert.equal(2, doc.diagnostics[1].line)
    assert.matches("more than one YAML document", doc.diagnostics[1].message, 1, true)
  end)
end)
