-- One error shape (docs/errors.md): an expected failure is nil, {code = "<short string>", message,
-- field?}; Slurm's error number is `slurm_code`, never `code`, and no error carries `kind`. Only leaf
-- parsers return nil, "message" (their callers wrap it). This spec is the one owner of that rule: it
-- reads the product's sources, so a new string error, a `kind` field or a three-value failure shows
-- up here with its file, line and function.

-- Leaf parsers: file → the functions that may return nil, "message" (true: every function of the
-- file). Each file says so in a comment at its top.
local LEAF = {
  ["lua/obleth/util/hostlist.lua"] = true,
  ["lua/obleth/util/timefmt.lua"] = true,
  ["lua/obleth/util/json.lua"] = { ["M.decode"] = true },
  ["lua/obleth/util/shell.lua"] = { ["M.quote"] = true, ["M.join"] = true },
  ["lua/obleth/recipe/templates.lua"] = { ["M.parse_template"] = true, _parse_argv_element = true },
  ["lua/obleth/recipe/validate.lua"] = { _check_typed_value = true, _check_rule = true },
  ["lua/obleth/util/args.lua"] = { ["M.parse"] = true },
  ["lua/obleth/testing/cli.lua"] = { ["M.parse"] = true, _convert = true },
}

-- Not errors: a policy predicate answers ok (true / false / nil = unknown) with the sentence the
-- form shows; its signature is documented for overrides (docs/policy.md).
local PREDICATES = {
  ["lua/obleth/policy/validate.lua"] = { ["M.partition_takes_user"] = true },
}

local function files(dir, ext)
  local out = {}
  local p = assert(io.popen(("find %s -type f -name '*.%s' | sort"):format(dir, ext)))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

local function lines_of(path)
  local out = {}
  for line in assert(io.open(path)):lines() do out[#out + 1] = line end
  return out
end

-- The functions a line is inside, innermost first, by their names as written (a definition
-- above the line that is indented less than everything between).
local function enclosing(lines, i)
  local out, limit = {}, #lines[i]:match("^%s*")
  for j = i - 1, 1, -1 do
    local l = lines[j]
    local indent = #l:match("^%s*")
    if indent < limit and l:find("%S") then
      local name = l:match("^%s*local%s+function%s+([%w_]+)") or l:match("^%s*function%s+([%w_.:]+)")
        or l:match("^%s*local%s+([%w_]+)%s*=%s*function") or l:match("^%s*([%w_.]+)%s*=%s*function")
      if name then out[#out + 1] = name end
      if not l:match("^%s*end") and not l:match("^%s*else") then limit = indent end
    end
    if limit == 0 then break end
  end
  if #out == 0 then out[1] = "(main chunk)" end
  return out
end

local function any_of(names, set)
  if set == true then return true end
  for _, n in ipairs(names) do if set and set[n] then return true end end
  return false
end

-- `return nil, "..."`, `return nil, ("..."):format(...)`, `return nil, x .. "..."` and the three-value
-- `return nil, "code", "message"`.
local function string_error(line)
  local rest = line:match("return%s+nil%s*,%s*(.*)$")
  if not rest then return false end
  return rest:match("^[\"'%(]") ~= nil or rest:match("^%[%[") ~= nil or rest:match("^[%w_.]+%s*%.%.") ~= nil
end

-- Every line of `paths` that test(line, lines, i, path) flags, as "path:line (note): text" (a
-- string answer is the note). Comment lines are passed over.
local function offending(paths, test)
  local bad = {}
  for _, path in ipairs(paths) do
    local lines = lines_of(path)
    for i, line in ipairs(lines) do
      local hit = not line:match("^%s*%-%-") and test(line, lines, i, path)
      if hit then
        bad[#bad + 1] = ("%s:%d%s: %s"):format(path, i, type(hit) == "string" and " (" .. hit .. ")" or "",
          line:match("^%s*(.-)%s*$"))
      end
    end
  end
  return bad
end

describe("one error shape", function()
  local sources = files("lua/obleth", "lua")

  it("reads the product's Lua sources", function()
    assert.is_true(#sources > 50, "found only " .. #sources .. " files under lua/obleth")
  end)

  it("no function outside the listed leaf parsers returns nil and a string", function()
    assert.same({}, offending(sources, function(line, lines, i, path)
      if not string_error(line) then return false end
      local fns = enclosing(lines, i)
      return not (any_of(fns, LEAF[path]) or any_of(fns, PREDICATES[path])) and table.concat(fns, " in ")
    end))
  end)

  it("every listed leaf parser still exists and still says so at its top", function()
    for path, fns in pairs(LEAF) do
      local src = assert(io.open(path), path):read("a")
      assert.truthy(src:sub(1, 1500):find("leaf parser", 1, true), path .. " does not say it is a leaf parser")
      if fns ~= true then
        for fn in pairs(fns) do
          local plain = fn:gsub("^M%.", "")
          assert.truthy(src:find("function " .. fn .. "(", 1, true) or src:find("function " .. plain .. "(", 1, true),
            path .. ": no function " .. fn)
        end
      end
    end
  end)

  it("no error table carries `kind`, and no code reads err.kind", function()
    local function any(patterns)
      return function(line)
        for _, pat in ipairs(patterns) do if line:find(pat) then return true end end
        return false
      end
    end
    assert.same({}, offending(sources, any { "nil%s*,%s*{%s*kind%s*=", "[%w_]*err[%w_]*%.kind", "res%.kind",
      "{%s*kind%s*=%s*[%w_.]*kind", "{%s*kind%s*=%s*\"[%w_]+\"%s*,%s*message" }))
    assert.same({}, offending(files("host", "c"), any { 'setfield%(%s*[%w_]+%s*,%s*%-?%d+%s*,%s*"kind"%s*%)' }))
    assert.same({}, offending(files("web/src", "js"), any { "err%.kind", "error%.kind", "error: { kind" }))
  end)

  it("Slurm's error number travels as slurm_code: no code = <number> in the Slurm modules", function()
    local slurm_side = {}
    for _, path in ipairs(sources) do
      if path:find("^lua/obleth/slurm/") or path:find("^lua/obleth/provisioner/") then slurm_side[#slurm_side + 1] = path end
    end
    assert.same({}, offending(slurm_side, function(line)
      return line:find("[^_]code%s*=%s*%d") or line:find("[^_]code%s*=%s*[%w_]+%[%d+%]")
        or line:find("[^_]code%s*=%s*[%w_.]+%.slurm_code")
    end))
  end)
end)
