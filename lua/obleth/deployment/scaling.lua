--- obleth.deployment.scaling — each managed model's current and desired replicas and why, as `obleth serve`
-- sees them now: a fixed spec wants its `replicas` (0 when paused), an autoscaled one what the scale
-- policy decides on the router's load window and the live replicas (the same policy, on the same kind
-- of facts, as the provisioner's pass; docs/autoscaling.md). For /metrics and the deployment page.
local M = {}

-- replica states that hold or wait for a job
local LIVE = { pending = true, submitted = true, starting = true, healthy = true, unhealthy = true }
-- the same, as the list Store:replica_counts takes (made once)
local LIVE_LIST = {}
for s in pairs(LIVE) do LIVE_LIST[#LIVE_LIST + 1] = s end
table.sort(LIVE_LIST)

-- a fixed spec's row: it wants its replicas, none while paused
local function fixed_row(spec, current)
  return { model = spec.model_name, model_id = spec.model_id, current = current, autoscaled = false,
    desired = spec.enabled == false and 0 or (tonumber(spec.replicas) or 1) }
end

--- One model's row.
---@param spec table the managed spec (with model_name)
---@param replicas table[] the model's live replica rows
---@param load table|nil obleth.router.load (nil: no window, a fresh one is assumed)
---@param scale table the scale policy module (decide)
---@param now number epoch seconds
---@return {model: string, model_id: integer|nil, current: integer, desired: integer, autoscaled: boolean, change: string|nil,
---  reason: string|nil, wake: table|nil}
function M.row(spec, replicas, load, scale, now)
  local live = {}
  for _, r in ipairs(replicas) do
    -- a successor (walltime rollover) takes its predecessor's place: one replica (JSON null: none)
    local succ = r.successor_of
    if LIVE[r.state] and (succ == nil or type(succ) == "userdata") then live[#live + 1] = r end
  end
  local name = spec.model_name
  if type(spec.autoscale) ~= "table" then return fixed_row(spec, #live) end
  if spec.enabled == false then
    return { model = name, model_id = spec.model_id, current = #live, desired = 0, autoscaled = true, change = "none",
      reason = "the deployment is paused" }
  end
  local view = load and load:view(name, now - (scale.settings(spec.autoscale).scale_down_after or 300)
    - (load.bucket or 10)) or { inflight = 0, queued = 0, observed_since = now, samples = {} }
  local d = scale.decide({ now = now, autoscale = spec.autoscale, replicas = live, load = view })
  return { model = name, model_id = spec.model_id, current = d.current, desired = d.desired, autoscaled = true,
    change = d.change,
    reason = d.reason, wake = d.wake, evidence = d.evidence }
end

--- Every managed model's row, or one page of them.
---
--- The database counts a fixed spec's replicas (Store:replica_counts over LIVE); only an autoscaled
--- model's live replicas are read as rows (the scale policy reads their states and Slurm's estimated
--- starts). With `cache` (a table the caller keeps between calls), a spec is decoded again only when its
--- generation moved (Store:spec_generations): a call reads no spec text and no replica row of a fixed
--- spec that did not change. The cached specs are for the scaling only (their provision_error and
--- launch_id are as of their generation's first read). With `page` {after, limit}, only the first
--- `limit` managed models with an id above `after` (a caller that yields to the event loop between pages).
---@param store table obleth.store (spec_generations, get_spec, replica_counts, list_replicas)
---@param load table|nil obleth.router.load
---@param scale table the scale policy module
---@param now number
---@param cache table|nil decoded specs by model id, kept by the caller
---@param page {after: integer|nil, limit: integer}|nil
---@return table[] rows by model id
---@return integer|nil next the `after` of the next page; nil: this was the last
function M.rows(store, load, scale, now, cache, page)
  cache = cache or {}
  local after = page and page.after or 0
  local gens = store:spec_generations(after, page and page.limit)
  local last = #gens > 0 and gens[#gens].model_id or nil
  local more = page ~= nil and last ~= nil and #gens >= page.limit
  local counts = last and store:replica_counts(LIVE_LIST, after + 1, last) or {}
  local out, seen = {}, {}
  for _, g in ipairs(gens) do
    local id = g.model_id
    seen[id] = true
    local spec = cache[id]
    if not spec or spec.generation ~= g.generation or spec.model_name ~= g.model_name then
      spec = store:get_spec(id)
      cache[id] = spec
    end
    if spec then
      if type(spec.autoscale) == "table" then
        out[#out + 1] = M.row(spec, store:list_replicas({ model_id = id, live = true }), load, scale, now)
      else
        out[#out + 1] = fixed_row(spec, counts[id] or 0)
      end
    end
  end
  -- forget the cached specs of this page's range that are gone (the last page's range has no end)
  for id in pairs(cache) do
    if not seen[id] and id > after and (not more or id <= last) then cache[id] = nil end
  end
  return out, more and last or nil
end

return M
