-- luacheck: std lua54
-- obleth.jsonscan.elements (host/jsonscan.c, the provisioner's reader of Slurm's job listing) on any
-- text: never a raise; what it accepts, lua-cjson decodes too, and each element it answers is one
-- JSON value whose decoding is the same element of cjson's decoding of the whole text.
local jsonscan = require "obleth.jsonscan"
local cjson = require "cjson"

local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b or (a ~= a and b ~= b) end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

return function(data)
  local ok, texts = jsonscan.elements(data, "jobs")
  -- element_hashes: the same answer, as places in the text (and equal texts, equal hashes)
  local hok, hashes, firsts, lasts = jsonscan.element_hashes(data, "jobs")
  assert(hok == ok, "element_hashes and elements disagree on the text")
  if ok and texts then
    assert(#hashes == #texts and #firsts == #texts and #lasts == #texts, "not one place per element")
    local by = {}
    for i, t in ipairs(texts) do
      assert(data:sub(firsts[i], lasts[i]) == t, "a place is not the element's text")
      assert(#hashes[i] == 16, "a hash is not 16 bytes")
      if by[t] then assert(by[t] == hashes[i], "equal texts, different hashes") end
      by[t] = hashes[i]
    end
  elseif ok then
    assert(hashes == nil, "hashes for a member that elements answers none for")
  end
  if not ok or select(2, data:gsub("[%[{]", "")) >= 900 then return end -- cjson's depth limit
  local dok, doc = pcall(cjson.decode, data)
  assert(dok, "jsonscan.elements accepted a text cjson refuses")
  local list = type(doc) == "table" and doc.jobs
  if texts == nil then
    assert(type(list) ~= "table" or list[1] == nil, "no elements answered for an array")
    return
  end
  assert(type(list) == "table", "elements answered for a member that is not an array")
  assert(#texts == #list, "not as many elements as cjson decodes")
  for i, t in ipairs(texts) do
    local eok, v = pcall(cjson.decode, t)
    assert(eok, "an element is not one JSON text")
    assert(same(v, list[i]), "an element decodes to another value")
  end
end
