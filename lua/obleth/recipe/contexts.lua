--- obleth.recipe.contexts — where an input's free text may stand in a recipe: an allowlist.
--
-- A string or path input is free text: whoever launches chooses it. Its value may reach a job only
-- where it is read as data, never where a shell or another interpreter evaluates it. Instead of
-- listing the dangerous places (every such list leaks), this module lists the places that are safe
-- and refuses everything else, naming the line:
--
--   * a launch list (argv): an element may carry free text only when the launch's program is one
--     obleth knows takes its arguments as data (DATA_PROGRAMS, or the recipe's own `programs:`);
--   * a script or preamble line: a reference to free text may stand
--       - as the value of a plain assignment statement (`M={{ inputs.model }}`, also after
--         `export` / `local` / `readonly` without options): M then carries the value;
--       - as an argument (never the program) of a data program, whose output goes into no pipe;
--     and a variable that carries free text (assigned that way, or an `environment:` entry whose
--     value refers to free text) may be used only as a double-quoted `"$M"` / `"${M}"`, in the same
--     places: an assignment's value (that variable carries it too), an argument of a data program,
--     `for x in "$M"`, `case "$M" in`. Unquoted, in arithmetic (`$((M))`, `((...))`, `let`, a
--     subscript), in `[[ ]]`, as a program, in an unquoted heredoc body, after an assignment that
--     prefixes a command, or in any other command, it is refused.
--
-- Numbers, whole numbers, booleans and enum values are not free text (finite numbers, true/false,
-- the recipe's own words): they may stand anywhere the template syntax allows. Cluster defaults,
-- the model's names and resources are the operator's or validated by obleth, not free text.
--
-- Pure functions. Errors: `check_script` and `check_launch` return nil, "message" (a leaf parser,
-- docs/errors.md); validate wraps the message into {field, message, line}.
local M = {}

--- Input types whose value is free text (chosen by whoever launches).
M.TEXT_TYPES = { string = true, path = true }

--- Programs known to take their arguments as data (the engines obleth ships recipes for, and the
--- utilities library scripts use): true, or the only subcommands that do (`obleth lua FILE` runs
--- code, `obleth smoke-engine` does not). `python3`/`python` only as `python3 -m <module>` with a
--- module in PYTHON_MODULES. A recipe adds its own engine under `programs:`. Left out on purpose:
--- `module` (Lmod loads a modulefile given as a path: code), `ray` (`ray job submit -- CMD`),
--- `scontrol`, `hostname` (they change the cluster or the host).
M.DATA_PROGRAMS = {
  vllm = { serve = true }, ["llama-server"] = true, ollama = { serve = true, pull = true, create = true, cp = true,
    show = true, list = true }, obleth = { ["smoke-engine"] = true }, sglang = { serve = true },
  ["text-generation-launcher"] = true,
  -- utilities: read an argument as a name, a path or text to print, never as code
  ["["] = true, test = true, echo = true, printf = true, mkdir = true, cd = true, ls = true, cp = true,
  mv = true, rm = true, ln = true, touch = true, stat = true, realpath = true, readlink = true,
  dirname = true, basename = true, cat = true, ["true"] = true, [":"] = true,
}
M.PYTHON_MODULES = { ["sglang.launch_server"] = true, ["vllm.entrypoints.openai.api_server"] = true }
--- Words that run the next word as the program.
local WRAPPERS = { exec = true, command = true, nohup = true, time = true }
--- srun's short options that take no value (the others take the next word).
local SRUN_FLAGS = { ["-l"] = true, ["-u"] = true, ["-v"] = true, ["-Q"] = true, ["-K"] = true, ["-X"] = true,
  ["-Z"] = true, ["-h"] = true, ["-O"] = true, ["-E"] = true, ["-H"] = true, ["-I"] = true, ["-s"] = true }
--- Reserved words that start a command without being its program.
local KEYWORDS = { ["if"] = true, ["then"] = true, ["elif"] = true, ["else"] = true, ["while"] = true,
  ["until"] = true, ["do"] = true, ["done"] = true, ["fi"] = true, ["!"] = true, ["{"] = true, ["}"] = true,
  ["esac"] = true, [";;"] = true }
--- Names a recipe's `programs:` may not give: shells and interpreters run an argument as code.
M.INTERPRETERS = { sh = true, bash = true, dash = true, zsh = true, ksh = true, csh = true, tcsh = true,
  fish = true, busybox = true, perl = true, python = true, python2 = true, python3 = true, ruby = true,
  node = true, nodejs = true, deno = true, php = true, lua = true, luajit = true, tclsh = true, awk = true,
  gawk = true, mawk = true, sed = true, env = true, xargs = true, eval = true, source = true, ["."] = true,
  ssh = true, su = true, sudo = true, runuser = true, srun = true, apptainer = true, singularity = true,
  find = true, make = true, expect = true, Rscript = true, R = true, julia = true, pwsh = true }

local function _base(p) return (p:match("([^/]+)$") or p) end

-- A program word of a launch list or script: its plain name, or nil when it is an expansion.
local function _data_program(words, i, programs)
  local w = words[i]
  if not w then return false, "no program" end
  local name = _base(w)
  if programs and programs[name] then return true end
  if name == "python3" or name == "python" then
    if words[i + 1] == "-m" and M.PYTHON_MODULES[words[i + 2] or ""] then return true end
    return false, ("%s runs Python code: only `%s -m <module>` with a known server module takes data"):format(name, name)
  end
  local known = M.DATA_PROGRAMS[name]
  if known == true then return true end
  if known then
    local sub = words[i + 1]
    if sub and known[sub] then return true end
    local subs = {}
    for k in pairs(known) do subs[#subs + 1] = name .. " " .. k end
    table.sort(subs)
    return false, ("obleth knows only %s take their arguments as data"):format(table.concat(subs, ", "))
  end
  return false, ("obleth does not know that %s takes its arguments as data (name it in the recipe's "
    .. "`programs:` if it does)"):format(name)
end

---------------------------------------------------------------------------
-- launch lists
---------------------------------------------------------------------------

--- Check a launch list: when `tainted` is true (an element carries free text), the program must be
--- a data program.
---@param launch (string|{args: string[]})[] the validated launch list
---@param tainted boolean
---@param programs table<string, true>|nil the recipe's `programs:`
---@return string|nil err
function M.check_launch(launch, tainted, programs)
  if not tainted or type(launch[1]) ~= "string" then return nil end
  local first = launch[1]
  local words = {}
  for i, el in ipairs(launch) do
    if type(el) ~= "string" then break end
    words[i] = el
  end
  local default = first:match("^%${[%a_][%w_]*:%-([^}]*)}$")
  if default then words[1] = default
  elseif first:find("$", 1, true) then
    return ("launch[1] %q is a variable: an input's text may reach only a program named in the recipe"):format(first)
  end
  local ok, why = _data_program(words, 1, programs)
  if ok then return nil end
  return ("an input's text (a string or path input) reaches %s, and %s"):format(words[1], why)
end

---------------------------------------------------------------------------
-- scripts: a small lexer for the shell words obleth needs to see
---------------------------------------------------------------------------

-- Markers the caller puts in place of references: TAINT for free text, DATA for other values.
M.TAINT, M.DATA = "\1", "\3"

local function _lexer(s)
  local L = { s = s, i = 1, line = 1, commands = {}, arith = {}, heredoc_uses = {}, literal_uses = {}, pending = {} }
  local n = #s

  local function peek(k) return s:sub(L.i + (k or 0), L.i + (k or 0)) end

  local parse_list -- forward

  -- `uses` collects {name, quoted, line} of every variable expanded inside the current word
  local function use(w, name, quoted, how)
    w.uses[#w.uses + 1] = { name = name, quoted = quoted, line = L.line, how = how }
  end

  -- arithmetic text from L.i up to the closing `close` (balanced parens); names in it are evaluated
  local function arith(w, close)
    local depth = 0
    while L.i <= n do
      local c = peek()
      if c == "\n" then L.line = L.line + 1 end
      if close == "))" and c == "(" then depth = depth + 1
      elseif close == "))" and c == ")" then
        if depth == 0 and peek(1) == ")" then L.i = L.i + 2; return end
        depth = depth - 1
      elseif close == "]" and c == "]" then L.i = L.i + 1; return end
      if c == M.TAINT then w.direct = true end
      local id = s:match("^[%a_][%w_]*", L.i)
      if id then
        L.arith[#L.arith + 1] = { name = id, line = L.line }
        if w then use(w, id, false, "arith") end
        L.i = L.i + #id
      else
        L.i = L.i + 1
      end
    end
  end

  -- ${...} at L.i (after "${"); returns after the closing brace
  local function param(w, quoted)
    local bang = peek() == "!"
    if bang or peek() == "#" then L.i = L.i + 1 end
    local id = s:match("^[%a_][%w_]*", L.i) or s:match("^[%d@*#?$!-]", L.i)
    if id then
      L.i = L.i + #id
      use(w, id, quoted, bang and "indirect" or nil)
    end
    local depth = 0
    while L.i <= n do
      local c = peek()
      if c == "[" then
        L.i = L.i + 1
        arith(w, "]")
      elseif c == "{" then depth = depth + 1; L.i = L.i + 1
      elseif c == "}" then
        L.i = L.i + 1
        if depth == 0 then return end
        depth = depth - 1
      elseif c == "$" then
        L.i = L.i + 1
        local nid = s:match("^[%a_][%w_]*", L.i)
        if nid then use(w, nid, quoted); L.i = L.i + #nid end
      else
        if c == "\n" then L.line = L.line + 1 end
        if c == M.TAINT then w.direct = true end
        L.i = L.i + 1
      end
    end
  end

  -- a nested command list (command substitution, backticks, process substitution): its commands
  -- are checked like the others; the word it stands in sees the variables it uses
  local function nested(w, close)
    local first = #L.commands + 1
    parse_list(close)
    for k = first, #L.commands do
      for _, cw in ipairs(L.commands[k].words) do
        for _, u in ipairs(cw.uses) do w.uses[#w.uses + 1] = { name = u.name, quoted = true, line = u.line,
          how = "output" } end
        if cw.direct then w.direct = true end
      end
    end
    w.lit = nil
  end

  local function dollar(w, quoted)
    -- at "$"
    local nx = peek(1)
    if s:sub(L.i, L.i + 2) == "$((" then
      L.i = L.i + 3; arith(w, "))"); w.lit = nil
    elseif nx == "(" then
      L.i = L.i + 2; nested(w, ")")
    elseif nx == "[" then
      L.i = L.i + 2; arith(w, "]"); w.lit = nil
    elseif nx == "{" then
      L.i = L.i + 2; param(w, quoted); w.lit = nil
    elseif nx == "'" and not quoted then
      L.i = L.i + 2
      while L.i <= n and peek() ~= "'" do
        if peek() == "\\" then L.i = L.i + 1 end
        L.i = L.i + 1
      end
      L.i = L.i + 1
    else
      local id = s:match("^[%a_][%w_]*", L.i + 1) or s:match("^[%d@*#?$!-]", L.i + 1)
      if id then
        use(w, id, quoted); L.i = L.i + 1 + #id; w.lit = nil
      else
        L.i = L.i + 1
        if w.lit then w.lit = w.lit .. "$" end
      end
    end
  end

  local function add_lit(w, c) if w.lit then w.lit = w.lit .. c end end

  local META = { [" "] = true, ["\t"] = true, ["\n"] = true, [";"] = true, ["&"] = true, ["|"] = true,
    ["("] = true, [")"] = true, ["<"] = true, [">"] = true }

  local function read_word(close)
    local w = { lit = "", uses = {}, line = L.line, raw_start = L.i }
    while L.i <= n do
      local c = peek()
      if META[c] or (close == "`" and c == "`") then break end
      if c == "\\" then
        if peek(1) == "\n" then L.line = L.line + 1 else add_lit(w, peek(1)) end
        L.i = L.i + 2
      elseif c == "'" then
        local j = s:find("'", L.i + 1, true) or n + 1
        local body = s:sub(L.i + 1, j - 1)
        local _, nl = body:gsub("\n", "")
        L.line = L.line + nl
        add_lit(w, body)
        L.i = j + 1
      elseif c == '"' then
        L.i = L.i + 1
        w.quoted = true
        while L.i <= n and peek() ~= '"' do
          local d = peek()
          if d == "\\" then
            local e = peek(1)
            if e == "\n" then L.line = L.line + 1
            elseif e == "$" or e == "`" or e == '"' or e == "\\" then add_lit(w, e)
            else add_lit(w, "\\" .. e) end
            L.i = L.i + 2
          elseif d == "$" then
            dollar(w, true)
          elseif d == "`" then
            L.i = L.i + 1; nested(w, "`"); L.i = L.i + 1
          else
            if d == "\n" then L.line = L.line + 1 end
            if d == M.TAINT then w.direct = true; w.lit = nil end
            if d == M.DATA then w.lit = nil end
            add_lit(w, d)
            L.i = L.i + 1
          end
        end
        L.i = L.i + 1
      elseif c == "$" then
        dollar(w, false)
      elseif c == "`" then
        L.i = L.i + 1; nested(w, "`"); L.i = L.i + 1
      elseif c == M.TAINT then
        w.direct = true; w.lit = nil; L.i = L.i + 1
      elseif c == M.DATA then
        w.lit = nil; L.i = L.i + 1
      elseif c == "[" and w.lit and w.lit:match("^[%a_][%w_]*$") then
        -- an array subscript in an assignment's name: evaluated as arithmetic
        L.i = L.i + 1
        w.lit = w.lit .. "[]"
        arith(w, "]")
      else
        add_lit(w, c)
        L.i = L.i + 1
      end
    end
    w.raw = s:sub(w.raw_start, L.i - 1)
    local name = w.raw:match("^([%a_][%w_]*)%+?=") or w.raw:match("^([%a_][%w_]*)%[[^%]]*%]%+?=")
    if name then w.assign = name end
    return w
  end

  -- the body of each heredoc whose delimiter was read on this line
  local function heredocs()
    for _, h in ipairs(L.pending) do
      while L.i <= n do
        local e = s:find("\n", L.i, true) or n + 1
        local line = s:sub(L.i, e - 1)
        L.i = e + 1
        L.line = L.line + 1
        if (h.strip and line:gsub("^\t+", "") or line) == h.delim then break end
        if h.quoted then
          for id in line:gmatch("%$%{?([%a_][%w_]*)") do
            L.literal_uses[#L.literal_uses + 1] = { name = id, line = L.line - 1 }
          end
        else
          for id in line:gmatch("%$%{?([%a_][%w_]*)") do
            L.heredoc_uses[#L.heredoc_uses + 1] = { name = id, line = L.line - 1 }
          end
          if line:find(M.TAINT, 1, true) then L.heredoc_uses[#L.heredoc_uses + 1] = { direct = true, line = L.line - 1 } end
        end
      end
    end
    L.pending = {}
  end

  -- one command list up to `close` (")" or "`"), or the end of the text
  parse_list = function(close)
    local cmd = { words = {}, line = L.line }
    local function finish(pipe)
      if cmd.words[1] and cmd.words[1].line then cmd.line = cmd.words[1].line end
      if #cmd.words > 0 or cmd.kind then
        cmd.pipe_out = pipe
        L.commands[#L.commands + 1] = cmd
      end
      cmd = { words = {}, line = L.line }
    end
    while L.i <= n do
      local c = peek()
      if close and c == close then
        L.i = L.i + 1; finish(false); return
      elseif c == " " or c == "\t" then
        L.i = L.i + 1
      elseif c == "\\" and peek(1) == "\n" then
        L.i = L.i + 2; L.line = L.line + 1 -- a line continued
      elseif c == "\n" then
        L.i = L.i + 1; finish(false); L.line = L.line + 1
        if #L.pending > 0 then heredocs() end
      elseif c == "#" then
        local e = s:find("\n", L.i, true) or n + 1
        L.i = e
      elseif c == ";" or c == "&" then
        if s:sub(L.i, L.i + 1) == ";;" then L.i = L.i + 1 end
        L.i = L.i + 1; finish(false)
      elseif c == "|" then
        if peek(1) == "|" then L.i = L.i + 2; finish(false)
        else L.i = L.i + (peek(1) == "&" and 2 or 1); finish(true) end
      elseif c == "(" then
        local last = cmd.words[#cmd.words]
        if last and last.raw:match("^[%a_][%w_]*%+?=$") then
          -- an array assignment NAME=(...): its elements
          L.i = L.i + 1
          last.array = {}
          while L.i <= n do
            while peek() == " " or peek() == "\t" or peek() == "\n" do
              if peek() == "\n" then L.line = L.line + 1 end
              L.i = L.i + 1
            end
            if peek() == ")" then L.i = L.i + 1; break end
            local el = read_word()
            if el.raw == "" then L.i = L.i + 1 else last.array[#last.array + 1] = el end
          end
        elseif peek(1) == ")" then
          L.i = L.i + 2 -- a function definition: name()
          cmd.words = {}
        elseif #cmd.words == 0 and peek(1) == "(" then
          -- (( arithmetic ))
          L.i = L.i + 2
          local w = { uses = {}, line = L.line }
          arith(w, "))")
          cmd.kind = "arith"
          cmd.words[1] = w
        else
          L.i = L.i + 1
          finish(false)
          parse_list(")")
        end
      elseif c == ")" then
        L.i = L.i + 1; finish(false)
      elseif c == "<" or c == ">" then
        if s:sub(L.i, L.i + 1) == "<(" or s:sub(L.i, L.i + 1) == ">(" then
          L.i = L.i + 2
          local w = { uses = {}, line = L.line, raw = "<(" }
          nested(w, ")")
          w.redirect = true
          cmd.words[#cmd.words + 1] = w
        elseif s:sub(L.i, L.i + 2) == "<<<" then
          L.i = L.i + 3
          while peek() == " " do L.i = L.i + 1 end
          local w = read_word()
          w.herestring = true
          cmd.words[#cmd.words + 1] = w
        elseif s:sub(L.i, L.i + 1) == "<<" then
          L.i = L.i + 2
          local strip = peek() == "-"
          if strip then L.i = L.i + 1 end
          while peek() == " " or peek() == "\t" do L.i = L.i + 1 end
          local w = read_word()
          local quoted = w.raw:find("['\"\\]") ~= nil
          L.pending[#L.pending + 1] = { delim = w.lit or w.raw:gsub("['\"\\]", ""), strip = strip, quoted = quoted }
        else
          while peek() == "<" or peek() == ">" or peek() == "&" do L.i = L.i + 1 end
          while peek() == " " or peek() == "\t" do L.i = L.i + 1 end
          local w = read_word()
          w.redirect = true
          cmd.words[#cmd.words + 1] = w
        end
      else
        local w = read_word(close)
        if w.raw == "" then
          L.i = L.i + 1 -- a character read_word stops at and nothing here takes (a stray backtick)
        else
          -- a file descriptor number right before a redirection (2>, 1>&2) is no word
          if w.raw:match("^%d+$") and (peek() == ">" or peek() == "<") then w.redirect = true end
          cmd.words[#cmd.words + 1] = w
        end
      end
    end
    finish(false)
  end

  parse_list(nil)
  return L
end

---------------------------------------------------------------------------
-- scripts: the allowlist
---------------------------------------------------------------------------

local function _tainted(w, carriers)
  if w.direct then return true end
  for _, u in ipairs(w.uses) do if carriers[u.name] then return true end end
  if w.array then
    for _, el in ipairs(w.array) do if _tainted(el, carriers) then return true end end
  end
  return false
end

local function _what(w, carriers)
  if w.direct then return "an input's text" end
  for _, u in ipairs(w.uses) do if carriers[u.name] then return "$" .. u.name .. " (it carries an input's text)" end end
  return "an input's text"
end

-- The program index of a command's words after keywords, assignments and wrappers, and the set of
-- wrapper words that take a path as data (apptainer's image, an array holding an apptainer prefix).
local function _program(words, k, arrays)
  local safe = {}
  while words[k] do
    local w = words[k]
    local lit = w.lit
    if lit and (WRAPPERS[lit]) then
      k = k + 1
    elseif lit and lit == "env" then
      k = k + 1
      while words[k] and (words[k].raw:match("^%-") or words[k].assign) do k = k + 1 end
    elseif lit and lit == "srun" then
      -- srun's options: a short one takes the next word as its value unless it is a flag
      k = k + 1
      while words[k] and words[k].raw:match("^%-") do
        local o = words[k].raw
        k = k + ((o:match("^%-%a$") and not SRUN_FLAGS[o]) and 2 or 1)
      end
    elseif lit and (lit == "timeout" or lit == "nice") then
      k = k + 1
      while words[k] and words[k].raw:match("^%-") do k = k + 1 end
      if lit == "timeout" then k = k + 1 end
    elseif lit and (lit == "apptainer" or lit == "singularity") and words[k + 1]
      and (words[k + 1].lit == "exec" or words[k + 1].lit == "run") then
      k = k + 2
      while words[k] and words[k].raw:match("^%-") do k = k + 1 end
      safe[k] = true
      k = k + 1 -- the image: a path, data
    elseif not lit and w.raw:match('^"%${([%a_][%w_]*)%[@%]}"$') and arrays[w.raw:match('^"%${([%a_][%w_]*)')] then
      safe[k] = true
      k = k + 1 -- "${RUN[@]}" where RUN is empty or an apptainer prefix
    else
      return k, safe
    end
  end
  return k, safe
end

--- Check a script (or the preamble lines as one script) against the allowlist.
---@param text string the script with each reference replaced by M.TAINT (free text) or M.DATA
---@param carriers table<string, true> variables that carry free text from the start (environment:)
---@param programs table<string, true>|nil the recipe's `programs:`
---@return string|nil err "line N: ..."
---@return table carriers every variable found to carry free text
local SHELLS = { sh = true, bash = true, dash = true, zsh = true, ksh = true }

function M.check_script(text, carriers, programs, depth)
  depth = depth or 0
  local L = _lexer(text)
  local C = {}
  for k in pairs(carriers or {}) do C[k] = true end
  -- arrays that only ever hold an apptainer prefix (or nothing): "${RUN[@]}" prog ... runs prog
  local arrays, not_wrapper = {}, {}
  for _, cmd in ipairs(L.commands) do
    for _, w in ipairs(cmd.words) do
      if w.assign and w.array then
        local first = w.array[1]
        if first and not (first.lit == "apptainer" or first.lit == "singularity") then not_wrapper[w.assign] = true end
        arrays[w.assign] = true
      end
    end
  end
  for k in pairs(not_wrapper) do arrays[k] = nil end

  local err
  local function refuse(line, msg) if not err then err = ("line %d: %s"):format(line, msg) end end

  -- carriers found by assignment; repeated until no more appear (a use may come before the assignment
  -- in the text: a function body)
  for _ = 1, 20 do
    local before = 0
    for _ in pairs(C) do before = before + 1 end
    err = nil
    for _, cmd in ipairs(L.commands) do
      local words = cmd.words
      local any = false
      for _, w in ipairs(words) do
        if _tainted(w, C) then any = true end
        for _, u in ipairs(w.uses) do
          if C[u.name] and not u.quoted and u.how ~= "output" then
            if u.how == "arith" then
              refuse(u.line, ("%s carries an input's text into arithmetic, where bash evaluates it"):format(u.name))
            else
              refuse(u.line, ('$%s carries an input\'s text and is unquoted: write "$%s"'):format(u.name, u.name))
            end
          elseif C[u.name] and u.how == "indirect" then
            refuse(u.line, ("${!%s} uses an input's text as a variable name"):format(u.name))
          end
        end
      end
      if any then
        local k = 1
        while words[k] and KEYWORDS[words[k].lit or ""] do k = k + 1 end
        local first = k
        while words[k] and words[k].assign and not words[k].redirect do k = k + 1 end
        local w1 = words[k]
        while w1 and w1.redirect do k = k + 1; w1 = words[k] end
        if cmd.kind == "arith" then
          refuse(cmd.line, "an input's text is in (( )), where bash evaluates it")
        elseif not w1 then
          -- assignment statements: the variable carries the value on
          for j = first, #words do
            local w = words[j]
            if w.assign and _tainted(w, C) then
              if w.raw:match("^[%a_][%w_]*%[") then
                refuse(w.line, "an input's text is assigned to an array element, whose subscript bash evaluates")
              else
                C[w.assign] = true
              end
            end
          end
        else
          for j = first, k - 1 do
            if _tainted(words[j], C) then
              refuse(words[j].line, ("%s is assigned before the command %s, which gets it in its environment; "
                .. "assign it on a line of its own"):format(_what(words[j], C), w1.lit or "here"))
            end
          end
          local lit = w1.lit
          if lit == "for" then
            -- for NAME in WORDS: NAME carries what the words do
            local name = words[k + 1] and words[k + 1].lit
            for j = k + 2, #words do
              if _tainted(words[j], C) and name and name:match("^[%a_][%w_]*$") then C[name] = true end
            end
          elseif lit == "case" then
            -- case WORD in: matched against the patterns, never run
            for j = k + 2, #words do
              if _tainted(words[j], C) then refuse(words[j].line, "an input's text in a case pattern") end
            end
          elseif lit == "[[" then
            refuse(w1.line, ("%s is inside [[ ]], where bash evaluates -eq, -gt ... operands as arithmetic; "
              .. "use [ ]"):format(_what(w1, C)))
          elseif lit == "export" or lit == "local" or lit == "readonly" then
            for j = k + 1, #words do
              local w = words[j]
              if _tainted(w, C) then
                local opts = false
                for m = k + 1, #words do if (words[m].lit or ""):match("^%-") then opts = true end end
                if opts or not w.assign or w.raw:match("^[%a_][%w_]*%[") then
                  refuse(w.line, ("%s is given to %s where it names a variable or an attribute is set; "
                    .. "write %s NAME=value"):format(_what(w, C), lit, lit))
                else
                  C[w.assign] = true
                end
              end
            end
          else
            local p, safe = _program(words, k, arrays)
            local pw = words[p]
            if not pw then
              -- only wrappers and the image: the tainted word is the image path
              if cmd.pipe_out then refuse(cmd.line, "a command given an input's text writes into a pipe") end
            elseif _tainted(pw, C) then
              refuse(pw.line, ("%s would run as the program"):format(_what(pw, C)))
            else
              local argv = {}
              for j = p, #words do argv[#argv + 1] = words[j].lit end
              -- arg_taint: an argument of the program; a wrapper's word may carry text only where it is a
              -- path (apptainer's image, an apptainer prefix array): an option of srun (--prolog=...),
              -- env's NAME=value or timeout's duration is not
              local arg_taint
              for j = p + 1, #words do
                if _tainted(words[j], C) and not words[j].redirect then arg_taint = words[j]; break end
              end
              for j = k, p - 1 do
                if _tainted(words[j], C) and not words[j].redirect and not safe[j] then
                  refuse(words[j].line, ("%s is given to %s, which runs the program after it"):format(
                    _what(words[j], C), words[k].lit or "a wrapper"))
                end
              end
              local tainted_arg = arg_taint
              if tainted_arg then
                if not pw.lit then
                  refuse(tainted_arg.line, ("%s is an argument of a program that is not a plain name"):format(
                    _what(tainted_arg, C)))
                else
                  local ok, why = _data_program(argv, 1, programs)
                  if not ok then
                    refuse(tainted_arg.line, ("%s is an argument of %s, and %s"):format(_what(tainted_arg, C),
                      pw.lit, why))
                  elseif _base(pw.lit) == "printf" then
                    local f = p + 1
                    while words[f] and words[f].raw:match("^%-") do
                      if words[f].raw:match("^%-v") and (_tainted(words[f], C)
                        or (words[f].raw == "-v" and words[f + 1] and _tainted(words[f + 1], C))) then
                        refuse(words[f].line, "an input's text names printf -v's variable, whose subscript bash evaluates")
                      end
                      f = f + (words[f].raw == "-v" and 2 or 1)
                    end
                    if words[f] and _tainted(words[f], C) then
                      refuse(words[f].line, "an input's text is printf's format, which printf interprets")
                    end
                  elseif _base(pw.lit) == "[" or _base(pw.lit) == "test" then
                    for j = p + 1, #words - 1 do
                      if (words[j].lit == "-v" or words[j].lit == "-R") and _tainted(words[j + 1], C) then
                        refuse(words[j].line, ("an input's text after %s %s names a variable, whose subscript bash "
                          .. "evaluates"):format(pw.lit, words[j].lit))
                      end
                    end
                  end
                end
              end
              if cmd.pipe_out and arg_taint then
                refuse(cmd.line, ("a command given %s writes into a pipe (| ...), which may feed it to an "
                  .. "interpreter"):format(_what(arg_taint, C)))
              end
            end
          end
        end
      end
      -- shell code given as a literal (bash -c '...', eval '...'): checked as a script of its own, with
      -- the same carriers (exported ones reach it), so '"$IMAGE"' there is data and 'eval "$M"' is not
      do
        local k = 1
        while words[k] and (KEYWORDS[words[k].lit or ""] or words[k].assign) do k = k + 1 end
        local p = words[k] and _program(words, k, arrays)
        local pw = p and words[p]
        local code
        if pw and pw.lit and SHELLS[_base(pw.lit)] then
          for j = p + 1, #words do
            local o = words[j].lit
            if o and o:match("^%-%a*c%a*$") then code = words[j + 1]; break end
            if not (o and o:match("^%-")) then break end
          end
          code = code and { code }
        elseif pw and (pw.lit == "eval" or pw.lit == "trap") then
          code = {}
          for j = p + 1, #words do code[#code + 1] = words[j] end
        end
        local texts = {}
        for _, w in ipairs(code or {}) do
          if not w.lit then texts = nil; break end
          texts[#texts + 1] = w.lit
        end
        if texts and #texts > 0 and depth < 4 then
          local inner = table.concat(texts, " ")
          local ierr = M.check_script(inner, C, programs, depth + 1)
          if ierr then
            local n, msg = ierr:match("^line (%d+): (.*)$")
            refuse((code[1].line or cmd.line) + (tonumber(n) or 1) - 1, ("in the shell code given to %s: %s"):format(
              pw.lit, msg or ierr))
          end
        end
      end
      -- a word given as a here-string is the command's input
      for _, w in ipairs(words) do
        if w.herestring and _tainted(w, C) then
          refuse(w.line, ("%s is a here-string (<<<), the command's input"):format(_what(w, C)))
        end
      end
    end
    for _, a in ipairs(L.arith) do
      if C[a.name] then
        refuse(a.line, ("%s carries an input's text into arithmetic, where bash evaluates it"):format(a.name))
      end
    end
    -- a quoted heredoc naming a carrier: a script fed to an interpreter, which would expand it there
    for _, u in ipairs(L.literal_uses) do
      if C[u.name] then
        refuse(u.line, ("$%s (it carries an input's text) is written inside a quoted heredoc, text a command "
          .. "may run as code"):format(u.name))
      end
    end
    for _, h in ipairs(L.heredoc_uses) do
      if h.direct or C[h.name] then
        refuse(h.line, ("%s is in a heredoc body, the input of a command"):format(h.direct and "an input's text"
          or "$" .. h.name .. " (it carries an input's text)"))
      end
    end
    local after = 0
    for _ in pairs(C) do after = after + 1 end
    if after == before then break end
  end
  return err, C
end

return M
