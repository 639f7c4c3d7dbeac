-- luacheck: std lua54
-- Request bodies (obleth.util.json.decode, strict) on any text: a value or nil, err; never a
-- raise; what decodes encodes, and decodes again to the same text.
local json = require "obleth.util.json"

return function(data)
  local v, err = json.decode(data)
  if v == nil and err ~= nil then
    assert(type(err) == "string", "error is a message")
    return
  end
  local text = json.encode(v)
  local again, aerr = json.decode(text)
  assert(aerr == nil, "its own encoding does not decode")
  assert(json.encode(again) == text, "not stable")
end
