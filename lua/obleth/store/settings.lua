--- obleth.store.settings — settings: methods of the store object (obleth.store.base), in the SQL every
-- backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local _abort, _now, _dec = util.abort, util.now, util.dec

---------------------------------------------------------------------------
-- settings and provisioner status
---------------------------------------------------------------------------

--- The stored Slurm settings (secrets in clear), or nil when never saved.
function Store:get_settings(name)
  local r = self:_one("SELECT value, updated_at FROM settings WHERE name = ?", name or "slurm")
  if not r then return nil end
  local s = _dec(r.value)
  s.updated_at = r.updated_at
  return s
end

--- Replace the Slurm settings. check(current) runs inside the transaction and
--- may return nil, err to refuse (e.g. disabling while replicas run).
function Store:put_settings(value, check, name)
  name = name or "slurm"
  return self:transaction(function()
    if check then
      local ok, err = check(self:get_settings(name), self)
      if not ok then _abort(err.code, err.message, err.field, err.extra) end
    end
    local v = {}
    for k, x in pairs(value) do if k ~= "updated_at" then v[k] = x end end
    self:_x([[INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?)
      ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at]], name, json.encode(v), _now())
    return self:get_settings(name)
  end)
end
