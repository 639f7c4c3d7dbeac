--- A recipe's identity and top-level keys, and a saved recipe as the API takes it (POST /api/v1/recipes,
-- PUT /api/v1/recipes/{id}: the body is the recipe, as JSON), as data (obleth.schema). What each key
-- holds is the recipe format's (obleth.recipe, docs/recipes.md), which reads its ids, engines and keys
-- from here; the OpenAPI Recipe is read from here too.
local M = {}

--- A recipe's id (a library file's, a recipe saved at launch): a lower-case letter or digit,
--- then lower-case letters, digits, '.', '_', '-'; at most ID_MAX characters.
M.ID_PATTERN = "^[a-z0-9][a-z0-9._-]*$"
M.ID_MAX = 64
M.ID_RULE = "lower-case letters, digits, '.', '_' and '-', starting with a letter or digit (at most 64)"
--- What an id a recipe is looked up by (in a URL, a query, a saved document) may hold: letters of
--- either case, digits, '.', '_', '-'; at most ID_LOOKUP_MAX characters.
M.ID_LOOKUP_PATTERN = "^[A-Za-z0-9._%-]+$"
M.ID_LOOKUP_MAX = 128

--- The engines a recipe may name.
M.ENGINES = { "vllm", "sglang", "llamacpp", "ollama", "smoke", "custom" }

--- A recipe's id where one is given to save a recipe under.
M.id = { type = "string", max_len = M.ID_MAX, pattern = M.ID_PATTERN, rule = M.ID_RULE }

-- a key whose value is the recipe format's to check
local ANY = { type = "any" }

--- A recipe to save under the URL's id (PUT /api/v1/recipes/{id}): its top-level keys (the recipe
--- format's), with id, name, engine and source checked here. The id may be left out (the URL's);
--- `source` is read-only ("saved", as GET shows it).
M.saved = { type = "object", required = { "engine" },
  description = "a recipe (docs/recipes.md, recipes/*.yaml), as JSON; the keys' contents are checked by "
    .. "the recipe format (400 naming the field)",
  fields = {
    { "id", { type = "string", max_len = M.ID_MAX, pattern = M.ID_PATTERN, rule = M.ID_RULE,
      description = "left out of a PUT: the URL's" } },
    { "name", { type = "string", nullable = true, max_len = 256 } },
    { "engine", { type = "string", enum = M.ENGINES } },
    { "source", { type = "string", nullable = true, enum = { "saved" }, enum_text = "\"saved\" (it is read-only)",
      description = "read-only: sent back, ignored" } },
    { "description", ANY }, { "inputs", ANY }, { "resources", ANY }, { "health", ANY }, { "script", ANY },
    { "image", ANY }, { "launch", ANY }, { "preamble", ANY }, { "environment", ANY }, { "replicas", ANY },
    { "rollover_margin", ANY }, { "stdout", ANY }, { "stderr", ANY }, { "one_of", ANY }, { "requires", ANY },
    { "programs", ANY }, { "autoscale", ANY },
  },
}

--- A new recipe to save (POST /api/v1/recipes): the same, with its id.
M.new = { type = "object", required = { "id", "engine" }, description = M.saved.description, fields = M.saved.fields }

--- The recipe's top-level keys (a set).
M.KEYS = {}
for _, f in ipairs(M.saved.fields) do M.KEYS[f[1]] = true end

return M
