--- obleth.recipe.templates — parsing `{{ ns.name [| filter] }}` references, checking that each
-- names something the recipe provides, where a reference may sit in a script (shell context) and
-- in an argv element. See obleth.recipe for the injection-safety rules.
--
-- Errors: a leaf parser (docs/errors.md): `parse_template` and `_parse_argv_element` return nil, "message" for bad input, and
-- the caller wraps it into {code, message, field}. spec/unit/error_shape_spec.lua holds this list.
local schema = require "obleth.recipe.schema"
-- the names this part's code shares with the other parts of obleth.recipe
local M = {}

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
    if not schema.DEFAULT_KEYS[ref.name] and not ref.name:match("^x_") then
      return ("%s is not a cluster default (model_cache_dir, image_dir, log_dir, modules, partition, "
        .. "account, qos, x_*)"):format(ref.raw)
    end
  elseif ref.ns == "model" then
    if not schema.MODEL_KEYS[ref.name] then return ("%s: model has api_name and id"):format(ref.raw) end
  elseif ref.ns == "resources" then
    if not schema.RESOURCE_KEYS[ref.name] then return ("%s is not a resource field"):format(ref.raw) end
  else
    return ("%s: the namespaces are inputs, defaults, model and resources"):format(ref.raw)
  end
  if ref.filter and not schema.FILTERS[ref.filter] then
    return ("%s: unknown filter %q (known: first_shard, in_image_dir)"):format(ref.raw, ref.filter)
  end
  return nil
end

--- Shell-context check of a script template: every reference must sit where
-- a single-quoted word is read literally. Returns the first problem.
---@param parts table[] from parse_template
---@return string|nil err
-- Commands whose arguments bash reads as variable names (an array subscript in
-- a name is evaluated: `read 'a[$(cmd)]'` runs cmd).
local NAME_COMMANDS = { read = true, mapfile = true, readarray = true, getopts = true, unset = true }
-- Commands that take NAME=value words: a reference may be the value, never the name,
-- and not at all once an option (-i integer, -n nameref, ...) is given.
local ASSIGN_COMMANDS = { ["local"] = true, export = true, readonly = true }

-- True when a line of the script gives a variable the integer or nameref attribute
-- (declare -i n, local -n r, ...): an assignment to it is evaluated again.
local function _declares_attr(parts)
  local text = {}
  for _, p in ipairs(parts) do text[#text + 1] = p.kind == "text" and p.text or "\1" end
  for line in table.concat(text):gmatch("[^\n]+") do
    for _, w in ipairs({ "declare", "typeset", "local", "readonly", "export" }) do
      if line:find("%f[%w_]" .. w .. "%f[^%w_][^;&|]*%s%-%a*[in]") then return true end
    end
  end
  return false
end

local function _check_script_context(parts)
  local attr_vars = _declares_attr(parts)
  local stack = { "top" } -- top | paren | cmdsub | arith | sqarith ($[..]) | param | dquote | squote | ansi | backtick
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
      elseif top() == "arith" or top() == "sqarith" then where = "inside arithmetic ($((...)), ((...)) or $[...])"
      elseif select(2, word:gsub("%[", "")) > select(2, word:gsub("%]", "")) then
        where = "inside [...] (bash may read it as an array subscript)"
      elseif attr_vars and word:match("^[%a_][%w_]*%+?=") then
        where = "assigned to a variable while the script declares integer or nameref variables"
      end
      if not where then
        local cur = word
        end_word()
        local cmd = cmd_words[1]
        local has = {}
        for _, w in ipairs(cmd_words) do has[w] = true end
        if cmd and NAME_COMMANDS[cmd] then
          where = ("an argument of %s (bash reads it as a variable name)"):format(cmd)
        elseif cmd == "printf" then
          for _, w in ipairs(cmd_words) do
            if w:match("^%-v") then where = "in printf -v (bash reads a variable name there)" end
          end
          if cur:match("^%-v") then where = "in printf -v (bash reads a variable name there)" end
        elseif (cmd == "test" or cmd == "[") and (has["-v"] or has["-R"]) then
          where = ("in %s -v (bash reads a variable name there)"):format(cmd)
        elseif cmd and ASSIGN_COMMANDS[cmd] then
          local flags = false
          for i = 2, #cmd_words do if cmd_words[i]:match("^%-") then flags = true end end
          if flags or not cur:match("^[%a_][%w_]*%+?=") then
            where = ("in %s where it names a variable or sets an attribute (write %s NAME=value)"):format(
              cmd, cmd)
          end
        end
      end
      if not where then
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
        elseif top() == "dquote" or top() == "backtick" or top() == "param" or top() == "arith"
          or top() == "sqarith" then
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
          elseif c == "]" and t == "sqarith" then
            table.remove(stack)
          elseif c == "$" and s:sub(i + 1, i + 1) == "[" then
            stack[#stack + 1] = "sqarith"; i = i + 1
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
          elseif c == "$" and s:sub(i + 1, i + 1) == "[" then
            stack[#stack + 1] = "sqarith"; i = i + 1; word = word .. "$["
          elseif c == "(" and s:sub(i + 1, i + 1) == "(" and word == "" then
            stack[#stack + 1] = "arith"; i = i + 1; end_word(); cmd_words = {}
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

-- named exports the other parts of obleth.recipe use
M.check_ref = _check_ref
M.check_script_context = _check_script_context
M.parse_argv_element = _parse_argv_element

return M
