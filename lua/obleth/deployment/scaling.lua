--- obleth.deployment.scaling — each managed model's current and desired replicas and why, as `obleth serve`
-- sees them now: a fixed spec wants its `replicas` (0 when paused), an autoscaled one what the scale
-- policy decides on the router's load window and the live replicas (the same policy, on the same kind
-- of facts, as the provisioner's pass; docs/autoscaling.md). For /metrics and the deployment page.
local M = {}

-- replica states that hold or wait for a job
local LIVE = { pending = true, submitted = true, starting = true, healthy = true, unhealthy = true }

--- One model's row.
---@param spec table the managed spec (with model_name)
---@param replicas table[] the model's live replica rows
---@param load table|nil obleth.router.load (nil: no window, a fresh one is assumed)
---@param scale table the scale policy module (decide)
---@param now number epoch seconds
---@return {model: string, current: integer, desired: integer, autoscaled: boolean, change: string|nil,
---  reason: string|nil, wake: table|nil}
function M.row(spec, replicas, load, scale, now)
  local live = {}
  for _, r in ipairs(replicas) do
    -- a successor (walltime rollover) takes its predecessor's place: one replica (JSON null: none)
    local succ = r.successor_of
    if LIVE[r.state] and (succ == nil or type(succ) == "userdata") then live[#live + 1] = r end
  end
  local name = spec.model_name
  if type(spec.autoscale) ~= "table" then
    local desired = spec.enabled == false and 0 or (tonumber(spec.replicas) or 1)
    return { model = name, current = #live, desired = desired, autoscaled = false }
  end
  if spec.enabled == false then
    return { model = name, current = #live, desired = 0, autoscaled = true, change = "none",
      reason = "the deployment is paused" }
  end
  local view = load and load:view(name, now - (scale.settings(spec.autoscale).scale_down_after or 300)
    - (load.bucket or 10)) or { inflight = 0, queued = 0, observed_since = now, samples = {} }
  local d = scale.decide({ now = now, autoscale = spec.autoscale, replicas = live, load = view })
  return { model = name, current = d.current, desired = d.desired, autoscaled = true, change = d.change,
    reason = d.reason, wake = d.wake, evidence = d.evidence }
end

--- Every managed model's row.
---@param store table obleth.store (list_specs, list_replicas)
---@param load table|nil obleth.router.load
---@param scale table the scale policy module
---@param now number
---@return table[] rows, by model id
function M.rows(store, load, scale, now)
  local by_model = {}
  for _, r in ipairs(store:list_replicas({ live = true })) do
    by_model[r.model_id] = by_model[r.model_id] or {}
    table.insert(by_model[r.model_id], r)
  end
  local out = {}
  for _, spec in ipairs(store:list_specs()) do
    out[#out + 1] = M.row(spec, by_model[spec.model_id] or {}, load, scale, now)
  end
  return out
end

return M
