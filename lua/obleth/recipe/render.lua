--- obleth.recipe.render — rendering a validated recipe into the job-script fields of a managed
-- spec, every value quoted where it lands.
local shell = require "obleth.util.shell"
local schema = require "obleth.recipe.schema"
local templates = require "obleth.recipe.templates"
-- the names this part's code shares with the other parts of obleth.recipe
local M = {}
local _v, _text = schema.value, schema.text
local _parse_argv_element = templates.parse_argv_element

---------------------------------------------------------------------------
-- rendering
---------------------------------------------------------------------------

local function _first_shard(v)
  -- "x-00003-of-00005.gguf" -> "x-00001-of-00005.gguf" (llama.cpp loads the rest itself)
  if type(v) ~= "string" then return v end
  local pre, digits, post = v:match("^(.*%-)(%d+)(%-of%-%d+%.gguf)$")
  if not pre then return v end
  return pre .. ("%0" .. #digits .. "d"):format(1) .. post
end

-- Look a reference up in the render context; lists stay lists.
local function _lookup(ctx, ns, name)
  local src = ctx[ns]
  local v = src and _v(src[name])
  return v
end

-- A value or template that cannot be rendered: the one error shape, on the field it is about.
local function _bad(field, message) return { code = "invalid", field = field, message = message } end

-- `| in_image_dir`: a file name is taken from Cluster defaults' image_dir; an absolute path
-- or a blank stays as it is. A file name with no image_dir set is an error on the reference.
local function _in_image_dir(ctx, v, ref)
  if type(v) ~= "string" or v == "" or v:sub(1, 1) == "/" then return v end
  local dir = _v(ctx.defaults.image_dir)
  if type(dir) ~= "string" or dir == "" then
    return nil, _bad(ref.ns .. "." .. ref.name, ("%s.%s: %q is a file name: set Image dir in Cluster defaults, "
      .. "or give an absolute path"):format(ref.ns, ref.name, v))
  end
  return (dir:gsub("/+$", "")) .. "/" .. v
end

-- A reference's value (lists stay lists), or nil, err {code = "invalid", field = the reference, message}
-- when its filter refuses it.
local function _value(ctx, ref)
  local v = _lookup(ctx, ref.ns, ref.name)
  if ref.filter == "first_shard" then v = _first_shard(v) end
  if ref.filter == "in_image_dir" then
    local err
    v, err = _in_image_dir(ctx, v, ref)
    if err then return nil, err end
  end
  if v == nil and ref.ns == "defaults" and ref.name == "modules" then return {} end
  if v == nil then return "" end
  if type(v) == "number" and (v ~= v or v == math.huge or v == -math.huge) then
    -- never 'inf' or 'nan' in a job: check_input refuses them; this guards every other way in
    return nil, _bad(ref.ns .. "." .. ref.name, ("%s.%s must be a finite number"):format(ref.ns, ref.name))
  end
  if type(v) == "table" then
    local list = {}
    for i, x in ipairs(v) do list[i] = _text(x) end
    return list
  end
  return _text(v)
end

local function _when_holds(ctx, when)
  local ref, want = when, nil
  if type(when) == "table" then ref, want = next(when) end
  local ns, name = tostring(ref):match("^([%a_][%w_]*)%.([%a_][%w_]*)$")
  local v = _lookup(ctx, ns, name)
  if want ~= nil then return v ~= nil and _text(v) == _text(want) end
  if v == nil or v == false or v == "" then return false end
  if type(v) == "table" and next(v) == nil then return false end
  return true
end

-- The error when a value holds a NUL byte, else nil.
local function _nul_check(v, field)
  if type(v) == "table" then
    for _, x in ipairs(v) do
      if x:find("\0", 1, true) then return _bad(field, field .. ": a value contains a NUL byte") end
    end
  elseif v:find("\0", 1, true) then
    return _bad(field, field .. ": a value contains a NUL byte")
  end
end

-- One argv element -> list of shell words (0..n), plus its display form.
-- An input's value that stands as an argument of its own and starts with "-" would be
-- read as an option ("--trust-remote-code" as a model): refused, on the input's field.
-- Numbers may be negative; a value glued to text ("--model={{ inputs.model }}") is that
-- option's value.
local function _dash_check(p, v)
  if p.ns ~= "inputs" then return nil end
  for _, x in ipairs(type(v) == "table" and v or { v }) do
    if type(x) == "string" and x:sub(1, 1) == "-" and not tonumber(x) then
      return _bad("inputs." .. p.name, ("inputs.%s: must not start with '-' here: it stands as an argument of "
        .. "its own and would be read as an option"):format(p.name))
    end
  end
  return nil
end

-- Returns words, shown | nil, err {code = "invalid", field, message}.
local function _render_argv_element(ctx, text, field)
  local items, err = _parse_argv_element(text)
  if not items then return nil, _bad(field, field .. ": " .. err) end
  if #items == 1 and items[1].kind == "ref" then
    local v, ferr = _value(ctx, items[1])
    if ferr then return nil, ferr end
    local e = _nul_check(v, field) or _dash_check(items[1], v)
    if e then return nil, e end
    if type(v) == "table" then
      local words = {}
      for i, x in ipairs(v) do words[i] = shell.quote(x) end
      return words, v
    end
    return { (shell.quote(v)) }, { v }
  end
  local word, shown = {}, {}
  for _, it in ipairs(items) do
    if it.kind == "text" then
      word[#word + 1] = shell.quote(it.text); shown[#shown + 1] = it.text
    elseif it.kind == "env" then
      if it.default then
        word[#word + 1] = ('"${%s:-%s}"'):format(it.name, it.default)
        shown[#shown + 1] = ("${%s:-%s}"):format(it.name, it.default)
      else
        word[#word + 1] = ('"${%s}"'):format(it.name); shown[#shown + 1] = "$" .. it.name
      end
    else
      local v, ferr = _value(ctx, it)
      if ferr then return nil, ferr end
      if type(v) == "table" then
        return nil, _bad(field, field .. ": " .. it.raw .. " is a list; a list must be an argument of its own")
      end
      local e = _nul_check(v, field)
      if e then return nil, e end
      word[#word + 1] = shell.quote(v); shown[#shown + 1] = v
    end
  end
  return { table.concat(word) }, { table.concat(shown) }
end

-- The job-environment name that carries a reference's value into a script:
-- OBLETH_IN_<NAME> for inputs, OBLETH_<NS>_<NAME> for the other namespaces.
local function _env_name(p, i)
  local ns = p.ns == "inputs" and "IN" or p.ns:upper()
  local n = ("OBLETH_%s_%s"):format(ns, p.name:upper():gsub("[^%w]", "_"))
  if i then n = n .. "_" .. i end
  return n
end

-- In a script template (and a preamble line) a reference never becomes
-- text of the script: it renders as "${OBLETH_IN_NAME}", and the value
-- travels in the job's environment (ctx.env). The result of a parameter
-- expansion is never parsed as shell code, so whatever the template's
-- context (a heredoc, quotes, a case pattern, lines split over the
-- preamble), a value reaches the program as data; the contexts that parse
-- text again (-c, eval, arithmetic) are refused by _check_script_context.
-- A value bash could run where it evaluates it as a number or a name (a variable
-- holding it used in $((n)), [[ n -gt 1 ]], ${a[n]}, declare -i): an array
-- subscript that expands something, `a[$(cmd)]`. No model id, path or number has one.
local function _subscript_code(v)
  return type(v) == "string" and v:find("[", 1, true) ~= nil and v:find("[%$`]") ~= nil
end

-- Returns the script text, or nil, err {code = "invalid", field, message}.
local function _render_script(ctx, text, field)
  local parts, err = templates.parse_template(text)
  if not parts then return nil, _bad(field, field .. ": " .. err) end
  -- the value goes to the environment; the script gets a quoted reference to it
  local function ref(name, value)
    ctx.env[name] = tostring(value)
    return '"${' .. name .. '}"'
  end
  local out = {}
  for pi, p in ipairs(parts) do
    if p.kind == "text" then
      out[#out + 1] = p.text
    else
      local v, ferr = _value(ctx, p)
      if ferr then return nil, ferr end
      local e = _nul_check(v, field)
      if e then return nil, e end
      local before, after = parts[pi - 1], parts[pi + 1]
      if (not before or (before.kind == "text" and before.text:match("[%s;&|(]$")))
        and (not after or (after.kind == "text" and after.text:match("^[%s;&|)]"))) then
        local de = _dash_check(p, v)
        if de then return nil, de end
      end
      for _, x in ipairs(type(v) == "table" and v or { v }) do
        if _subscript_code(x) then
          return nil, _bad(p.ns .. "." .. p.name, ("%s.%s: a value with [ and $ or ` is refused in a script: bash "
            .. "would run it as an array subscript where the script uses it as a number or a name"):format(p.ns, p.name))
        end
      end
      if type(v) == "table" then
        local words = {}
        for i, x in ipairs(v) do words[i] = ref(_env_name(p, i), x) end
        out[#out + 1] = table.concat(words, " ")
      else
        out[#out + 1] = ref(_env_name(p), v)
      end
    end
  end
  return table.concat(out)
end

-- Returns the text, or nil, err {code = "invalid", field, message}.
local function _render_raw(ctx, text, field)
  local parts, err = templates.parse_template(text)
  if not parts then return nil, _bad(field, field .. ": " .. err) end
  local out = {}
  for _, p in ipairs(parts) do
    if p.kind == "text" then
      out[#out + 1] = p.text
    else
      local v, ferr = _value(ctx, p)
      if ferr then return nil, ferr end
      if type(v) == "table" then v = table.concat(v, " ") end
      out[#out + 1] = v
    end
  end
  local s = table.concat(out)
  if s:find("\0", 1, true) then return nil, _bad(field, field .. ": a value contains a NUL byte") end
  return s
end

--- The host paths an Apptainer image of this recipe needs bound, comma-separated (the job's
--- OBLETH_APPTAINER_BINDS, which the script's prologue turns into `--bind`, obleth.job.prologue):
--- the model cache dir and the image dir of Cluster defaults, and every input value that is an
--- absolute path (a model directory, OLLAMA_MODELS; for a .gguf file its directory, so the other
--- shards of a split model are there too), but not the image itself. nil when the recipe runs no
--- image (no `image:` template and no apptainer in its script) or there is nothing to bind. A path
--- Apptainer's --bind cannot carry (a comma, a colon, a blank) is left out.
---@return string|nil
function M.apptainer_binds(recipe, inputs, defaults, image)
  if not recipe.image and not (recipe.script and recipe.script:find("apptainer", 1, true)) then return nil end
  local list, seen = {}, {}
  local function add(p)
    if type(p) ~= "string" or p:sub(1, 1) ~= "/" or p:find("[,:%s]") then return end
    p = p:gsub("/+$", "")
    if p == "" or seen[p] then return end
    seen[p] = true
    list[#list + 1] = p
  end
  add(_v(defaults.model_cache_dir))
  add(_v(defaults.image_dir))
  local names = {}
  for name in pairs(inputs or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local v = _v(inputs[name])
    if type(v) == "string" and v ~= image and not v:match("%.sif$") then
      if v:match("%.gguf$") then v = v:match("^(.*)/[^/]*$") end
      add(v)
    end
  end
  if #list == 0 then return nil end
  return table.concat(list, ",")
end

--- Render a validated recipe into the job-script fields of a managed spec.
---@param recipe table from `validate`
---@param inputs table<string, any> input values (resolved; missing optional inputs render as "")
---@param defaults table|nil cluster defaults (model_cache_dir, image_dir, log_dir, modules (list), ...)
---@param model table|nil {api_name=, id=}
---@param resources table|nil resolved resources (nodes, gpus_per_node, ...); default: the recipe's
---@return table|nil rendered {script_body=|nil, launch_command=|nil, image=|nil, preamble={lines},
---  environment={K=V}, argv=|nil (the launch argv for display: values literal, env refs as $NAME)}
---@return {code: "invalid", field: string, message: string, errors: {field: string, message: string}[]}|nil err
---  (schema.invalid)
function M.render(recipe, inputs, defaults, model, resources)
  if type(recipe) ~= "table" then error("recipe.render: recipe must be a validated recipe", 2) end
  local res = {}
  for k, v in pairs(schema.SPEC_DEFAULTS) do res[k] = v end
  for k, v in pairs(recipe.resources or {}) do res[k] = v end
  for k, v in pairs(resources or {}) do if schema.RESOURCE_KEYS[k] then res[k] = v end end
  local ctx = { inputs = inputs or {}, defaults = defaults or {}, model = model or {}, resources = res, env = {} }
  local errors = {}
  local function fail(field, msg) errors[#errors + 1] = { field = field, message = msg } end
  local function failed(e) fail(e.field, e.message) end
  local out = { preamble = {}, environment = {} }

  if recipe.script then
    local s, err = _render_script(ctx, recipe.script, "script")
    if s then out.script_body = s else failed(err) end
  else
    local words, argv = {}, {}
    for i, el in ipairs(recipe.launch or {}) do
      local list = type(el) == "string" and { el } or (_when_holds(ctx, el.when) and el.args or {})
      for j, text in ipairs(list) do
        local field = type(el) == "string" and ("launch[%d]"):format(i) or ("launch[%d].args[%d]"):format(i, j)
        local ws, shown = _render_argv_element(ctx, text, field)
        if not ws then
          failed(shown)
        else
          for _, w in ipairs(ws) do words[#words + 1] = w end
          for _, s in ipairs(shown) do argv[#argv + 1] = s end
        end
      end
    end
    out.launch_command = table.concat(words, " ")
    out.argv = argv
    if recipe.image then
      local img, err = _render_raw(ctx, recipe.image, "image")
      if not img then failed(err)
      elseif img:find("[\n\r]") then fail("image", "image: the path must not contain a newline")
      elseif img ~= "" then out.image = img end
    end
    for i, el in ipairs(recipe.preamble or {}) do
      local line = type(el) == "string" and el or (_when_holds(ctx, el.when) and el.line or nil)
      if line then
        local s, err = _render_script(ctx, line, ("preamble[%d]"):format(i))
        if s then out.preamble[#out.preamble + 1] = s else failed(err) end
      end
    end
  end
  for k, text in pairs(recipe.environment or {}) do
    local s, err = _render_raw(ctx, text, "environment." .. k)
    if not s then failed(err)
    elseif s ~= "" then out.environment[k] = s end -- a value that renders empty is left out
  end
  -- the values script templates and preamble lines refer to
  for k, v in pairs(ctx.env) do out.environment[k] = v end
  local binds = M.apptainer_binds(recipe, ctx.inputs, ctx.defaults, out.image)
  if binds then out.environment.OBLETH_APPTAINER_BINDS = binds end
  if #errors > 0 then return nil, schema.invalid(errors) end
  return out
end

-- named exports the other parts of obleth.recipe use
M.render_raw = _render_raw

return M
