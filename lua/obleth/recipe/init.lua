--- Recipes: validate a recipe (already decoded from YAML), resolve the launch
-- form's settings with their provenance, and render the job script pieces of
-- a managed spec. The format is described in docs/recipes.md.
--
-- Injection safety. A recipe's author writes templates; the values put into
-- them (recipe inputs, cluster defaults, the API model name, resources) come
-- from users and are never trusted:
--   * in a `launch` argv list, every element becomes exactly one shell word:
--     author text and values are single-quoted (obleth.util.shell), and runtime
--     environment references (`$OBLETH_PORT`, `${NAME}`, `${NAME:-word}`)
--     become `"${NAME}"`; any other `$` is refused;
--   * in a `script` (and `preamble` lines) every `{{ ... }}` is replaced by
--     the single-quoted value, and `validate` refuses templates that place a
--     substitution where quoting would not hold: inside quotes, `${...}`,
--     `$((...))`, backticks, comments, heredoc bodies, after a backslash, or
--     as the argument of `eval` / `-c`;
--   * NUL bytes are refused everywhere; newlines stay literal inside quotes;
--   * a string or path input's text may stand only where it is data: obleth.recipe.contexts is the
--     allowlist (a data program's argument, an assignment's value, a variable used double-quoted),
--     and validate refuses every other place, naming the line.
--
-- Pure functions except `load_text` / `load_file`, which need the host's
-- obleth.yaml (and io for the file).
--
-- The parts: obleth.recipe.schema (what a recipe may contain), .templates
-- (references and where they may sit), .contexts (where an input's text may stand), .validate,
-- .render, .resolve, .load.
-- This module is their one public face.
local M = {}

-- names the parts share with each other, not part of the public face
local PART_ONLY = { TOP_KEYS = true, INPUT_KEYS = true, RES_RULES = true, HEALTH_RULES = true }

for _, name in ipairs({ "schema", "templates", "validate", "render", "resolve", "load" }) do
  for k, v in pairs(require("obleth.recipe." .. name)) do
    if k:sub(1, 1) ~= "_" and not PART_ONLY[k] then M[k] = v end
  end
end
M._sorted_keys = require("obleth.recipe.schema")._sorted_keys

return M
