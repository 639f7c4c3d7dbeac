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
local schema = require "obleth.recipe.schema"
local templates = require "obleth.recipe.templates"
local validate = require "obleth.recipe.validate"
local render = require "obleth.recipe.render"
local resolve = require "obleth.recipe.resolve"
local load = require "obleth.recipe.load"

-- the public face, each name from the part that owns it
return {
  -- the format (obleth.recipe.schema)
  API_NAME_MAX = schema.API_NAME_MAX, API_NAME_PATTERN = schema.API_NAME_PATTERN, API_NAME_RULE = schema.API_NAME_RULE,
  DEFAULT_KEYS = schema.DEFAULT_KEYS, ENGINES = schema.ENGINES, FILTERS = schema.FILTERS,
  HEALTH_DEFAULTS = schema.HEALTH_DEFAULTS, ID_LOOKUP_MAX = schema.ID_LOOKUP_MAX,
  ID_LOOKUP_PATTERN = schema.ID_LOOKUP_PATTERN, ID_MAX = schema.ID_MAX, ID_PATTERN = schema.ID_PATTERN,
  INPUT_TYPES = schema.INPUT_TYPES, MAX_PATTERN_REPEATS = schema.MAX_PATTERN_REPEATS,
  MAX_PATTERN_VALUE = schema.MAX_PATTERN_VALUE, MODEL_KEYS = schema.MODEL_KEYS, PROVENANCE = schema.PROVENANCE,
  RESOURCE_KEYS = schema.RESOURCE_KEYS, SPEC_DEFAULTS = schema.SPEC_DEFAULTS, TOP_SETTINGS = schema.TOP_SETTINGS,
  invalid = schema.invalid, pattern_repeats = schema.pattern_repeats,
  -- templates, validation, rendering, resolving, loading
  parse_template = templates.parse_template,
  validate = validate.validate, check_input = validate.check_input,
  TIME_MAX = validate.TIME_MAX, TIME_MAX_FALLBACK = validate.TIME_MAX_FALLBACK,
  render = render.render, apptainer_binds = render.apptainer_binds,
  resolve = resolve.resolve, apply_cluster = resolve.apply_cluster, managed_spec = resolve.managed_spec,
  AUTOSCALE_KEYS = resolve.AUTOSCALE_KEYS,
  load_text = load.load_text, load_file = load.load_file, load_dir = load.load_dir,
}
