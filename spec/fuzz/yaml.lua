-- luacheck: std lua54
-- obleth.yaml.decode (host/yaml.c on libyaml) on any text: a value, or nil and an error
-- table with a code and a position; never a raise. Positions point into the text.
local yaml = require "obleth.yaml"

return function(data)
  for _, opts in ipairs({ {}, { positions = true } }) do
    local v, e = yaml.decode(data, opts)
    if v == nil then
      assert(type(e) == "table" and type(e.code) == "string" and type(e.message) == "string", "error shape")
      assert(e.line == nil or (math.type(e.line) == "integer" and e.line >= 1), "error line")
    end
  end
  local all, e = yaml.decode_all(data)
  assert(all ~= nil or type(e) == "table", "decode_all error shape")
end
