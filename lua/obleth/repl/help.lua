--- `help()` in `obleth repl`: the handles and their functions, with the
-- one-line docs taken from the LuaCATS annotations of the modules that
-- implement them (read from the installed sources, so they never drift), and
-- examples.
local M = {}

--- Where each handle's functions are documented: module, and the name its
--- functions are declared on (`function OBJ.name` or `function OBJ:name`).
M.HANDLES = {
  { name = "slurm", module = "obleth.slurm", obj = "Conn",
    about = "slurmrestd of the cluster the REPL is connected to (writes need --write)" },
  { name = "api", module = "obleth.repl.api", obj = "api",
    about = "the Management API, read-only, secrets masked" },
  { name = "policy", module = "obleth.repl.policy", obj = "P",
    about = "the live policies (built-in + the policy directory's overrides) on live facts" },
  { name = "plan", module = "obleth.repl", obj = "H", top = true,
    label = "(top)", about = "plan() is a dry run of the provisioner's next pass; it sends nothing" },
}

M.EXAMPLES = {
  slurm = {
    "slurm.nodes()                       -- name, state, CPUs, memory, GPUs free by type",
    "slurm.partitions()",
    "mine = {} for _, j in ipairs(slurm.jobs()) do if j.user == 'obleth' then mine[#mine+1] = j end end",
    "rows(mine, 'id', 'name', 'state.base', 'nodes')",
    "slurm.job(42)",
  },
  api = { "api.models()", "api.specs()", "api.replicas{live = true}", "api.launches{recipe_id = 'smoke-test'}",
    "api.settings()                      -- JWT and Hugging Face token masked" },
  policy = { "policy.partition_fit{gpus_per_node = 2, gpu_type = 'a100', memory_per_node = 16000}",
    "policy.partition_fit('my-model')     -- that model's spec", "policy.suggestions('smoke-test')",
    "policy.validate('my-model')", "policy.try('/tmp/lost.lua')         -- an edit, not installed" },
  plan = { "plan()", "plan().actions                      -- the rows, to filter in Lua", "help('policy.try')",
    "mine = {} for _, j in ipairs(slurm.jobs()) do if j.state.base == 'PENDING' then mine[#mine+1] = j end end",
    "rows(mine, 'id', 'name', 'partition', 'reason')   -- any list as aligned rows" },
}

--- The documented functions of a module: name → {name, args, doc (lines without "---"), summary}.
---@param module string a module name (found with package.searchpath)
---@param obj string the table the functions are declared on
---@return table<string, table>
function M.functions(module, obj)
  local path = package.searchpath(module, package.path)
  local out = {}
  if not path then return out end
  local fh = io.open(path)
  if not fh then return out end
  local doc = {}
  for line in fh:lines() do
    -- a doc block opens with "---"; plain "--" lines inside it (the house style for a long
    -- description) belong to it
    local d = line:match("^%s*%-%-%-(.*)$") or (#doc > 0 and line:match("^%s*%-%-(.*)$"))
    if d then
      doc[#doc + 1] = d
    else
      local name, args = line:match("^%s*function " .. obj .. "[.:]([%a][%w_]*)(%b())")
      if name then
        local summary
        for _, l in ipairs(doc) do
          if not l:match("^@") then summary = (summary and (summary .. " ") or "") .. l:gsub("^%s+", "")
          else break end
        end
        summary = summary or ""
        -- one line: the first sentence
        local stop = summary:find("%.%s+%u")
        local first = stop and summary:sub(1, stop) or summary
        out[name] = { name = name, args = args, doc = doc, summary = first }
      end
      doc = {}
    end
  end
  fh:close()
  return out
end

local function _sorted_keys(t)
  local k = {}
  for n in pairs(t) do k[#k + 1] = n end
  table.sort(k)
  return k
end

-- One aligned line per public function of a handle, appended to out.
function M._list(out, h, fns, indent)
  local rows, w = {}, 0
  for _, k in ipairs(_sorted_keys(fns)) do
    if k:sub(1, 1) ~= "_" then
      local call = (h.top and "" or (h.name .. ".")) .. k .. fns[k].args
      rows[#rows + 1] = { call, fns[k].summary }
      if #call > w then w = #call end
    end
  end
  for _, r in ipairs(rows) do out[#out + 1] = ("%s%-" .. w .. "s  %s"):format(indent, r[1], r[2]) end
end

local function _handle(name)
  for _, h in ipairs(M.HANDLES) do if h.name == name then return h end end
  return nil
end

--- The help text: every handle with its functions (no name), a handle's functions and examples
--- ("slurm"), or one function's whole annotation ("slurm.nodes", "policy.try").
---@param name string|nil
---@return string
function M.text(name)
  local out = {}
  if name == nil then
    out[#out + 1] = "handles (help('NAME') for one, e.g. help('policy.try')):"
    for _, h in ipairs(M.HANDLES) do
      out[#out + 1] = ("  %-7s %s"):format(h.label or h.name, h.about)
      M._list(out, h, M.functions(h.module, h.obj), "    ")
    end
    out[#out + 1] = "also: pp(v), loop, http, yaml, cjson, log, sys, slurm_lib; Tab completes names"
    return table.concat(out, "\n")
  end
  local hname, fname = tostring(name):match("^([%w_]+)[.:]?([%w_]*)%(?%)?$")
  local top = _handle("plan")
  if hname and fname == "" and M.functions(top.module, top.obj)[hname] then hname, fname = "plan", hname end
  local h = hname and _handle(hname)
  if not h then
    return ("no help for %q: try help() for the list"):format(tostring(name))
  end
  local fns = M.functions(h.module, h.obj)
  if fname == "" then
    out[#out + 1] = ("%s: %s"):format(h.label or h.name, h.about)
    M._list(out, h, fns, "  ")
  else
    local f = fns[fname]
    if not f then return ("no function %s.%s: try help(%q)"):format(h.name, fname, h.name) end
    out[#out + 1] = ("%s%s"):format(h.top and fname or (h.name .. "." .. fname), f.args)
    for _, l in ipairs(f.doc) do out[#out + 1] = "  " .. l:gsub("^%s", "") end
  end
  local ex = M.EXAMPLES[h.name]
  if ex then
    out[#out + 1] = "examples:"
    for _, e in ipairs(ex) do out[#out + 1] = "  " .. e end
  end
  return table.concat(out, "\n")
end

return M
