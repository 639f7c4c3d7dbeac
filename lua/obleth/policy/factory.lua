--- obleth.policy.factory — how every policy module is built: an instance holds its settings in
-- `DEFAULTS`, and `instance.new(more)` builds another with `more` merged over them. The policy
-- loader (obleth.policy) writes an override's functions into such an instance, so the module's
-- own calls through `M` reach them (late binding).
local tables = require "obleth.util.tables"

local M = {}

--- A new instance table for a policy module.
---@param defaults table the instance's settings
---@param build fun(defaults: table): table the module's own builder (what `new` calls)
---@return table instance {DEFAULTS = defaults, new = function(more) -> instance}
function M.instance(defaults, build)
  local inst = { DEFAULTS = defaults }
  inst.new = function(more) return build(tables.merged(inst.DEFAULTS, more)) end
  return inst
end

--- A reader of one setting: opts[k] when the caller gives it, else the instance's DEFAULTS[k].
---@param inst table an instance made by `instance`
---@return fun(opts: table|nil, k: string): any
function M.option(inst)
  return function(opts, k)
    if opts and opts[k] ~= nil then return opts[k] end
    return inst.DEFAULTS[k]
  end
end

return M
