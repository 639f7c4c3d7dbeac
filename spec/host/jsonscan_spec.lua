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
  -- nor invalid UTF-8 (jsonscan refuses it, cjson does not look)
  if not utf8.len(text) then return false end
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
  it("reads the members asked for", function()
    assert.same({ true, "m", true }, { jsonscan.fields('{"model":"m","stream":true}', "model", "stream") })
    assert.same({ true, 1500 }, { jsonscan.fields('{"n": 1.5e3}', "n") })
    assert.same({ true }, { jsonscan.fields("{}", "n") })
  end)

  it("decodes escapes in names and values, surrogate pairs included", function()
    local _, v = jsonscan.fields('{"mo\\u0064el":"x\\n\\u00e9\\ud83d\\ude00\\/"}', "model")
    assert.equal("x\n\195\169\240\159\152\128/", v)
  end)

  it("refuses a lone surrogate escape, as lua-cjson does (found by make fuzz: it was accepted)", function()
    for _, text in ipairs({ '{"a":"\\udbbbx"}', '{"a":"\\udc00"}', '{"a":"\\ud83d\\u0041"}', '{"\\ud800":1}' }) do
      local ok, err = jsonscan.fields(text, "model")
      assert.is_nil(ok, text)
      assert.matches("surrogate", err)
      assert.is_false(pcall(cjson.decode, text), text)
    end
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

-- A name given twice once took the last value silently, and invalid UTF-8 passed: both are refused now.
describe("obleth.jsonscan: duplicate keys and UTF-8", function()
  it("refuses a key given twice in one object, at any depth, naming the key", function()
    for _, case in ipairs({
      { '{"model":"a","stream":false,"model":"last"}', "model" },
      { '{"messages":[{"role":"user","role":"system","content":"x"}],"model":"m"}', "role" },
      { '{"a":{"b":{"c":1,"c":2}}}', "c" },
      { '{"model":"a","mo\\u0064el":"b"}', "model" }, -- the same name, escaped
      { '{"\\u00e9":1,"\195\169":2}', "\195\169" },
    }) do
      for _, fn in ipairs({ function(t) return jsonscan.fields(t, "model") end, jsonscan.check }) do
        local ok, err, kind, key = fn(case[1])
        assert.is_nil(ok, case[1])
        assert.equal("duplicate_key", kind, case[1])
        assert.equal(case[2], key)
        assert.matches('^the key "' .. case[2]:gsub("%p", "%%%0") .. '" appears twice in one object %(at byte %d+%)$', err)
      end
    end
    -- the same name in two objects, or as a value, is fine
    assert.same({ true, "m" }, { jsonscan.fields('{"messages":[{"role":"a"},{"role":"b"}],"x":"model","model":"m"}',
      "model") })
  end)

  it("checks objects with many members through its index, also a duplicate far apart", function()
    local parts = {}
    for i = 1, 5000 do parts[i] = ('"k%d":%d'):format(i, i) end
    assert.is_true(jsonscan.check("{" .. table.concat(parts, ",") .. "}"))
    parts[#parts + 1] = '"k17":0'
    local ok, _, kind, key = jsonscan.check("{" .. table.concat(parts, ",") .. "}")
    assert.is_nil(ok)
    assert.equal("duplicate_key", kind)
    assert.equal("k17", key)
  end)

  it("shows a key's control characters, quotes and backslashes escaped, and at most 64 bytes of it", function()
    local _, err, _, key = jsonscan.check('{"a\\u0001\\"\\\\b":1,"a\\u0001\\"\\\\b":2}')
    assert.equal('a\\u0001\\"\\\\b', key)
    assert.is_nil(err:find("\1", 1, true))
    local long = ("é"):rep(40) -- 80 bytes: cut at a character boundary
    local _, _, _, k2 = jsonscan.check('{"' .. long .. '":1,"' .. long .. '":2}')
    assert.equal(("é"):rep(32) .. "...", k2)
  end)

  it("refuses a string that is not valid UTF-8, without the byte in the message", function()
    for _, bad in ipairs({ "\255", "\192\175", "\224\128\175", "\237\160\128", "\244\144\128\128", "\195",
      "\226\130" }) do
      for _, text in ipairs({ '{"model":"x' .. bad .. '"}', '{"k' .. bad .. '":1}', '["' .. bad .. '"]' }) do
        local ok, err, kind = jsonscan.check(text)
        assert.is_nil(ok, text)
        assert.equal("utf8", kind)
        assert.matches("^a string that is not valid UTF%-8 %(at byte %d+%)$", err)
        if text:sub(1, 1) == "{" then assert.is_nil(jsonscan.fields(text, "model")) end
      end
    end
    for _, good in ipairs({ "é", "€", "\u{10FFFF}", "\u{1F600}", "\u{7FF}", "\u{800}" }) do
      assert.is_true(jsonscan.check('{"s":"' .. good .. '"}'), good)
    end
  end)

  it("check takes any top level, and refuses trailing text", function()
    assert.is_true(jsonscan.check("[1, 2]"))
    assert.is_true(jsonscan.check('  "s"  '))
    assert.is_nil(jsonscan.check("[1] 2"))
    assert.is_nil(jsonscan.check(""))
  end)
end)

describe("obleth.jsonscan.usage", function()
  it("reads the tokens of the last usage object of an event stream's end, past the null ones", function()
    local tail = 'ent":"x"}}],"usage":null}\n\ndata: {"choices":[],"usage":{"prompt_tokens":3,'
      .. '"completion_tokens":16,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":1}}}\n\ndata: [DONE]\n\n'
    assert.same({ 3, 16 }, { jsonscan.usage(tail) })
  end)

  it("reads a chat completion's usage whatever the spacing, and nil for a count it lacks", function()
    assert.same({ 12, 7 }, { jsonscan.usage('{"id":"c","usage" : { "completion_tokens" : 7 ,\n "prompt_tokens":12}}') })
    assert.same({ nil, 7 }, { jsonscan.usage('{"usage":{"completion_tokens":7}}') })
  end)

  it("gives nothing for an answer without usage, nor for \"usage\" inside a string", function()
    assert.equal(0, select("#", jsonscan.usage('{"choices":[]}')))
    assert.equal(0, select("#", jsonscan.usage('{"content":"say \\"usage\\": {\\"prompt_tokens\\": 9}"}')))
    assert.equal(0, select("#", jsonscan.usage("")))
  end)
end)

-- a listing member read from a text that is no whole JSON object with it once: nil, a message, a kind
local function refuses_bad_texts(read)
  for _, bad in ipairs({ '{"jobs": [1,]}', '{"jobs": [1], "jobs": [2]}', '[1]', '{"jobs": [1]} x', "" }) do
    local ok, msg, kind = read(bad, "jobs")
    assert.is_nil(ok, bad)
    assert.is_string(msg)
    assert.is_string(kind)
  end
end

describe("obleth.jsonscan.elements", function()
  it("answers each element of the named top-level array as its own JSON text", function()
    local ok, t = jsonscan.elements('{"a": [9], "jobs" : [ {"x": [1, {}]} , 2,"s", null ], "b": {"jobs": 1}}', "jobs")
    assert.is_true(ok)
    assert.same({ '{"x": [1, {}]}', "2", '"s"', "null" }, t)
    assert.same({}, select(2, jsonscan.elements('{"jobs": []}', "jobs")))
    assert.same({ "1" }, select(2, jsonscan.elements('{"jo\\u0062s": [1]}', "jobs")))
  end)
  it("answers nil for a member missing or not an array, never a nested one", function()
    assert.same({ true }, { jsonscan.elements('{"x": {"jobs": [1]}}', "jobs") })
    assert.same({ true }, { jsonscan.elements('{"jobs": {"0": 1}}', "jobs") })
  end)
  it("checks the whole text as fields does", function() refuses_bad_texts(jsonscan.elements) end)
end)

describe("obleth.jsonscan.element_hashes", function()
  local text = '{"a": [9], "jobs" : [ {"x": [1, {}]} , 2,"s", 2 ], "b": {"jobs": 1}}'
  it("answers each element's place in the text and a 16-byte hash that only equal texts share", function()
    local ok, hashes, firsts, lasts = jsonscan.element_hashes(text, "jobs")
    assert.is_true(ok)
    local texts = {}
    for i = 1, #firsts do texts[i] = text:sub(firsts[i], lasts[i]) end
    assert.same({ '{"x": [1, {}]}', "2", '"s"', "2" }, texts)
    assert.equal(4, #hashes)
    for _, h in ipairs(hashes) do assert.equal(16, #h) end
    assert.equal(hashes[2], hashes[4]) -- "2" twice
    assert.are_not.equal(hashes[1], hashes[2])
    assert.are_not.equal(hashes[2], hashes[3])
    -- the same text in another listing: the same hash (the key is the process's)
    assert.equal(hashes[1], select(2, jsonscan.element_hashes('{"jobs": [{"x": [1, {}]}]}', "jobs"))[1])
    -- keyed: not the hash under a known key (all zeros)
    assert.are_not.equal(require("obleth.crypto").siphash128(("\0"):rep(16), "2"), hashes[2])
  end)
  it("answers as elements does for an empty, missing or bad member", function()
    assert.same({ true, {}, {}, {} }, { jsonscan.element_hashes('{"jobs": []}', "jobs") })
    assert.same({ true }, { jsonscan.element_hashes('{"jobs": {"0": 1}}', "jobs") })
    refuses_bad_texts(jsonscan.element_hashes)
  end)
end)
