-- obleth.jsonscan (host/jsonscan.c): the top-level fields of a JSON text, checked
-- against lua-cjson (strict numbers) on hand-picked and generated texts.
local jsonscan = require "obleth.jsonscan"
local cjson = require("cjson").new()
cjson.decode_invalid_numbers(false)

-- Are all numbers outside strings in RFC 8259's form? (cjson reads them with strtod,
-- which also takes "01", "1." or "0.e5".)
local function strict_numbers(text)
  local i, n = 1, #text
  while i <= n do
    local c = text:sub(i, i)
    if c == '"' then
      i = i + 1
      while i <= n and text:sub(i, i) ~= '"' do
        if text:sub(i, i) == "\\" then i = i + 1 end
        i = i + 1
      end
      i = i + 1
    elseif c:match("[%-%d]") then
      local tok = text:match("^[%-%d%.eE+]+", i)
      local int, frac, exp = tok:match("^(%-?%d+)(%.?%d*)([eE]?[+-]?%d*)$")
      if not int or not (int:match("^%-?0$") or int:match("^%-?[1-9]%d*$")) then return false end
      if frac ~= "" and not frac:match("^%.%d+$") then return false end
      if exp ~= "" and not exp:match("^[eE][+-]?%d+$") then return false end
      i = i + #tok
    else
      i = i + 1
    end
  end
  return true
end

local function ref(text, ...)
  -- cjson lets raw control characters through inside strings; RFC 8259 (and Python's json) do not
  if text:find("[%z\1-\8\11\12\14-\31]") then return false end
  local ok, doc = pcall(cjson.decode, text)
  if not ok or type(doc) ~= "table" or text:match("^%s*%[") or not strict_numbers(text) then return false end
  local out = {}
  for i, name in ipairs({ ... }) do
    local v = doc[name]
    if type(v) == "table" or v == cjson.null then v = nil end
    out[i] = v
  end
  return true, out
end

describe("obleth.jsonscan.fields", function()
  it("reads the members asked for, the last of a repeated name winning", function()
    assert.same({ true, "m", true }, { jsonscan.fields('{"model":"m","stream":true}', "model", "stream") })
    assert.same({ true, "last", false },
      { jsonscan.fields('{"model":"a","stream":false,"model":"last"}', "model", "stream") })
    assert.same({ true, 1500 }, { jsonscan.fields('{"n": 1.5e3}', "n") })
    assert.same({ true }, { jsonscan.fields("{}", "n") })
  end)

  it("decodes escapes in names and values, surrogate pairs included", function()
    local _, v = jsonscan.fields('{"mo\\u0064el":"x\\n\\u00e9\\ud83d\\ude00\\/"}', "model")
    assert.equal("x\n\195\169\240\159\152\128/", v)
  end)

  it("gives nil for a missing member, null, an object or an array", function()
    local ok, a, b, c, d = jsonscan.fields('{"b":null,"c":{"x":"model"},"d":[1,"model"]}', "a", "b", "c", "d")
    assert.is_true(ok)
    assert.is_nil(a); assert.is_nil(b); assert.is_nil(c); assert.is_nil(d)
  end)

  it("never takes a nested member for a top-level one", function()
    assert.same({ true }, { jsonscan.fields('{"messages":[{"model":"inner"}],"x":{"model":"inner"}}', "model") })
  end)

  it("refuses what is not one JSON object, naming the byte", function()
    for _, text in ipairs {
      "", "   ", "[1]", '"s"', "{", '{"a"}', '{"a":}', '{"a":1,}', '{"a":1} x', "{'a':1}", '{"a":01}',
      '{"a":1.}', '{"a":-}', '{"a":tru}', '{"a":"\\x"}', '{"a":"\\u12"}', '{"a":"line\nbreak"}', '{"a":NaN}',
      '{"a":0x10}', '{"a":[1,2}', '{"a":{"b":1]}', '{a:1}',
    } do
      local ok, err = jsonscan.fields(text, "a")
      assert.is_nil(ok, text)
      assert.matches("%(at byte %d+%)$", err, nil, false, text)
    end
  end)

  it("refuses nesting deeper than 1000 levels", function()
    local deep = '{"a":' .. string.rep("[", 1001) .. string.rep("]", 1001) .. "}"
    local ok, err = jsonscan.fields(deep, "a")
    assert.is_nil(ok)
    assert.matches("deeper", err)
    local fine = '{"a":' .. string.rep("[", 900) .. string.rep("]", 900) .. ',"model":"m"}'
    assert.same({ true, "m" }, { jsonscan.fields(fine, "model") })
  end)

  it("agrees with cjson on 3000 generated texts and their mutations", function()
    math.randomseed(20261130)
    local alphabet = { "a", "model", "stream", "é", "\\", '"', "\n", "x y", "\0", "\u{1F600}" }
    local function value(depth)
      local r = math.random(depth > 3 and 6 or 8)
      if r == 1 then return math.random(-1000, 1000) end
      if r == 2 then return math.random() * 10 ^ math.random(-5, 5) end
      if r == 3 then return alphabet[math.random(#alphabet)] .. alphabet[math.random(#alphabet)] end
      if r == 4 then return math.random(2) == 1 end
      if r == 5 then return cjson.null end
      if r == 6 then return "model" end
      if r == 7 then
        local t = {}
        for i = 1, math.random(0, 4) do t[i] = value(depth + 1) end
        return t
      end
      local t = {}
      for _ = 1, math.random(0, 4) do t[alphabet[math.random(#alphabet)]] = value(depth + 1) end
      return t
    end
    local mutate_chars = { "{", "}", "[", "]", ",", ":", '"', "\\", "0", "-", "e", ".", " ", "t", "n", "\1" }
    local checked, invalid = 0, 0
    for _ = 1, 3000 do
      local doc = {}
      for _ = 1, math.random(0, 5) do doc[alphabet[math.random(#alphabet)]] = value(1) end
      if math.random(3) == 1 then doc.model = value(2) end
      if math.random(3) == 1 then doc.stream = value(2) end
      local text = cjson.encode(doc)
      if math.random(2) == 1 then
        local pos = math.random(#text + 1)
        local op = math.random(3)
        local ch = mutate_chars[math.random(#mutate_chars)]
        if op == 1 then text = text:sub(1, pos - 1) .. ch .. text:sub(pos)
        elseif op == 2 then text = text:sub(1, pos - 1) .. text:sub(pos + 1)
        else text = text:sub(1, pos - 1) .. ch .. text:sub(pos + 1) end
      end
      local want_ok, want = ref(text, "model", "stream")
      local got_ok, model, stream = jsonscan.fields(text, "model", "stream")
      assert.equal(want_ok, got_ok == true, text)
      if want_ok then
        assert.same(want, { model, stream }, text)
      else
        invalid = invalid + 1
      end
      checked = checked + 1
    end
    assert.equal(3000, checked)
    assert.is_true(invalid > 300, "too few invalid texts to mean much: " .. invalid)
  end)

  it("reads nothing from a text that ends after a member's colon", function()
    for _, t in ipairs({ '{"model":', '{"stream":', '  {"model": ', '{"model":"a","stream":' }) do
      assert.is_nil((jsonscan.fields(t, "model")))
    end
  end)
end)
