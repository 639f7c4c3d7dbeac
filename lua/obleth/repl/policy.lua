--- `policy` in `obleth repl`: the live policies (built-in modules with the
-- overrides of the policy directory, as the provisioner and obleth serve load
-- them), callable on live facts, and `try(path)` to see what an edited policy
-- file would change before installing it.
--
-- The decisions are the policy modules' own and obleth.deployment's (partition
-- fit with accounts, suggestions) and obleth.provisioner.plan's (the pass);
-- this module gathers nothing itself: the REPL hands it `live`, which reads
-- the cluster and the Management API.
local dryrun = require "obleth.repl.dryrun"
local launch = require "obleth.deployment"
local fmt = require "obleth.util.format"

local M = {}

-- A value the REPL prints with `render` instead of the plain pretty-printer.
local function shown(v, render)
  return setmetatable(v, { __repl = render })
end
M.shown = shown

local function _fit_text(f)
  if not f then return "partition not found" end
  if f.fits then
    return ("fits: %d fitting node(s), %d idle"):format(f.fitting_nodes or 0, f.idle_fitting_nodes or 0)
  end
  return "does not fit: " .. table.concat(f.reasons or {}, "; ")
end

local function _errors_text(errs)
  if not errs or #errs == 0 then return "ok" end
  local parts = {}
  for _, e in ipairs(errs) do parts[#parts + 1] = ("%s: %s"):format(e.field or "?", e.message) end
  return table.concat(parts, "; ")
end

local function _sugg_text(s)
  if not s or #s == 0 then return "none" end
  local parts = {}
  for _, x in ipairs(s) do parts[#parts + 1] = x.message end
  return table.concat(parts, "; ")
end

--- Render partition fits as rows.
---@param fits table[] obleth.deployment.partitions' answer
---@return string
function M.fits_table(fits)
  local rows = {}
  for _, f in ipairs(fits) do
    rows[#rows + 1] = { f.partition .. (f.default and "*" or ""), f.fits and "yes" or "no",
      ("%d/%d/%d"):format(f.fitting_nodes or 0, f.idle_fitting_nodes or 0, f.free_fitting_nodes or 0),
      f.accounts and table.concat(f.accounts, ",") or "-", table.concat(f.reasons or {}, "; ") }
  end
  return fmt.table({ "PARTITION", "FITS", "FITTING/IDLE/FREE", "ACCOUNTS", "WHY NOT" }, rows)
end

--- Render suggestions as rows (field, value, message, how many runs are the evidence).
---@param list table[]
---@return string
function M.suggestions_table(list)
  if #list == 0 then return "no suggestions (nothing in the recent runs calls for a change)" end
  local rows = {}
  for _, x in ipairs(list) do
    rows[#rows + 1] = { x.field or "-", x.value == nil and "-" or tostring(x.value), x.message, #(x.evidence or {}) }
  end
  return fmt.table({ "FIELD", "VALUE", "WHY", "RUNS" }, rows)
end

-- What a deployment looks like under one set of policies.
local function _deployment(get, m, facts, launches)
  local s = m.spec or {}
  local fits = launch.partitions(get, s, facts)
  local mine
  for _, f in ipairs(fits) do if f.partition == s.partition then mine = f end end
  local errs = get("validate").check({ partition = s.partition, account = s.account, qos = s.qos,
    time_limit = s.time_limit }, facts)
  return { fit = _fit_text(mine), validation = _errors_text(errs),
    suggestions = _sugg_text(launch.suggestions(get, launches or {}, s, facts)) }
end

--- The policy handle.
---@param set table the policy set (obleth.policy: get, reload, errors; process-wide)
---@param live {pass: fun(): (table|nil, any), cluster: fun(): (table|nil, any),
---  launches: fun(opts: table): (table[]|nil, any)}
---  pass(ends|nil) → {now, snapshot, jobs, job_by_id} (ends: each slot's job ends to read);
---  cluster() → {partitions, nodes, qos, associations}
---@return table
function M.new(set, live)
  local P = { names = require("obleth.policy").NAMES }

  local function need(v, err, what)
    if v == nil then
      error(("%s: %s"):format(what or "policy", type(err) == "table" and tostring(err.message) or tostring(err)), 3)
    end
    return v
  end

  --- The module in use for a policy (overrides from the policy directory applied).
  ---@param name string "learned"|"suggestions"|"partition_fit"|"validate"|"rollover"|"lost"|"failures"|"scale"
  ---@return table
  function P.get(name) set.reload() return set.get(name) end

  --- Errors of override files that did not load (the previous version stays in use).
  ---@return table<string, {path: string, message: string}>
  function P.errors() set.reload() return set.errors() end

  --- Partition fit of a replica on every partition, with live partitions and nodes.
  ---@param req table|string|integer a request {nodes, gpus_per_node, gpu_type, cpus_per_node, memory_per_node
  ---  (MiB), constraint, exclude, time_limit (minutes), account, qos}, or a model name / id (its spec)
  ---@return table[] fits {partition, fits, reasons, fitting_nodes, idle_fitting_nodes, accounts, ...}
  function P.partition_fit(req)
    set.reload()
    local facts = need(live.cluster())
    if type(req) ~= "table" then
      local f = need(live.pass())
      local found
      for _, m in ipairs(f.snapshot.models or {}) do
        if m.name == req or m.id == req then found = m.spec end
      end
      req = need(found, ("no model %s with a managed spec"):format(tostring(req)), "policy.partition_fit")
    end
    return shown(launch.partitions(set.get, req, facts), M.fits_table)
  end

  --- Suggestions from past runs for a recipe's next launch (never applied), from its launch history and
  --- the values of its newest launch.
  ---@param recipe_id string e.g. "smoke-test"
  ---@return table[] {kind, field, value, message, evidence}
  function P.suggestions(recipe_id)
    set.reload()
    local facts = need(live.cluster())
    local launches = need(live.launches { recipe_id = recipe_id, limit = 50 })
    local values = launches[1] and launches[1].settings or {}
    return shown(launch.suggestions(set.get, launches, values, facts), M.suggestions_table)
  end

  --- Validation of a model's spec before submit (what Slurm would accept but never run).
  ---@param model string|integer a model name or id
  ---@return table[] errors {field, code, message} (empty when fine)
  function P.validate(model)
    set.reload()
    local facts = need(live.cluster())
    local f = need(live.pass())
    for _, m in ipairs(f.snapshot.models or {}) do
      if (m.name == model or m.id == model) and m.spec then
        local s = m.spec
        return shown(set.get("validate").check({ partition = s.partition, account = s.account, qos = s.qos,
          time_limit = s.time_limit }, facts), function(errs)
            return #errs == 0 and "ok: nothing Slurm would accept but never run" or _errors_text(errs)
          end)
      end
    end
    error(("policy.validate: no model %s with a managed spec"):format(tostring(model)), 2)
  end

  --- Load an edited policy file without installing it and show what would change: the dry run of the
  --- next pass and each deployment's partition fit, validation and suggestions, under the policy in use
  --- (OLD) and the file (NEW). A file that does not load shows its error with the line.
  ---@param path string e.g. "/tmp/lost.lua"; the policy is named by the file name
  ---@param name string|nil the policy, when the file name is not NAME.lua
  ---@return table {policy, path, error|nil, pass = rows, deployments = rows}
  function P.try(path, name)
    if type(path) ~= "string" then error("policy.try: give the path of an edited policy file", 2) end
    name = name or path:match("([%w_]+)%.lua$")
    set.reload()
    local mod, err = require("obleth.policy").load_file(name, path)
    local res = { policy = name, path = path }
    if not mod then
      res.error = err.message
      return shown(res, M.render_try)
    end
    local function new_get(n) if n == name then return mod end return set.get(n) end
    -- each slot's ends as far back as either version of the lost rule reads
    local f = need(live.pass(math.max(set.get("lost").window(), new_get("lost").window())))
    local old = dryrun.run { now = f.now, snapshot = f.snapshot, jobs = f.jobs, job_by_id = f.job_by_id,
      lost = set.get("lost"), rollover = set.get("rollover"), scale = set.get("scale") }
    local new = dryrun.run { now = f.now, snapshot = f.snapshot, jobs = f.jobs, job_by_id = f.job_by_id,
      lost = new_get("lost"), rollover = new_get("rollover"), scale = new_get("scale") }
    local a, b = dryrun.by_slot(old), dryrun.by_slot(new)
    local keys, seen = {}, {}
    for _, t in ipairs({ a, b }) do
      for k in pairs(t) do if not seen[k] then seen[k] = true; keys[#keys + 1] = k end end
    end
    table.sort(keys)
    res.pass = {}
    for _, k in ipairs(keys) do
      res.pass[#res.pass + 1] = { what = k, old = a[k] or "-", new = b[k] or "-", changed = a[k] ~= b[k] }
    end
    res.new_actions = {}
    for _, x in ipairs(new.actions) do
      local k = ("%s slot %s"):format(x.model, tostring(x.slot or "-"))
      if a[k] ~= b[k] then res.new_actions[#res.new_actions + 1] = x end
    end
    res.deployments = {}
    local facts, cerr = live.cluster()
    if not facts then
      res.cluster_error = type(cerr) == "table" and cerr.message or tostring(cerr)
    else
      for _, m in ipairs(f.snapshot.models or {}) do
        if m.spec then
          local launches = live.launches(m.spec.recipe_id and { recipe_id = m.spec.recipe_id, limit = 50 }
            or { model_id = m.id, limit = 50 }) or {}
          local o, n = _deployment(set.get, m, facts, launches), _deployment(new_get, m, facts, launches)
          for _, key in ipairs({ "fit", "validation", "suggestions" }) do
            res.deployments[#res.deployments + 1] = { model = m.name,
              check = key == "fit" and ("fit (" .. tostring(m.spec.partition) .. ")") or key,
              old = o[key], new = n[key], changed = o[key] ~= n[key] }
          end
        end
      end
    end
    return shown(res, M.render_try)
  end

  return P
end

--- Text for policy.try's answer: OLD and NEW side by side, changed rows marked "*".
---@param r table
---@return string
function M.render_try(r)
  local out = {}
  if r.error then
    out[#out + 1] = ("policy.try %s: %s does not load (nothing changed; the policy in use stays):"):format(
      tostring(r.policy), r.path)
    out[#out + 1] = "  " .. tostring(r.error)
    return table.concat(out, "\n")
  end
  out[#out + 1] = ("policy.try %s from %s (not installed)"):format(r.policy, r.path)
  out[#out + 1] = ""
  local rows = {}
  for _, p in ipairs(r.pass) do rows[#rows + 1] = { p.changed and "*" or "", p.what, p.old, p.new } end
  out[#out + 1] = #rows > 0 and fmt.table({ "", "NEXT PASS", "OLD", "NEW" }, rows) or "next pass: nothing to do either way"
  if #r.new_actions > 0 then
    out[#out + 1] = ""
    out[#out + 1] = "with NEW, the next pass would:"
    local arows = {}
    for _, a in ipairs(r.new_actions) do
      arows[#arows + 1] = { a.action .. (a.job_id and a.action == "mark lost" and (" (job " .. a.job_id .. ")") or ""),
        a.model, a.slot or "-", a.rule or "", a.facts or "" }
    end
    out[#out + 1] = fmt.table({ "WOULD", "MODEL", "SLOT", "RULE", "FACTS" }, arows)
  end
  out[#out + 1] = ""
  if r.cluster_error then
    out[#out + 1] = "deployments: cluster facts unavailable: " .. r.cluster_error
  elseif #r.deployments > 0 then
    local drows = {}
    for _, d in ipairs(r.deployments) do drows[#drows + 1] = { d.changed and "*" or "", d.model, d.check, d.old, d.new } end
    out[#out + 1] = fmt.table({ "", "DEPLOYMENT", "CHECK", "OLD", "NEW" }, drows)
  else
    out[#out + 1] = "no deployments"
  end
  return table.concat(out, "\n")
end

return M
