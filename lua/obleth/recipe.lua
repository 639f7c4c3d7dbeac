--- Recipes: validate a recipe (already decoded from YAML), resolve the launch
-- form's settings with their provenance, and render the job script pieces of
-- a managed spec. The format is described in docs/recipes.md.
--
-- Injection safety. A recipe's author writes templates; the values put into
-- them (recipe inputs, cluster defaults, the API model name, resources) come
-- from users and are never trusted:
--   * in a `launch` argv list, every element becomes exactly one shell word:
--     author text and values are single-quoted (obleth.shell), and runtime
--     environment references (`$OBLETH_PORT`, `${NAME}`, `${NAME:-word}`)
--     become `"${NAME}"`; any other `$` is refused;
--   * in a `script` (and `preamble` lines) every `{{ ... }}` is replaced by
--     the single-quoted value, and `validate` refuses templates that place a
--     substitution where quoting would not hold: inside quotes, `${...}`,
--     `$((...))`, backticks, comments, heredoc bodies, after a backslash, or
--     as the argument of `eval` / `-c`;
--   * NUL bytes are refused everywhere; newlines stay literal inside quotes.
--
-- Pure functions except `load_text` / `load_file`, which need the host's
-- obleth.yaml (and io for the file).
local shell = require "obleth.shell"
local timefmt = require "obleth.timefmt"

local M = {}

--- Limits that keep an input's `pattern` check cheap (Lua patterns backtrack):
--- repetition operators per pattern, and the longest value checked against one.
M.MAX_PATTERN_REPEATS = 2
M.MAX_PATTERN_VALUE = 4096

--- The repetition operators (* + - ?) of a Lua pattern, outside sets and escapes.
---@param p string
---@return integer
function M.pattern_repeats(p)
  local n, i, len = 0, 1, #p
  while i <= len do
    local c = p:sub(i, i)
    if c == "%" then
      i = i + 2
    elseif c == "[" then
      i = i + 1
      if p:sub(i, i) == "^" then i = i + 1 end
      if p:sub(i, i) == "]" then i = i + 1 end -- a literal ] first in the set
      while i <= len and p:sub(i, i) ~= "]" do
        i = i + (p:sub(i, i) == "%" and 2 or 1)
      end
      i = i + 1
    else
      if c == "*" or c == "+" or c == "?" or (c == "-" and i > 1) then n = n + 1 end
      i = i + 1
    end
  end
  return n
end

M.ENGINES = { vllm = true, sglang = true, llamacpp = true, ollama = true, smoke = true, custom = true }
M.INPUT_TYPES = { string = true, integer = true, number = true, boolean = true, enum = true, path = true }
M.PROVENANCE = { "builtin", "recipe", "cluster_default", "learned", "user" }

--- Cluster-default keys a template may name (`{{ defaults.<key> }}`); keys
-- starting with `x_` are free for site-specific values. The Hugging Face
-- token is deliberately absent: secrets never go into a rendered script.
M.DEFAULT_KEYS = {
  model_cache_dir = true, image_dir = true, log_dir = true, modules = true,
  partition = true, account = true, qos = true,
}
M.MODEL_KEYS = { api_name = true, id = true }
M.RESOURCE_KEYS = {
  partition = true, nodes = true, gpus_per_node = true, gpu_type = true, cpus_per_node = true,
  memory_per_node = true, time_limit = true, constraint = true, exclude = true,
}
M.FILTERS = { first_shard = true }

--- Managed-spec health defaults (docs/managed-spec.md).
M.HEALTH_DEFAULTS = { path = "/health", interval = 10, timeout = 5, startup_grace = 600, failure_threshold = 3 }
--- Managed-spec defaults for settings neither the recipe nor the cluster gives.
M.SPEC_DEFAULTS = { time_limit = 60, nodes = 1, gpus_per_node = 0, cpus_per_node = 1, memory_per_node = 0,
  replicas = 1 }

local TOP_KEYS = {
  id = true, name = true, engine = true, description = true, inputs = true, resources = true,
  health = true, script = true, image = true, launch = true, preamble = true, environment = true,
  replicas = true, one_of = true, requires = true,
}
local INPUT_KEYS = {
  type = true, default = true, required = true, description = true, pattern = true, min = true,
  max = true, values = true, label = true,
}

---------------------------------------------------------------------------
-- small helpers
---------------------------------------------------------------------------

-- yaml.null / cjson.null (lightuserdata) read as nil.
local function _v(x)
  if type(x) == "userdata" then return nil end
  return x
end

local function _is_int(x)
  return math.type(x) == "integer" or (type(x) == "number" and x == math.floor(x) and x > -2 ^ 53 and x < 2 ^ 53)
end

local function _int(x)
  return math.tointeger(x) or x
end

