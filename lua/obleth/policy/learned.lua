--- Learned defaults: when a recipe's recent launches all used one account and
-- one QoS, the launch form starts with them, marked `learned`.
-- Pure function of data; built by a factory so an operator override can
-- change DEFAULTS (policy.d/learned.lua: `return {DEFAULTS = {window = 5}}`).
local factory = require "obleth.policy.factory"
local function new(defaults)
  local M = factory.instance(defaults, new)

  --- Learn account and QoS from a recipe's recent launches.
  ---@param launches {id: any, account: string|nil, qos: string|nil}[] newest first
  ---@param opts {window: integer|nil}|nil window = how many recent launches must agree (default 3)
  ---@return {account: string, qos: string|nil, provenance: "learned", evidence: any[]}|nil decision
  ---@return {reason: "too_few"|"mixed"|"no_account", evidence: any[]}|nil why not
  function M.defaults(launches, opts)
    local n = (opts and opts.window) or M.DEFAULTS.window
    if type(n) ~= "number" or n < 1 then error("learned.defaults: window must be at least 1", 2) end
    launches = launches or {}
    local ids = {}
    for i = 1, math.min(n, #launches) do ids[i] = launches[i].id end
    if #launches < n then
      return nil, { reason = "too_few", evidence = ids }
    end
    local account, qos = launches[1].account, launches[1].qos
    if account == nil or account == "" then return nil, { reason = "no_account", evidence = ids } end
    for i = 2, n do
      if launches[i].account ~= account or launches[i].qos ~= qos then
        return nil, { reason = "mixed", evidence = ids }
      end
    end
    return { account = account, qos = qos, provenance = "learned", evidence = ids }
  end

  return M
end

return new({ window = 3 })
