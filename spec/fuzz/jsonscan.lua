-- luacheck: std lua54
-- obleth.jsonscan (host/jsonscan.c, the router's body reader) on any text: never a
-- raise; what it accepts as one JSON object, lua-cjson decodes too (it promises as much).
local jsonscan = require "obleth.jsonscan"
local cjson = require "cjson"

return function(data)
  local ok, model, stream = jsonscan.fields(data, "model", "stream")
  -- (cjson's depth limit is 1000, jsonscan's too: compare only texts with fewer opening brackets)
  if ok and select(2, data:gsub("[%[{]", "")) < 900 then
    assert(pcall(cjson.decode, data), "jsonscan accepted a text cjson refuses")
  end
  if ok then
    assert(model == nil or type(model) ~= "table", "model is a scalar")
    assert(stream == nil or type(stream) ~= "table", "stream is a scalar")
  end
end