local function _is_array(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function _sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

--- Text of a scalar value as it reaches a command line.
local function _text(v)
  if type(v) == "number" then
    if math.type(v) == "integer" or _is_int(v) then return tostring(_int(v)) end
    return ("%.14g"):format(v)
  end
  return tostring(v)
end

---------------------------------------------------------------------------
-- templates
---------------------------------------------------------------------------

--- Parse `{{ ns.name [| filter] }}` references out of a template string.
---@param s string
---@return table[]|nil parts {kind="text", text=} | {kind="ref", ns=, name=, filter=, raw=}
---@return string|nil err
function M.parse_template(s)
  local parts, i = {}, 1
  while true do
    local a = s:find("{{", i, true)
    if not a then
      if i <= #s then parts[#parts + 1] = { kind = "text", text = s:sub(i) } end
      return parts
    end
    if a > i then parts[#parts + 1] = { kind = "text", text = s:sub(i, a - 1) } end
    local b = s:find("}}", a + 2, true)
    if not b then return nil, ("unclosed {{ at character %d"):format(a) end
    local inner = s:sub(a + 2, b - 1)
    local ns, name, rest = inner:match("^%s*([%a_][%w_]*)%.([%a_][%w_]*)%s*(.-)%s*$")
    if not ns then return nil, ("%q is not a reference like {{ inputs.name }}"):format("{{" .. inner .. "}}") end
    local filter
    if rest ~= "" then
      filter = rest:match("^|%s*([%a_][%w_]*)$")
      if not filter then return nil, ("%q: expected `| filter` after the name"):format("{{" .. inner .. "}}") end
    end
    parts[#parts + 1] = { kind = "ref", ns = ns, name = name, filter = filter, raw = s:sub(a, b + 1) }
    i = b + 2
  end
end

-- Check that a reference names something the recipe can provide.
local function _check_ref(ref, inputs)
  if ref.ns == "inputs" then
    if not inputs[ref.name] then return ("%s names an input the recipe does not declare"):format(ref.raw) end
  elseif ref.ns == "defaults" then
    if not M.DEFAULT_KEYS[ref.name] and not ref.name:match("^x_") then
      return ("%s is not a cluster default (model_cache_dir, image_dir, log_dir, modules, partition, "
        .. "account, qos, x_*)"):format(ref.raw)
    end
  elseif ref.ns == "model" then
    if not M.MODEL_KEYS[ref.name] then return ("%s: model has api_name and id"):format(ref.raw) end
  elseif ref.ns == "resources" then
    if not M.RESOURCE_KEYS[ref.name] then return ("%s is not a resource field"):format(ref.raw) end
  else
    return ("%s: the namespaces are inputs, defaults, model and resources"):format(ref.raw)
  end
  if ref.filter and not M.FILTERS[ref.filter] then
    return ("%s: unknown filter %q (known: first_shard)"):format(ref.raw, ref.filter)
  end
  return nil
end

--- Shell-context check of a script template: every reference must sit where
-- a single-quoted word is read literally. Returns the first problem.
---@param parts table[] from parse_template
---@return string|nil err
local function _check_script_context(parts)
  local stack = { "top" } -- top | paren | cmdsub | arith | param | dquote | squote | ansi ($'..') | backtick
  local comment = false
  local heredocs, in_heredoc = {}, nil -- pending delimiters; current {delim, strip}
  local prev = "\n"                  -- previous character (unquoted scan)
  local cmd_words = {}               -- words of the current simple command (top level)
  local word = ""
  local line = 1
  local escape = false
  local heredoc_line = ""

  local function top() return stack[#stack] end
  local function end_word()
    if word ~= "" then cmd_words[#cmd_words + 1] = word end
    word = ""
  end

  for _, p in ipairs(parts) do
    if p.kind == "ref" then
      local where
      if in_heredoc then where = "inside a heredoc body"
      elseif comment then where = "inside a comment"
      elseif escape then where = "right after a backslash"
      elseif top() == "squote" or top() == "ansi" then where = "inside single quotes"
      elseif top() == "dquote" then where = "inside double quotes"
      elseif top() == "backtick" then where = "inside backticks"
      elseif top() == "param" then where = "inside ${...}"
      elseif top() == "arith" then where = "inside $((...))"
      end
      if not where then
        end_word()
        -- commands that parse their argument as code again: a shell's -c
        -- (also in a flag cluster like -lc or -xc), eval, source, trap,
        -- arithmetic (let, declare -i, [[ -eq ]]), su -c / ssh / srun wrappers
        for _, w in ipairs(cmd_words) do
          if w:match("^%-%a*c%a*$") or w == "--command" or w:match("^%-%-command=") then
            where = "after " .. w .. " (the value would run as shell code)"
          elseif w == "eval" or w == "source" or w == "." or w == "trap" or w == "let"
            or w == "declare" or w == "typeset" or w == "[[" or w == "((" or w == "ssh" or w == "su"
            or w == "runuser" or w == "xargs" then
            where = ("in a %s command (it may evaluate the value as code)"):format(w)
          end
        end
      end
      if where then
        return ("line %d: %s is %s; write it unquoted as its own word (it is quoted for you)"):format(
          line, p.raw, where)
      end
      word = word .. "\1" -- a value: part of the current word, never a keyword
      prev = "\1"
    else
      local s = p.text
      local i = 1
      while i <= #s do
        local c = s:sub(i, i)
        if in_heredoc then
          if c == "\n" then
            local l = heredoc_line
            if in_heredoc.strip then l = l:gsub("^\t+", "") end
            if l == in_heredoc.delim then in_heredoc = nil end
            heredoc_line = ""
            line = line + 1
          else
            heredoc_line = heredoc_line .. c
          end
        elseif comment then
          if c == "\n" then comment = false; line = line + 1; cmd_words = {}; prev = "\n" end
        elseif escape then
          escape = false
          if c == "\n" then line = line + 1 end
          word = word .. c
          prev = c
        elseif top() == "ansi" then -- $'...': a backslash escapes the next character, ' included
          if c == "\\" then i = i + 1
          elseif c == "'" then table.remove(stack) end
          if c == "\n" then line = line + 1 end
        elseif top() == "squote" then
          if c == "'" then table.remove(stack) end
          if c == "\n" then line = line + 1 end
          word = word .. c
        elseif top() == "dquote" or top() == "backtick" or top() == "param" or top() == "arith" then
          local t = top()
          if c == "\\" then
            i = i + 1
            if s:sub(i, i) == "\n" then line = line + 1 end
          elseif (c == '"' and t == "dquote") or (c == "`" and t == "backtick") then
            table.remove(stack)
          elseif c == "}" and t == "param" then
            table.remove(stack)
          elseif c == ")" and t == "arith" and s:sub(i + 1, i + 1) == ")" then
            table.remove(stack); i = i + 1
          elseif c == "$" and s:sub(i + 1, i + 3) == "((" then
            stack[#stack + 1] = "arith"; i = i + 2
          elseif c == "$" and s:sub(i + 1, i + 1) == "(" then
            stack[#stack + 1] = "cmdsub"; i = i + 1
          elseif c == "$" and s:sub(i + 1, i + 1) == "{" then
            stack[#stack + 1] = "param"; i = i + 1
          elseif c == "`" then
            stack[#stack + 1] = "backtick"
          elseif c == '"' and t ~= "dquote" then
            stack[#stack + 1] = "dquote"
          elseif c == "\n" then
            line = line + 1
          end
          word = word .. c
        else -- unquoted: top, paren, cmdsub
          if c == "\\" then
            escape = true
            word = word .. c
          elseif c == "$" and s:sub(i + 1, i + 1) == "'" then
            stack[#stack + 1] = "ansi"; i = i + 1; word = word .. "$'"
          elseif c == "'" then
            stack[#stack + 1] = "squote"; word = word .. c
          elseif c == '"' then
            stack[#stack + 1] = "dquote"; word = word .. c
          elseif c == "`" then
            stack[#stack + 1] = "backtick"; word = word .. c
          elseif c == "$" and s:sub(i + 1, i + 2) == "((" then
            stack[#stack + 1] = "arith"; i = i + 2; word = word .. "$(("
          elseif c == "$" and s:sub(i + 1, i + 1) == "(" then
            stack[#stack + 1] = "cmdsub"; i = i + 1; end_word(); cmd_words = {}
          elseif c == "$" and s:sub(i + 1, i + 1) == "{" then
            stack[#stack + 1] = "param"; i = i + 1; word = word .. "${"
          elseif c == "(" then
            stack[#stack + 1] = "paren"; end_word(); cmd_words = {}
          elseif c == ")" then
            if top() ~= "top" then table.remove(stack) end
            end_word(); cmd_words = {}
          elseif c == "#" and (prev:match("[%s;&|()]")) and word == "" then
            comment = true
          elseif c == "<" and s:sub(i + 1, i + 1) == "<" and s:sub(i + 2, i + 2) ~= "<" then
            -- heredoc: <<[-] [quotes]DELIM
            local strip = s:sub(i + 2, i + 2) == "-"
            local j = i + 2 + (strip and 1 or 0)
            local rest = s:sub(j)
            local delim = rest:match("^[ \t]*['\"]?([%w_.-]+)['\"]?")
            if not delim then
              return ("line %d: a heredoc needs a plain delimiter word"):format(line)
            end
            local consumed = rest:match("^[ \t]*['\"]?[%w_.-]+['\"]?")
            heredocs[#heredocs + 1] = { delim = delim, strip = strip }
            i = j + #consumed - 1
            end_word()
          elseif c == "\n" then
            end_word(); cmd_words = {}; line = line + 1
            if #heredocs > 0 then
              in_heredoc = table.remove(heredocs, 1)
              heredoc_line = ""
            end
          elseif c == ";" or c == "&" or c == "|" then
            end_word(); cmd_words = {}
          elseif c:match("%s") then
            end_word()
          else
            word = word .. c
          end
          prev = c
        end
        i = i + 1
      end
    end
  end
  return nil
end

-- Parse the text of one argv element into items:
-- {kind="text", text=} | {kind="ref", ...} | {kind="env", name=, default=}.
local function _parse_argv_element(s)
  local parts, err = M.parse_template(s)
  if not parts then return nil, err end
  local items = {}
  for _, p in ipairs(parts) do
    if p.kind == "ref" then
      items[#items + 1] = p
    else
      local t, i, buf = p.text, 1, {}
      local function flush()
        if #buf > 0 then items[#items + 1] = { kind = "text", text = table.concat(buf) }; buf = {} end
      end
      while i <= #t do
        local c = t:sub(i, i)
        if c == "$" then
          local nxt = t:sub(i + 1, i + 1)
          if nxt == "$" then
            buf[#buf + 1] = "$"; i = i + 2
          else
            local name, default, consumed = t:match("^([%a_][%w_]*)", i + 1), nil, nil
            if name then
              consumed = #name + 1
            else
              name = t:match("^{([%a_][%w_]*)}", i + 1)
              if name then
                consumed = #name + 3
              else
                name, default = t:match("^{([%a_][%w_]*):%-([%w_./:@%%+,=-]*)}", i + 1)
                if name then consumed = #name + #default + 5 end
              end
            end
            if not name then
              return nil, ("%q: only $NAME, ${NAME} and ${NAME:-word} may follow $ (write $$ for a literal $)")
                :format(s)
            end
            flush()
            items[#items + 1] = { kind = "env", name = name, default = default }
            i = i + consumed
          end
        else
          buf[#buf + 1] = c; i = i + 1
        end
      end
      flush()
    end
  end
  return items
end

---------------------------------------------------------------------------
-- validation
---------------------------------------------------------------------------

local function _collector(positions)
  local errors = {}
  local function add(tbl, key, field, message)
    local p = positions and tbl ~= nil and positions[tbl] and positions[tbl][key]
    errors[#errors + 1] = { field = field, message = message, line = p and p.line or nil,
      column = p and p.column or nil }
  end
  return errors, add
end

local function _check_typed_value(def, v, field)
  -- Returns the coerced value or nil, message. `v` is never nil here.
  local t = def.type
  if t == "string" or t == "path" then
    if type(v) == "number" then v = _text(v) end
    if type(v) ~= "string" then return nil, field .. " must be a string" end
    if v:find("\0", 1, true) then return nil, field .. " must not contain a NUL byte" end
    if t == "path" then
      if v:find("\n", 1, true) then return nil, field .. " must not contain a newline" end
      if v:sub(1, 1) ~= "/" then return nil, field .. " must be an absolute path (starting with /)" end
    end
    if def.pattern and #v > M.MAX_PATTERN_VALUE then
      return nil, ("%s is longer than %d characters"):format(field, M.MAX_PATTERN_VALUE)
    end
    if def.pattern and not v:find("^" .. def.pattern:gsub("^%^", ""):gsub("%$$", "") .. "$") then
      return nil, ("%s does not match the pattern %s"):format(field, def.pattern)
    end
    return v
  elseif t == "integer" or t == "number" then
    if type(v) == "string" then
      local n = tonumber((v:match("^%s*(.-)%s*$")))
      if n == nil then return nil, ("%s must be a%s, got %q"):format(field, t == "integer" and "n integer" or " number", v) end
      v = n
    end
    if type(v) ~= "number" or v ~= v then return nil, field .. " must be a number" end
    if t == "integer" then
      if not _is_int(v) then return nil, field .. " must be a whole number" end
      v = _int(v)
    end
    if def.min ~= nil and v < def.min then return nil, ("%s must be at least %s"):format(field, _text(def.min)) end
    if def.max ~= nil and v > def.max then return nil, ("%s must be at most %s"):format(field, _text(def.max)) end
    return v
  elseif t == "boolean" then
    if v == "true" then v = true elseif v == "false" then v = false end
    if type(v) ~= "boolean" then return nil, field .. " must be true or false" end
    return v
  elseif t == "enum" then
    v = type(v) == "number" and _text(v) or v
    for _, x in ipairs(def.values or {}) do
      if x == v then return v end
    end
    return nil, ("%s must be one of: %s"):format(field, table.concat(def.values or {}, ", "))
  end
  return nil, field .. " has an unknown type"
end

--- Validate one typed input value against its declaration.
---@param def table input declaration (type, pattern, min, max, values)
---@param value any the value (strings are coerced for integer, number, boolean)
---@param field string|nil field name for messages (default "value")
---@return any|nil value coerced
---@return string|nil err
function M.check_input(def, value, field)
  return _check_typed_value(def, value, field or "value")
end

local function _validate_inputs(src, out, add, positions)
  local inputs = _v(src.inputs)
  out.inputs, out.input_order = {}, {}
  if inputs == nil then return end
  if type(inputs) ~= "table" or (next(inputs) ~= nil and _is_array(inputs)) then
    add(src, "inputs", "inputs", "inputs must be a mapping of name to declaration")
    return
  end
  local order = {}
  for name, def in pairs(inputs) do
    local f = "inputs." .. tostring(name)
    if type(name) ~= "string" or not name:match("^[a-z_][a-z0-9_]*$") then
      add(inputs, name, f, "an input name is lower-case letters, digits and _")
    elseif type(def) ~= "table" then
      add(inputs, name, f, "an input declaration is a mapping with at least `type`")
    else
      local d = {}
      for k, val in pairs(def) do
        if not INPUT_KEYS[k] then
          add(def, k, f .. "." .. tostring(k), ("unknown key %q (type, default, required, description, "
            .. "pattern, min, max, values, label)"):format(tostring(k)))
        else
          d[k] = _v(val)
        end
      end
      local ok = true
      if not M.INPUT_TYPES[d.type] then
        add(def, "type", f .. ".type", "type must be one of string, integer, number, boolean, enum, path")
        ok = false
      end
      for _, k in ipairs({ "description", "label" }) do
        if d[k] ~= nil and type(d[k]) ~= "string" then add(def, k, f .. "." .. k, k .. " must be a string") end
      end
      if d.required ~= nil and type(d.required) ~= "boolean" then
        add(def, "required", f .. ".required", "required must be true or false"); ok = false
      end
      if d.pattern ~= nil then
        if d.type ~= "string" and d.type ~= "path" then
          add(def, "pattern", f .. ".pattern", "pattern applies to string and path inputs")
        elseif type(d.pattern) ~= "string" or not pcall(string.find, "", d.pattern) then
          add(def, "pattern", f .. ".pattern", "pattern must be a valid Lua pattern")
        elseif #d.pattern > 200 or M.pattern_repeats(d.pattern) > M.MAX_PATTERN_REPEATS then
          -- Lua patterns backtrack: n repetitions cost O(len^n) on a hostile value
          add(def, "pattern", f .. ".pattern", ("pattern may use at most %d repetition operators (* - + ?) "
            .. "and 200 characters"):format(M.MAX_PATTERN_REPEATS))
          ok = false
        end
      end
      for _, k in ipairs({ "min", "max" }) do
        if d[k] ~= nil then
          if d.type ~= "integer" and d.type ~= "number" then
            add(def, k, f .. "." .. k, k .. " applies to integer and number inputs")
          elseif type(d[k]) ~= "number" or (d.type == "integer" and not _is_int(d[k])) then
            add(def, k, f .. "." .. k, k .. " must be a" .. (d.type == "integer" and "n integer" or " number"))
            ok = false
          end
        end
      end
      if ok and d.min and d.max and d.min > d.max then
        add(def, "max", f .. ".max", "max must not be below min"); ok = false
      end
      if d.type == "enum" then
        local vals = d.values
        local good = type(vals) == "table" and #vals > 0 and _is_array(vals)
        if good then
          for _, x in ipairs(vals) do if type(x) ~= "string" then good = false end end
        end
        if not good then
          add(def, "values", f .. ".values", "an enum input needs `values`: a non-empty list of strings")
          ok = false
        end
      elseif d.values ~= nil then
        add(def, "values", f .. ".values", "values applies to enum inputs")
      end
      if ok and d.default ~= nil then
        -- a string default may refer to cluster defaults ("{{ defaults.model_cache_dir }}/x")
        if type(d.default) == "string" and d.default:find("{{", 1, true) then
          local parts, err = M.parse_template(d.default)
          if not parts then
            add(def, "default", f .. ".default", err)
          else
            for _, p in ipairs(parts) do
              if p.kind == "ref" and p.ns ~= "defaults" then
                add(def, "default", f .. ".default", "a default may only refer to {{ defaults.* }}")
              elseif p.kind == "ref" then
                local e = _check_ref(p, {})
                if e then add(def, "default", f .. ".default", e) end
              end
            end
          end
        else
          local v, err = _check_typed_value(d, d.default, f .. ".default")
          if v == nil then add(def, "default", f .. ".default", err) else d.default = v end
        end
      end
      if d.min then d.min = _int(d.min) end
      if d.max then d.max = _int(d.max) end
      d.name = name
      out.inputs[name] = d
      local p = positions and positions[inputs] and positions[inputs][name]
      order[#order + 1] = { name = name, line = p and p.line or 0 }
    end
  end
  table.sort(order, function(a, b)
    if a.line ~= b.line then return a.line < b.line end
    return a.name < b.name
  end)
  for i, o in ipairs(order) do out.input_order[i] = o.name end
end

local RES_RULES = {
  partition = { kind = "string", pattern = "^[A-Za-z0-9_.-]+$", maxlen = 64 },
  gpu_type = { kind = "string", pattern = "^[A-Za-z0-9_.-]+$", maxlen = 64 },
  constraint = { kind = "string", pattern = "^[A-Za-z0-9_&|,()!*:-]+$", maxlen = 1024 },
  exclude = { kind = "string", pattern = "^[A-Za-z0-9_.,%[%]-]+$", maxlen = 4096 },
  nodes = { kind = "integer", min = 1, max = 64 },
  gpus_per_node = { kind = "integer", min = 0, max = 64 },
  cpus_per_node = { kind = "integer", min = 1, max = 1024 },
  memory_per_node = { kind = "integer", min = 0, max = 16777216 },
  time_limit = { kind = "time" },
  replicas = { kind = "integer", min = 0, max = 64 },
  rollover_margin = { kind = "integer", min = 0, max = 525600 },
}
local HEALTH_RULES = {
  path = { kind = "path" },
  interval = { kind = "seconds" },
  timeout = { kind = "seconds" },
  startup_grace = { kind = "seconds", zero = true },
  failure_threshold = { kind = "integer", min = 1, max = 1000 },
}

--- Check one setting value against its rule; returns the coerced value or nil, message.
local function _check_rule(rule, v, field)
  if rule.kind == "string" then
    if type(v) ~= "string" or v == "" then return nil, field .. " must be a non-empty string" end
    if #v > rule.maxlen then return nil, ("%s must be at most %d characters"):format(field, rule.maxlen) end
    if not v:match(rule.pattern) then return nil, field .. " contains characters Slurm does not accept here" end
    return v
  elseif rule.kind == "integer" then
    if type(v) == "string" and v:match("^%s*%d+%s*$") then v = tonumber(v) end
    if not _is_int(v) then return nil, field .. " must be a whole number" end
    v = _int(v)
    if v < rule.min or v > rule.max then
      return nil, ("%s must be between %d and %d"):format(field, rule.min, rule.max)
    end
    return v
  elseif rule.kind == "time" then
    if type(v) == "number" and _is_int(v) then v = _int(v) end
    local m, err = timefmt.parse_minutes(v)
    if not m then return nil, field .. ": " .. err end
    return m
  elseif rule.kind == "seconds" then
    if type(v) == "string" then v = tonumber(v) or v end
    if type(v) ~= "number" or v ~= v or v < 0 or (v == 0 and not rule.zero) or v > 86400 * 7 then
      return nil, field .. " must be a number of seconds" .. (rule.zero and " (0 or more)" or " above 0")
    end
    return _int(v)
  elseif rule.kind == "path" then
    if type(v) ~= "string" or v:sub(1, 1) ~= "/" or v:find("[%s%c]") then
      return nil, field .. " must be an URL path starting with / (no spaces)"
    end
    return v
  end
  error("unknown rule " .. tostring(rule.kind))
end

-- Walk every template of the recipe with `fn(text, field, tbl, key, kind)`.
local function _each_template(src, fn)
  if type(src.script) == "string" then fn(src.script, "script", src, "script", "script") end
  if type(src.image) == "string" then fn(src.image, "image", src, "image", "raw") end
  local launch = _v(src.launch)
  if type(launch) == "table" then
    for i, el in ipairs(launch) do
      if type(el) == "string" then
        fn(el, ("launch[%d]"):format(i), launch, i, "argv")
      elseif type(el) == "table" and type(_v(el.args)) == "table" then
        for j, a in ipairs(el.args) do
          if type(a) == "string" then fn(a, ("launch[%d].args[%d]"):format(i, j), el.args, j, "argv") end
        end
      end
    end
  end
  local pre = _v(src.preamble)
  if type(pre) == "table" then
    for i, el in ipairs(pre) do
      local line, tbl, key = el, pre, i
      if type(el) == "table" then line, tbl, key = _v(el.line), el, "line" end
      if type(line) == "string" then fn(line, ("preamble[%d]"):format(i), tbl, key, "line") end
    end
  end
  local env = _v(src.environment)
  if type(env) == "table" then
    for k, val in pairs(env) do
      if type(val) == "string" then fn(val, "environment." .. tostring(k), env, k, "raw") end
    end
  end
end

local function _check_when(when, inputs)
  -- `when: inputs.x` or `when: {inputs.x: value}`
  local ref
  if type(when) == "string" then
    ref = when
  elseif type(when) == "table" then
    local n = 0
    for k, val in pairs(when) do
      n = n + 1; ref = k
      if type(val) ~= "string" and type(val) ~= "number" and type(val) ~= "boolean" then
        return "when: the value to compare must be a scalar"
      end
    end
    if n ~= 1 then return "when: give one reference, or one `reference: value` pair" end
  else
    return "when: give a reference like inputs.name, or `inputs.name: value`"
  end
  local ns, name = tostring(ref):match("^([%a_][%w_]*)%.([%a_][%w_]*)$")
  if not ns then return ("when: %q is not a reference like inputs.name"):format(tostring(ref)) end
  return _check_ref({ ns = ns, name = name, raw = tostring(ref) }, inputs)
end

--- Validate a decoded recipe.
---@param tbl table the recipe as decoded from YAML (yaml.null reads as absent)
---@param positions table|nil `pos` from obleth.yaml decode{positions=true}: pos[tbl][key] = {line, column}
---@return table|nil recipe normalized copy: inputs with coerced defaults, `input_order`,
---  resources.time_limit in minutes, `health` merged over the managed-spec defaults
---@return {field: string, message: string, line: integer|nil, column: integer|nil}[]|nil errors
function M.validate(tbl, positions)
  local errors, add = _collector(positions)
  if type(tbl) ~= "table" then
    return nil, { { field = "", message = "a recipe is a mapping (id, name, engine, ...)" } }
  end
  local out = {}
  for k in pairs(tbl) do
    if not TOP_KEYS[k] then
      add(tbl, k, tostring(k), ("unknown key %q"):format(tostring(k)))
    end
  end
  local id = _v(tbl.id)
  if type(id) ~= "string" or not id:match("^[a-z0-9][a-z0-9._-]*$") or #id > 64 then
    add(tbl, "id", "id", "id is required: lower-case letters, digits, '.', '_' and '-' (at most 64)")
  end
  out.id = id
  local name = _v(tbl.name)
  if name ~= nil and type(name) ~= "string" then add(tbl, "name", "name", "name must be a string") end
  out.name = name or id
  local engine = _v(tbl.engine)
  if not M.ENGINES[engine] then
    add(tbl, "engine", "engine", "engine must be one of vllm, sglang, llamacpp, ollama, smoke, custom")
  end
  out.engine = engine
  local desc = _v(tbl.description)
  if desc ~= nil and type(desc) ~= "string" then add(tbl, "description", "description", "must be a string") end
  out.description = desc

  _validate_inputs(tbl, out, add, positions)

  -- resources
  out.resources = {}
  local res = _v(tbl.resources)
  if res ~= nil and type(res) ~= "table" then
    add(tbl, "resources", "resources", "resources must be a mapping")
  elseif res then
    for k, val in pairs(res) do
      local rule = RES_RULES[k]
      if not rule or k == "replicas" or k == "rollover_margin" then
        add(res, k, "resources." .. tostring(k), ("unknown resource %q"):format(tostring(k)))
      elseif _v(val) ~= nil then
        local v, err = _check_rule(rule, val, "resources." .. k)
        if v == nil then add(res, k, "resources." .. k, err) else out.resources[k] = v end
      end
    end
  end
  local replicas = _v(tbl.replicas)
  if replicas ~= nil then
    local v, err = _check_rule(RES_RULES.replicas, replicas, "replicas")
    if v == nil then add(tbl, "replicas", "replicas", err) else out.replicas = v end
  end

  -- health
  out.health = {}
  for k, val in pairs(M.HEALTH_DEFAULTS) do out.health[k] = val end
  local health = _v(tbl.health)
  if health ~= nil and type(health) ~= "table" then
    add(tbl, "health", "health", "health must be a mapping")
  elseif health then
    for k, val in pairs(health) do
      local rule = HEALTH_RULES[k]
      if not rule then
        add(health, k, "health." .. tostring(k), ("unknown key %q (path, interval, timeout, startup_grace, "
          .. "failure_threshold)"):format(tostring(k)))
      elseif _v(val) ~= nil then
        local v, err = _check_rule(rule, val, "health." .. k)
        if v == nil then add(health, k, "health." .. k, err) else out.health[k] = v end
      end
    end
  end

  -- script xor image + launch
  local script, launch, image, pre = _v(tbl.script), _v(tbl.launch), _v(tbl.image), _v(tbl.preamble)
  if script ~= nil and launch ~= nil then
    add(tbl, "launch", "launch", "give either script or launch (with image), not both")
  elseif script == nil and launch == nil then
    add(tbl, "script", "script", "a recipe needs a script, or a launch command (argv list)")
  end
  if script ~= nil then
    if type(script) ~= "string" or script == "" then add(tbl, "script", "script", "script must be a string")
    else out.script = script end
    if image ~= nil then add(tbl, "image", "image", "image goes with launch, not with script") end
    if pre ~= nil then add(tbl, "preamble", "preamble", "preamble goes with launch; a script has its own lines") end
  end
  if launch ~= nil then
    if type(launch) ~= "table" or #launch == 0 or not _is_array(launch) then
      add(tbl, "launch", "launch", "launch must be a non-empty list of arguments (argv), e.g. [vllm, serve, ...]")
    else
      out.launch = {}
      for i, el in ipairs(launch) do
        local f = ("launch[%d]"):format(i)
        if type(el) == "number" then el = _text(el) end
        if type(el) == "string" then
          out.launch[i] = el
        elseif type(el) == "table" and _v(el.when) ~= nil and type(_v(el.args)) == "table" then
          for k in pairs(el) do
            if k ~= "when" and k ~= "args" then add(el, k, f .. "." .. tostring(k), "unknown key (when, args)") end
          end
          local e = _check_when(el.when, out.inputs)
          if e then add(el, "when", f .. ".when", e) end
          local args = {}
          for j, a in ipairs(el.args) do
            if type(a) == "number" then a = _text(a) end
            if type(a) ~= "string" then add(el.args, j, ("%s.args[%d]"):format(f, j), "an argument must be a string")
            else args[j] = a end
          end
          out.launch[i] = { when = el.when, args = args }
        else
          add(launch, i, f, "an argument is a string, or {when: inputs.x, args: [...]}")
        end
      end
      if type(out.launch[1]) ~= "string" then
        add(launch, 1, "launch[1]", "the first argument (the program) must be a plain string")
      end
    end
    if image ~= nil then
      if type(image) ~= "string" then add(tbl, "image", "image", "image must be a string (an Apptainer image path)")
      else out.image = image end
    end
    out.preamble = {}
    if pre ~= nil then
      if type(pre) ~= "table" or not _is_array(pre) then
        add(tbl, "preamble", "preamble", "preamble must be a list of lines")
      else
        for i, el in ipairs(pre) do
          local f = ("preamble[%d]"):format(i)
          if type(el) == "string" then
            if el:find("\n", 1, true) then add(pre, i, f, "a preamble entry is one line")
            else out.preamble[i] = el end
          elseif type(el) == "table" and type(_v(el.line)) == "string" and _v(el.when) ~= nil then
            local e = _check_when(el.when, out.inputs)
            if e then add(el, "when", f .. ".when", e) end
            if el.line:find("\n", 1, true) then add(el, "line", f .. ".line", "a preamble entry is one line") end
            out.preamble[i] = { line = el.line, when = el.when }
          else
            add(pre, i, f, "a preamble entry is a line, or {when: defaults.modules, line: ...}")
          end
        end
      end
    end
  end

  -- environment
  out.environment = {}
  local env = _v(tbl.environment)
  if env ~= nil then
    if type(env) ~= "table" or (next(env) ~= nil and _is_array(env)) then
      add(tbl, "environment", "environment", "environment must be a mapping NAME: value")
    else
      for k, val in pairs(env) do
        local f = "environment." .. tostring(k)
        if not shell.is_name(k) then
          add(env, k, f, "an environment name is letters, digits and _, not starting with a digit")
        elseif type(val) == "number" or type(val) == "boolean" then
          out.environment[k] = _text(val)
        elseif type(val) ~= "string" then
          add(env, k, f, "an environment value must be a string")
        else
          out.environment[k] = val
        end
      end
    end
  end

  -- every template: references must exist, contexts must be safe
  _each_template(tbl, function(text, field, t, key, kind)
    if text:find("\0", 1, true) then add(t, key, field, "contains a NUL byte"); return end
    local parts, err
    if kind == "argv" then
      parts, err = _parse_argv_element(text)
    else
      parts, err = M.parse_template(text)
    end
    if not parts then add(t, key, field, err); return end
    for _, p in ipairs(parts) do
      if p.kind == "ref" then
        local e = _check_ref(p, out.inputs)
        if e then add(t, key, field, e) end
      end
    end
    if kind == "script" or kind == "line" then
      local e = _check_script_context(parts)
      if e then add(t, key, field, e) end
    end
  end)

  -- rules across inputs: one_of = [[a, b], ...] (at least one of each group is set),
  -- requires = {a = [b, ...]} (when a is set, so is each b)
  local function known_inputs(list, field)
    if type(list) ~= "table" or #list == 0 then
      add(tbl, field:match("^[^.]+"), field, field .. " must be a list of input names"); return nil
    end
    for i, n in ipairs(list) do
      if type(n) ~= "string" or not (out.inputs or {})[n] then
        add(tbl, field:match("^[^.]+"), ("%s[%d]"):format(field, i), ("%s[%d]: %q is not an input of this recipe")
          :format(field, i, tostring(n)))
        return nil
      end
    end
    return list
  end
  if tbl.one_of ~= nil then
    out.one_of = {}
    if type(tbl.one_of) ~= "table" then
      add(tbl, "one_of", "one_of", "one_of must be a list of lists of input names")
    else
      for i, group in ipairs(tbl.one_of) do
        local g = known_inputs(group, ("one_of[%d]"):format(i))
        if g then out.one_of[#out.one_of + 1] = g end
      end
    end
  end
  if tbl.requires ~= nil then
    out.requires = {}
    if type(tbl.requires) ~= "table" then
      add(tbl, "requires", "requires", "requires must map an input name to the inputs it needs")
    else
      for input, list in pairs(tbl.requires) do
        if not (out.inputs or {})[input] then
          add(tbl, "requires", "requires." .. tostring(input), ("requires: %q is not an input of this recipe")
            :format(tostring(input)))
        else
          local l = known_inputs(list, "requires." .. input)
          if l then out.requires[input] = l end
        end
      end
    end
  end

  if #errors > 0 then
    table.sort(errors, function(a, b)
      if (a.line or 0) ~= (b.line or 0) then return (a.line or 0) < (b.line or 0) end
      return a.field < b.field
    end)
    return nil, errors
  end
  return out
end

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

local function _value(ctx, ref)
  local v = _lookup(ctx, ref.ns, ref.name)
  if ref.filter == "first_shard" then v = _first_shard(v) end
  if v == nil and ref.ns == "defaults" and ref.name == "modules" then return {} end
  if v == nil then return "" end
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

local function _nul_check(v, field)
  if type(v) == "table" then
    for _, x in ipairs(v) do
      if x:find("\0", 1, true) then return field .. ": a value contains a NUL byte" end
    end
  elseif v:find("\0", 1, true) then
    return field .. ": a value contains a NUL byte"
  end
end

-- One argv element -> list of shell words (0..n), plus its display form.
local function _render_argv_element(ctx, text, field)
  local items, err = _parse_argv_element(text)
  if not items then return nil, nil, field .. ": " .. err end
  if #items == 1 and items[1].kind == "ref" then
    local v = _value(ctx, items[1])
    local e = _nul_check(v, field)
    if e then return nil, nil, e end
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
      local v = _value(ctx, it)
      if type(v) == "table" then
        return nil, nil, field .. ": " .. it.raw .. " is a list; a list must be an argument of its own"
      end
      local e = _nul_check(v, field)
      if e then return nil, nil, e end
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
local function _render_script(ctx, text, field)
  local parts, err = M.parse_template(text)
  if not parts then return nil, field .. ": " .. err end
  -- the value goes to the environment; the script gets a quoted reference to it
  local function ref(name, value)
    ctx.env[name] = tostring(value)
    return '"${' .. name .. '}"'
  end
  local out = {}
  for _, p in ipairs(parts) do
    if p.kind == "text" then
      out[#out + 1] = p.text
    else
      local v = _value(ctx, p)
      local e = _nul_check(v, field)
      if e then return nil, e end
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

local function _render_raw(ctx, text, field)
  local parts, err = M.parse_template(text)
  if not parts then return nil, field .. ": " .. err end
  local out = {}
  for _, p in ipairs(parts) do
    if p.kind == "text" then
      out[#out + 1] = p.text
    else
      local v = _value(ctx, p)
      if type(v) == "table" then v = table.concat(v, " ") end
      out[#out + 1] = v
    end
  end
  local s = table.concat(out)
  if s:find("\0", 1, true) then return nil, field .. ": a value contains a NUL byte" end
  return s
end

--- Render a validated recipe into the job-script fields of a managed spec.
---@param recipe table from `validate`
---@param inputs table<string, any> input values (resolved; missing optional inputs render as "")
---@param defaults table|nil cluster defaults (model_cache_dir, image_dir, log_dir, modules (list), ...)
---@param model table|nil {api_name=, id=}
---@param resources table|nil resolved resources (nodes, gpus_per_node, ...); default: the recipe's
---@return table|nil rendered {script_body=|nil, launch_command=|nil, image=|nil, preamble={lines},
---  environment={K=V}, argv=|nil (the launch argv for display: values literal, env refs as $NAME)}
---@return {field: string, message: string}[]|nil errors
function M.render(recipe, inputs, defaults, model, resources)
  if type(recipe) ~= "table" then error("recipe.render: recipe must be a validated recipe", 2) end
  local res = {}
  for k, v in pairs(M.SPEC_DEFAULTS) do res[k] = v end
  for k, v in pairs(recipe.resources or {}) do res[k] = v end
  for k, v in pairs(resources or {}) do if M.RESOURCE_KEYS[k] then res[k] = v end end
  local ctx = { inputs = inputs or {}, defaults = defaults or {}, model = model or {}, resources = res, env = {} }
  local errors = {}
  local function fail(field, msg) errors[#errors + 1] = { field = field, message = msg } end
  local out = { preamble = {}, environment = {} }

  if recipe.script then
    local s, err = _render_script(ctx, recipe.script, "script")
    if s then out.script_body = s else fail("script", err) end
  else
    local words, argv = {}, {}
    for i, el in ipairs(recipe.launch or {}) do
      local list = type(el) == "string" and { el } or (_when_holds(ctx, el.when) and el.args or {})
      for j, text in ipairs(list) do
        local field = type(el) == "string" and ("launch[%d]"):format(i) or ("launch[%d].args[%d]"):format(i, j)
        local ws, shown, err = _render_argv_element(ctx, text, field)
        if not ws then
          fail(field, err)
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
      if not img then fail("image", err)
      elseif img:find("[\n\r]") then fail("image", "image: the path must not contain a newline")
      elseif img ~= "" then out.image = img end
    end
    for i, el in ipairs(recipe.preamble or {}) do
      local line = type(el) == "string" and el or (_when_holds(ctx, el.when) and el.line or nil)
      if line then
        local s, err = _render_script(ctx, line, ("preamble[%d]"):format(i))
        if s then out.preamble[#out.preamble + 1] = s else fail(("preamble[%d]"):format(i), err) end
      end
    end
  end
  for k, text in pairs(recipe.environment or {}) do
    local s, err = _render_raw(ctx, text, "environment." .. k)
    if not s then fail("environment." .. k, err)
    elseif s ~= "" then out.environment[k] = s end -- a value that renders empty is left out
  end
  -- the values script templates and preamble lines refer to
  for k, v in pairs(ctx.env) do out.environment[k] = v end
  if #errors > 0 then return nil, errors end
  return out
end

---------------------------------------------------------------------------
-- resolving the launch form
---------------------------------------------------------------------------

-- Settings in form order: name, kind of check.
local SETTINGS = {
  { "api_name" }, { "partition" }, { "account" }, { "qos" }, { "time_limit" }, { "nodes" },
  { "gpus_per_node" }, { "gpu_type" }, { "cpus_per_node" }, { "memory_per_node" }, { "constraint" },
  { "exclude" }, { "replicas" }, { "stdout" }, { "stderr" }, { "rollover_margin" },
}
local SETTING_SET = {}
for _, s in ipairs(SETTINGS) do SETTING_SET[s[1]] = true end

local function _flatten_user(user)
  -- {inputs={a=1}, health={path=..}, ["inputs.b"]=2, partition=...} -> flat "inputs.a", "health.path", ...
  local flat = {}
  for k, v in pairs(user or {}) do
    if (k == "inputs" or k == "health") and type(v) == "table" then
      for k2, v2 in pairs(v) do flat[k .. "." .. tostring(k2)] = v2 end
    else
      flat[k] = v
    end
  end
  return flat
end

local function _check_text(v, field, allow_newline)
  if type(v) ~= "string" or v == "" then return nil, field .. " must be a non-empty string" end
  if v:find("\0", 1, true) or (not allow_newline and v:find("[\n\r]")) then
    return nil, field .. " must not contain control characters"
  end
  return v
end

local function _check_setting(name, v)
  if name == "api_name" then
    local s, err = _check_text(v, "api_name")
    if not s then return nil, err end
    if #s > 256 or s:find("%c") then return nil, "api_name must be at most 256 printable characters" end
    return s
  elseif name == "account" or name == "qos" then
    local s, err = _check_text(v, name)
    if not s then return nil, err end
    if not s:match("^[A-Za-z0-9_.-]+$") then return nil, name .. " contains characters Slurm does not accept" end
    return s
  elseif name == "stdout" or name == "stderr" then
    return _check_text(v, name)
  end
  return _check_rule(RES_RULES[name], v, name)
end

--- Resolve every setting of the launch form: value and provenance.
-- Precedence, lowest first: obleth's built-in fallback (M.SPEC_DEFAULTS,
-- provenance `builtin`), cluster defaults (`cluster_default`), the recipe, learned
-- account/QoS (`learned`), the user's values (`user`). An input default that
-- refers to `{{ defaults.* }}` is marked `cluster_default`.
---@param recipe table validated recipe
---@param user_values table|nil what the user changed: {partition=, account=, ..., inputs={name=v},
---  health={path=, ...}} (dotted keys "inputs.x" / "health.path" work too); strings are coerced
---@param cluster_defaults table|nil {partition, account, qos, log_dir, model_cache_dir, ...}
---@param learned table|nil {account=, qos=, evidence=} from obleth.policy.learned
---@return {values: table, provenance: table<string, string>, fields: table[], errors: table[], ok: boolean}
---  values: {api_name, partition, account, qos, time_limit (minutes), nodes, gpus_per_node, gpu_type,
---  cpus_per_node, memory_per_node (MiB), constraint, exclude, replicas, stdout, stderr, rollover_margin,
---  health={...}, inputs={...}}; provenance and fields are keyed "partition", "inputs.x", "health.path";
---  errors: {field=, message=}
function M.resolve(recipe, user_values, cluster_defaults, learned)
  if type(recipe) ~= "table" then error("recipe.resolve: recipe must be a validated recipe", 2) end
  local defaults = cluster_defaults or {}
  local user = _flatten_user(user_values)
  local values, provenance, errors = { inputs = {}, health = {} }, {}, {}
  local function err(field, message) errors[#errors + 1] = { field = field, message = message } end
  local function set(field, v, source)
    local ns, key = field:match("^(%a+)%.(.+)$")
    if ns then values[ns][key] = v else values[field] = v end
    provenance[field] = source
  end

  -- unknown user keys
  for k in pairs(user) do
    local ns, key = tostring(k):match("^(%a+)%.(.+)$")
    local known = SETTING_SET[k] or (ns == "inputs" and recipe.inputs[key]) or (ns == "health" and HEALTH_RULES[key])
    if not known then err(tostring(k), ("unknown setting %q"):format(tostring(k))) end
  end

  -- plain settings
  local cd = {
    partition = _v(defaults.partition), account = _v(defaults.account), qos = _v(defaults.qos),
  }
  local log_dir = _v(defaults.log_dir)
  if type(log_dir) == "string" and log_dir ~= "" then
    cd.stdout = log_dir:gsub("/+$", "") .. "/%x-%j.out"
    cd.stderr = log_dir:gsub("/+$", "") .. "/%x-%j.err"
  end
  for _, s in ipairs(SETTINGS) do
    local name = s[1]
    local v, source = M.SPEC_DEFAULTS[name], M.SPEC_DEFAULTS[name] ~= nil and "builtin" or nil
    if name == "api_name" then v, source = recipe.id, "recipe" end
    if cd[name] ~= nil then v, source = cd[name], "cluster_default" end
    local rv = recipe.resources[name]
    if name == "replicas" then rv = recipe.replicas end
    if rv ~= nil then v, source = rv, "recipe" end
    if learned and (name == "account" or name == "qos") and _v(learned[name]) ~= nil then
      v, source = learned[name], "learned"
    end
    local uv = _v(user[name])
    if uv ~= nil and uv ~= "" then v, source = uv, "user" end
    if v ~= nil then
      local ok, e = _check_setting(name, v)
      if ok == nil then err(name, e) else v = ok end
      set(name, v, source)
    end
  end
  if values.api_name == nil then err("api_name", "api_name is required") end
  if values.gpu_type ~= nil and (values.gpus_per_node or 0) == 0 then
    err("gpu_type", "a GPU type needs at least one GPU per node")
  end

  -- health
  for k in pairs(HEALTH_RULES) do
    local v, source = recipe.health[k], "recipe"
    local uv = _v(user["health." .. k])
    if uv ~= nil and uv ~= "" then
      local ok, e = _check_rule(HEALTH_RULES[k], uv, "health." .. k)
      if ok == nil then err("health." .. k, e) else v, source = ok, "user" end
    end
    set("health." .. k, v, source)
  end

  -- inputs
  for _, name in ipairs(recipe.input_order) do
    local def = recipe.inputs[name]
    local field = "inputs." .. name
    local v, source = nil, nil
    if def.default ~= nil then
      v, source = def.default, "recipe"
      if type(v) == "string" and v:find("{{", 1, true) then
        local rendered = _render_raw({ defaults = defaults }, v, field)
        v, source = rendered, "cluster_default"
        local blank = false
        for _, p in ipairs(M.parse_template(def.default) or {}) do
          if p.kind == "ref" and _v(defaults[p.name]) == nil then blank = true end
        end
        if blank then v = nil end -- a default built on a missing cluster default is no default
      end
    end
    local uv = _v(user[field])
    if uv ~= nil and not (uv == "" and def.type ~= "string") then v, source = uv, "user" end
    if v ~= nil then
      local ok, e = _check_typed_value(def, v, field)
      if ok == nil then err(field, e) else v = ok end
      set(field, v, source)
    elseif def.required then
      err(field, field .. " is required" .. (def.description and (": " .. def.description) or ""))
    end
  end

  -- rules across inputs
  local function set_input(n)
    local v = values.inputs and values.inputs[n]
    return v ~= nil and v ~= "" and v ~= false
  end
  for _, group in ipairs(recipe.one_of or {}) do
    local any = false
    for _, n in ipairs(group) do if set_input(n) then any = true end end
    if not any then
      local names = {}
      for i, n in ipairs(group) do names[i] = "inputs." .. n end
      err("inputs." .. group[1], ("give one of %s"):format(table.concat(names, ", ")))
    end
  end
  for name, needs in pairs(recipe.requires or {}) do
    if set_input(name) then
      for _, n in ipairs(needs) do
        if not set_input(n) then err("inputs." .. n, ("inputs.%s is required with inputs.%s"):format(n, name)) end
      end
    end
  end

  -- fields in form order
  local fields = {}
  local function push(f)
    if provenance[f] then
      local ns, key = f:match("^(%a+)%.(.+)$")
      local v = ns and values[ns][key] or values[f]
      fields[#fields + 1] = { field = f, value = v, provenance = provenance[f] }
    end
  end
  for _, s in ipairs(SETTINGS) do push(s[1]) end
  for _, k in ipairs({ "path", "interval", "timeout", "startup_grace", "failure_threshold" }) do push("health." .. k) end
  for _, name in ipairs(recipe.input_order) do push("inputs." .. name) end
  return { values = values, provenance = provenance, fields = fields, errors = errors, ok = #errors == 0 }
end

--- Build the managed spec (docs/managed-spec.md) from resolved values and a render.
---@param recipe table validated recipe
---@param values table `resolve(...).values`
---@param rendered table `render(...)`
---@return table spec (without enabled/generation)
function M.managed_spec(recipe, values, rendered)
  local spec = {
    replicas = values.replicas, partition = values.partition, account = values.account, qos = values.qos,
    time_limit = values.time_limit, nodes = values.nodes, gpus_per_node = values.gpus_per_node,
    gpu_type = values.gpu_type, cpus_per_node = values.cpus_per_node, memory_per_node = values.memory_per_node,
    constraint = values.constraint, exclude = values.exclude, stdout = values.stdout, stderr = values.stderr,
    health = {}, recipe_id = recipe.id, inputs = {}, rollover_margin = values.rollover_margin,
    script_body = rendered.script_body, launch_command = rendered.launch_command, image = rendered.image,
    preamble = rendered.preamble or {}, environment = rendered.environment or {},
  }
  for k, v in pairs(values.health or {}) do spec.health[k] = v end
  for k, v in pairs(values.inputs or {}) do spec.inputs[k] = v end
  return spec
end

---------------------------------------------------------------------------
-- loading YAML (host only: needs obleth.yaml)
---------------------------------------------------------------------------

--- Decode and validate recipe YAML text.
---@param text string
---@param name string|nil file name for messages
---@return table|nil recipe
---@return table[]|nil errors {field, message, line, column}
function M.load_text(text, name)
  local yaml = require "obleth.yaml"
  local doc, pos = yaml.decode(text, { positions = true })
  if doc == nil then
    local e = pos or {}
    return nil, { { field = "", line = e.line, column = e.column,
      message = (name and (name .. ": ") or "") .. tostring(e.message or e) } }
  end
  return M.validate(doc, pos)
end

--- Read, decode and validate a recipe file.
---@param path string
---@return table|nil recipe
---@return table[]|nil errors
function M.load_file(path)
  local fh, ferr = io.open(path, "rb")
  if not fh then return nil, { { field = "", message = tostring(ferr) } } end
  local text = fh:read("a")
  fh:close()
  return M.load_text(text, path)
end

--- Every `*.yaml` recipe in a directory, by id.
---@param dir string
---@return table<string, table> recipes
---@return table<string, table[]> errors by file name
function M.load_dir(dir)
  local sys = require "obleth.sys"
  local names = sys.listdir(dir) or {}
  table.sort(names)
  local recipes, errors = {}, {}
  for _, n in ipairs(names) do
    if n:match("%.ya?ml$") then
      local r, errs = M.load_file(dir .. "/" .. n)
      if r then recipes[r.id] = r else errors[n] = errs end
    end
  end
  return recipes, errors
end

M._sorted_keys = _sorted_keys
return M
