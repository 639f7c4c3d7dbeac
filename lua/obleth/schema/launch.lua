--- The launch flow's request bodies (docs/launch.md), as data (obleth.schema): POST
-- /api/v1/deployments/preview (LaunchPreview), /launch (LaunchRequest) and /check-yaml (LaunchYaml). The
-- dispatcher checks each body against its schema before the handler runs (obleth.api.request), and the
-- OpenAPI schemas of those names are read from here.
--
-- Only the body's shape is here: the settings under `values` are the launch form's (obleth.recipe's and
-- obleth.deployment's checks: a 422 with the preview), and the rule between fields — exactly one of
-- recipe_id or hf, unless `model_id` launches a stopped model again as it was — is the handler's.
local recipe = require "obleth.schema.recipe"

local M = {}

--- A recipe named by id (a library or a saved one).
M.recipe_id = { type = "string", nullable = true, max_len = recipe.ID_LOOKUP_MAX, pattern = recipe.ID_LOOKUP_PATTERN,
  rule = "a recipe id (letters, digits, '.', '_', '-')" }

--- A Hugging Face choice (docs/huggingface.md): the repo, the engine, one of the engine's choices.
M.hf = { type = "object", nullable = true, required = { "repo_id", "engine" },
  shape = "{repo_id, revision?, engine, choice?}",
  description = "instead of recipe_id: a model from the Hugging Face Hub; the engine's recipe is used",
  fields = {
    { "repo_id", { type = "string", max_len = 256, code = "invalid_repo_id", shape = "namespace/name" } },
    { "revision", { type = "string", nullable = true, max_len = 256, code = "invalid_revision",
      description = "a branch, tag or commit (default: main)" } },
    { "engine", { type = "string", max_len = 64, shape = "vllm, sglang, llama.cpp, ollama" } },
    { "choice", { type = "one_of", nullable = true, of = { { type = "string", max_len = 256 },
      { type = "integer", min = 1, max = 1000 } },
      description = "one of the engine's choices, by id or by position (1, 2, ...); default: the engine's own" } },
  },
}

local VALUES = { type = "object", open = true, nullable = true, shape = "{setting: value}",
  description = "the launch form's settings by name (what the preview's settings list); left out: the defaults" }
local API_MODEL_NAME = { type = "string", nullable = true, max_len = 4096, multiline = true,
  description = "the API model name clients will send (checked with the settings: a 422 with the preview)" }

--- POST /api/v1/deployments/preview (and what a launch shares with it).
M.preview = { type = "object", fields = {
  { "recipe_id", M.recipe_id },
  { "hf", M.hf },
  { "api_model_name", API_MODEL_NAME },
  { "values", VALUES },
} }

--- POST /api/v1/deployments/launch: a preview's body, and where to save the recipe, or the model to launch
--- again ({model_id} alone: as it was last launched).
M.request = { type = "object", fields = {
  { "recipe_id", M.recipe_id },
  { "hf", M.hf },
  { "api_model_name", API_MODEL_NAME },
  { "values", VALUES },
  { "save_recipe", { type = "object", nullable = true, required = { "id" }, shape = "{id, name}",
    description = "save the launch's settings as a recipe of this id (a library one's id is refused)",
    fields = { { "id", recipe.id }, { "name", { type = "string", nullable = true, max_len = 256 } } } } },
  { "model_id", { type = "integer", nullable = true, min = 1, max = math.maxinteger,
    description = "launch this stopped model again (it keeps its name); alone: with its last launch's settings" } },
} }

--- POST /api/v1/deployments/check-yaml: the launch settings as YAML ("Edit as YAML").
M.yaml = { type = "object", required = { "yaml" }, fields = {
  { "yaml", { type = "string", max_len = 1048576, multiline = true, shape = "the settings as YAML text" } },
  { "recipe_id", M.recipe_id },
  { "hf", M.hf },
} }

return M
