-- Binding spec for obleth.yaml (host/yaml.c). Runs inside the host's Lua 5.4,
-- where "obleth.yaml" is in package.preload. Expected lines/columns below
-- were counted by hand from the input text (1-based).
local yaml = require("obleth.yaml")

local null = yaml.null

-- Type and value, so 1 (integer) and 1.0 (float) are told apart.
local function typed(v)
  if v == null then return "null" end
  return (math.type(v) or type(v)) .. ":" .. tostring(v)
end

local function decode_ok(text, opts)
  local v, pos_or_err = yaml.decode(text, opts)
  assert(v ~= nil, "decode failed: " .. tostring(pos_or_err))
  return v, pos_or_err
end

local function decode_err(text)
  local v, err = yaml.decode(text)
  assert(v == nil, "expected an error for " .. ("%q"):format(text))
  assert.is_table(err)
  return err
end

describe("obleth.yaml", function()
  describe("module shape", function()
    it("is a table of functions with a null sentinel and sets no globals", function()
      local before = {}
      for k in pairs(_G) do before[k] = true end
      package.loaded["obleth.yaml"] = nil
      local fresh = require("obleth.yaml")
      for k in pairs(_G) do assert.is_true(before[k], "new global " .. tostring(k)) end
      assert.is_function(fresh.decode)
      assert.is_function(fresh.decode_all)
      assert.is_function(fresh.encode)
      assert.equal("userdata", type(fresh.null))
      assert.equal(yaml.null, fresh.null)
    end)

    it("yaml.null is the same value as cjson.null", function()
      local ok, cjson = pcall(require, "cjson")
      if not ok then
        pending("lua-cjson is not installed for this Lua")
        return
      end
      assert.equal(cjson.null, yaml.null)
    end)

    it("raises on misuse: non-string text, non-table options", function()
      assert.has_error(function() yaml.decode(nil) end)
      assert.has_error(function() yaml.decode({}) end)
      assert.has_error(function() yaml.decode("a: 1", 5) end)
      assert.has_error(function() yaml.decode_all(false) end)
    end)
  end)

  describe("plain scalars resolve with the YAML 1.2 core schema", function()
    local cases = {
      {"null", "null"}, {"Null", "null"}, {"NULL", "null"}, {"~", "null"}, {"", "null"},
      {"true", "boolean:true"}, {"True", "boolean:true"}, {"TRUE", "boolean:true"},
      {"false", "boolean:false"}, {"False", "boolean:false"}, {"FALSE", "boolean:false"},
      {"0", "integer:0"}, {"42", "integer:42"}, {"-17", "integer:-17"}, {"+5", "integer:5"},
      {"017", "integer:17"}, {"0x1F", "integer:31"}, {"0xff", "integer:255"},
      {"0o17", "integer:15"}, {"9223372036854775807", "integer:9223372036854775807"},
      {"-9223372036854775808", "integer:-9223372036854775808"},
      {"1.5", "float:1.5"}, {"-0.25", "float:-0.25"}, {".5", "float:0.5"}, {"1.", "float:1.0"},
      {"1e3", "float:1000.0"}, {"2.5E-1", "float:0.25"}, {"+1e+2", "float:100.0"},
      {".inf", "float:inf"}, {".Inf", "float:inf"}, {"+.INF", "float:inf"},
      {"-.inf", "float:-inf"},
      -- YAML 1.1 spellings are plain strings in 1.2
      {"yes", "string:yes"}, {"no", "string:no"}, {"on", "string:on"}, {"off", "string:off"},
      {"y", "string:y"}, {"1_000", "string:1_000"}, {"0b101", "string:0b101"},
      {"-0x5", "string:-0x5"}, {"0x", "string:0x"}, {"1e", "string:1e"}, {"+-1", "string:+-1"},
      {"nulls", "string:nulls"}, {"tRUE", "string:tRUE"}, {"inf", "string:inf"},
      {"12:30", "string:12:30"}, {"1.2.3", "string:1.2.3"}, {"hello world", "string:hello world"},
    }
    for _, case in ipairs(cases) do
      it(("%q -> %s"):format(case[1], case[2]), function()
        local v = decode_ok("v: " .. case[1] .. "\n")
        assert.equal(case[2], typed(v.v))
      end)
    end

    it(".nan decodes to a NaN float", function()
      for _, s in ipairs({".nan", ".NaN", ".NAN"}) do
        local v = decode_ok(s)
        assert.equal("float", math.type(v))
        assert.is_true(v ~= v)
      end
    end)

    it("an integer too large for 64 bits becomes a float", function()
      local v = decode_ok("9223372036854775808")
      assert.equal("float", math.type(v))
      assert.equal(2^63, v)
    end)

    it("a whole document that is one scalar decodes to that scalar", function()
      assert.equal("integer:7", typed(decode_ok("7\n")))
      assert.equal("string:plain text", typed(decode_ok("plain text")))
    end)
  end)

  describe("quoted and block scalars are always strings", function()
    local cases = {
      {[['true']], "true"}, {[["true"]], "true"}, {[['123']], "123"}, {[["1e3"]], "1e3"},
      {[['']], ""}, {[[""]], ""}, {[['~']], "~"}, {[["null"]], "null"}, {[['.nan']], ".nan"},
      {[["0x10"]], "0x10"}, {[['it''s']], "it's"}, {[["tab\there"]], "tab\there"},
      {[["nul\0byte"]], "nul\0byte"}, {[["\u00e9"]], "\u{e9}"},
    }
    for _, case in ipairs(cases) do
      it(case[1] .. " is a string", function()
        local v = decode_ok("v: " .. case[1])
        assert.equal("string", type(v.v))
        assert.equal(case[2], v.v)
      end)
    end

    it("literal and folded blocks are strings, even when they look like numbers", function()
      local v = decode_ok("a: |\n  123\nb: >\n  folded\n  text\nc: |-\n  true\n")
      assert.equal("123\n", v.a)
      assert.equal("folded text\n", v.b)
      assert.equal("true", v.c)
    end)

    it("!!str forces a string, other core tags force their type", function()
      local v = decode_ok("a: !!str 123\nb: !!float 3\nc: !!int \"7\"\nd: !!bool 'true'\ne: !!null ''\n")
      assert.equal("string:123", typed(v.a))
      assert.equal("float:3.0", typed(v.b))
      assert.equal("integer:7", typed(v.c))
      assert.equal("boolean:true", typed(v.d))
      assert.equal("null", typed(v.e))
    end)

    it("a value that does not fit its tag is an error at the value", function()
      local err = decode_err("a: !!int x\n")
      assert.equal("tag", err.code)
      assert.equal(1, err.line)
      assert.equal(4, err.column)
    end)
  end)

  describe("structures", function()
    it("mappings become tables and sequences 1-based arrays, nested", function()
      local v = decode_ok([[
name: job
resources:
  cpus: 4
  mem: 8G
steps:
  - run: make
    env: [A, B]
  - run: test
flow: {x: 1, y: [true, null]}
empty_map: {}
empty_seq: []
]])
      assert.same({
        name = "job",
        resources = {cpus = 4, mem = "8G"},
        steps = {{run = "make", env = {"A", "B"}}, {run = "test"}},
        flow = {x = 1, y = {true, null}},
        empty_map = {},
        empty_seq = {},
      }, v)
    end)

    it("nulls inside sequences keep their place", function()
      local v = decode_ok("[1, null, ~, 4]")
      assert.equal(4, #v)
      assert.equal(null, v[2])
      assert.equal(null, v[3])
      assert.equal(4, v[4])
    end)

    it("scalar keys are resolved like values", function()
      local v = decode_ok("1: one\n2.5: two and a half\ntrue: yes\n~: nothing\n'1': quoted\n")
      assert.equal("one", v[1])
      assert.equal("two and a half", v[2.5])
      assert.equal("yes", v[true])
      assert.equal("nothing", v[null])
      assert.equal("quoted", v["1"])
    end)

    it("a mapping or sequence used as a key is an error", function()
      local err = decode_err("? [a, b]\n: 1\n")
      assert.equal("key", err.code)
      assert.equal(1, err.line)
      assert.equal(3, err.column)
    end)

    it("an empty stream decodes to yaml.null; decode_all gives {}", function()
      assert.equal(null, yaml.decode(""))
      assert.equal(null, yaml.decode("# only a comment\n"))
      assert.same({}, yaml.decode_all(""))
    end)

    it("decode returns the first document, decode_all every document", function()
      local text = "--- 1\n---\na: 2\n---\n--- [x]\n"
      assert.equal(1, yaml.decode(text))
      local docs = yaml.decode_all(text)
      assert.equal(4, #docs)
      assert.equal(1, docs[1])
      assert.same({a = 2}, docs[2])
      assert.equal(null, docs[3])
      assert.same({"x"}, docs[4])
    end)

    it("decode still reports a syntax error in a later document", function()
      local v, err = yaml.decode("--- 1\n--- [2\n")
      assert.is_nil(v)
      assert.equal("syntax", err.code)
      assert.equal(3, err.line)
      assert.equal(1, err.column)
    end)
  end)

  describe("errors name the line and column", function()
    it("scanner error: a second ': ' on one line", function()
      -- "a: b: c": the second ':' is the 5th character of line 1
      local err = decode_err("a: b: c")
      assert.equal("syntax", err.code)
      assert.equal(1, err.line)
      assert.equal(5, err.column)
      assert.equal("mapping values are not allowed in this context", err.message)
    end)

    it("scanner error further down the file", function()
      -- line 3 is "  b: c: d"; the second ':' is its 7th character
      local err = decode_err("top:\n  a: 1\n  b: c: d\n")
      assert.equal(3, err.line)
      assert.equal(7, err.column)
      assert.equal("mapping values are not allowed in this context", err.message)
    end)

    it("scanner error with a context: an unterminated quoted string", function()
      -- the stream ends at line 2 column 1; the quote opened at line 1 column 6
      local err = decode_err('key: "unterminated\n')
      assert.equal("syntax", err.code)
      assert.equal(2, err.line)
      assert.equal(1, err.column)
      assert.equal("found unexpected end of stream", err.message)
      assert.equal("while scanning a quoted scalar", err.context)
      assert.equal(1, err.context_line)
      assert.equal(6, err.context_column)
    end)

    it("parser error: a mapping key after a block sequence", function()
      local err = decode_err("- a\nb: c\n")
      assert.equal("syntax", err.code)
      assert.equal(2, err.line)
      assert.equal(1, err.column)
      assert.equal("did not find expected '-' indicator", err.message)
    end)

    it("parser error: an unclosed flow sequence points past its end", function()
      local err = decode_err("a: 1\nb: [1, 2\n")
      assert.equal(3, err.line)
      assert.equal(1, err.column)
      assert.equal("while parsing a flow sequence", err.context)
      assert.equal(2, err.context_line)
      assert.equal(4, err.context_column)
    end)

    it("a tab used as indentation", function()
      local err = decode_err("a:\n\tb: 1\n")
      assert.equal("syntax", err.code)
      assert.equal(2, err.line)
      assert.equal(1, err.column)
    end)

    it("invalid UTF-8 names the offending character's position", function()
      -- "a: " then a lead byte 0xC3 followed by '(' : the bad octet is column 5
      local err = decode_err("a: \195(\n")
      assert.equal("encoding", err.code)
      assert.equal(1, err.line)
      assert.equal(5, err.column)
    end)

    it("tostring(err) gives a one-line diagnostic", function()
      assert.equal("line 1, column 5: mapping values are not allowed in this context",
        tostring(decode_err("a: b: c")))
    end)
  end)

  describe("duplicate keys", function()
    it("are an error at the second occurrence", function()
      local err = decode_err("a: 1\nb: 2\na: 3\n")
      assert.equal("duplicate_key", err.code)
      assert.equal("duplicate key 'a'", err.message)
      assert.equal(3, err.line)
      assert.equal(1, err.column)
    end)

    it("are found in nested and flow mappings", function()
      local err = decode_err("outer:\n  x: 1\n  x: 2\n")
      assert.equal("duplicate key 'x'", err.message)
      assert.equal(3, err.line)
      assert.equal(3, err.column)
      -- "{k: 1, k: 2}": the second k is the 8th character
      err = decode_err("{k: 1, k: 2}")
      assert.equal(1, err.line)
      assert.equal(8, err.column)
    end)

    it("compare resolved keys: 1 and 0x1 are the same key, '1' is not", function()
      assert.equal("duplicate_key", decode_err("1: a\n0x1: b\n").code)
      assert.equal("duplicate_key", decode_err("~: a\nnull: b\n").code)
      local v = decode_ok("1: a\n'1': b\n")
      assert.equal("a", v[1])
      assert.equal("b", v["1"])
    end)
  end)

  describe("anchors and aliases", function()
    it("an alias is the same value as its anchor", function()
      local v = decode_ok("base: &b {cpus: 2, tags: [x]}\njob: *b\nname: &n hello\nagain: *n\n")
      assert.equal(v.base, v.job) -- the same table, not a copy
      assert.same({cpus = 2, tags = {"x"}}, v.job)
      assert.equal("hello", v.again)
    end)

    it("an alias can be a key", function()
      local v = decode_ok("k: &k name\n*k : value\n")
      assert.equal("value", v.name)
    end)

    it("an unknown alias is an error at the alias", function()
      local err = decode_err("a: 1\nb: *missing\n")
      assert.equal("alias", err.code)
      assert.equal(2, err.line)
      assert.equal(4, err.column)
    end)

    it("anchors do not carry over to the next document", function()
      local v, err = yaml.decode_all("--- &a 1\n--- *a\n")
      assert.is_nil(v)
      assert.equal("alias", err.code)
    end)

    it("an alias bomb (billion laughs) is an error, not a hang", function()
      local lines = {"a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"}
      for i = 1, 9 do
        local refs = {}
        for j = 1, 10 do refs[j] = "*a" .. (i - 1) end
        lines[#lines + 1] = ("a%d: &a%d [%s]"):format(i, i, table.concat(refs, ", "))
      end
      local err = decode_err(table.concat(lines, "\n"))
      assert.equal("limit", err.code)
      assert.matches("too large", err.message)
    end)

    it("a modest number of alias expansions is fine", function()
      local v = decode_ok("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n")
      assert.equal(v.a, v.b[3])
    end)
  end)

  describe("depth limit", function()
    it("200 nested levels decode", function()
      local v = decode_ok(("["):rep(200) .. ("]"):rep(200))
      assert.is_table(v)
    end)

    it("201 nested flow levels are an error at the 201st opener", function()
      local err = decode_err(("["):rep(201) .. ("]"):rep(201))
      assert.equal("limit", err.code)
      assert.equal(1, err.line)
      assert.equal(201, err.column)
    end)

    it("100000 nested levels are an error, not a crash", function()
      local err = decode_err(("["):rep(100000) .. ("]"):rep(100000))
      assert.equal("limit", err.code)
      err = decode_err(("- "):rep(5000) .. "x\n")
      assert.equal("limit", err.code)
    end)
  end)

  describe("positions", function()
    local text = table.concat({
      "name: job",        -- 1
      "resources:",       -- 2
      "  cpus: 4",        -- 3
      "  mem: 8G",        -- 4
      "steps:",           -- 5
      "  - run: make",    -- 6
      "  - run: test",    -- 7
      "    env: {a: 1, bb: 2}", -- 8
      "",
    }, "\n")

    it("are only returned when asked for", function()
      local v, extra = yaml.decode(text)
      assert.is_table(v)
      assert.is_nil(extra)
    end)

    it("give line and column of each key of each mapping", function()
      local v, pos = decode_ok(text, {positions = true})
      assert.same({line = 1, column = 1}, pos[v].name)
      assert.same({line = 2, column = 1}, pos[v].resources)
      assert.same({line = 5, column = 1}, pos[v].steps)
      assert.same({line = 3, column = 3}, pos[v.resources].cpus)
      assert.same({line = 4, column = 3}, pos[v.resources].mem)
      assert.same({line = 7, column = 5}, pos[v.steps[2]].run)
      assert.same({line = 8, column = 5}, pos[v.steps[2]].env)
      assert.same({line = 8, column = 11}, pos[v.steps[2].env].a)
      assert.same({line = 8, column = 17}, pos[v.steps[2].env].bb)
    end)

    it("give where each sequence item starts", function()
      local v, pos = decode_ok(text, {positions = true})
      assert.same({line = 6, column = 5}, pos[v.steps][1])
      assert.same({line = 7, column = 5}, pos[v.steps][2])
    end)

    it("use resolved keys and are weak-keyed", function()
      local v, pos = decode_ok("1: a\ntrue: b\n", {positions = true})
      assert.same({line = 1, column = 1}, pos[v][1])
      assert.same({line = 2, column = 1}, pos[v][true])
      assert.equal("k", getmetatable(pos).__mode)
    end)

    it("are returned by decode_all for every document", function()
      local docs, pos = yaml.decode_all("a: 1\n---\nb: 2\n", {positions = true})
      assert.same({line = 1, column = 1}, pos[docs[1]].a)
      assert.same({line = 3, column = 1}, pos[docs[2]].b)
    end)
  end)

  describe("encode", function()
    it("writes block style, 2-space indent, keys sorted, {} for empty", function()
      local out = yaml.encode({b = 1, a = {1, 2}, c = {}, d = {x = true, z = null}})
      assert.equal("a:\n- 1\n- 2\nb: 1\nc: {}\nd:\n  x: true\n  z: null\n", out)
    end)

    it("sorts mixed keys: null, booleans, numbers, strings", function()
      local out = yaml.encode({[null] = 1, [true] = 2, [2] = 3, [1.5] = 4, z = 5, a = 6})
      assert.equal("null: 1\ntrue: 2\n1.5: 4\n2: 3\na: 6\nz: 5\n", out)
    end)

    it("writes a sparse table as a mapping with integer keys", function()
      assert.equal("1: a\n3: b\n", yaml.encode({[1] = "a", [3] = "b"}))
      assert.same({[1] = "a", [3] = "b"}, decode_ok(yaml.encode({[1] = "a", [3] = "b"})))
    end)

    it("keeps integers and floats apart", function()
      local v = decode_ok(yaml.encode({i = 1, f = 1.0, g = 0.1, h = 1e300, n = -0.0}))
      assert.equal("integer:1", typed(v.i))
      assert.equal("float:1.0", typed(v.f))
      assert.equal(0.1, v.g)
      assert.equal(1e300, v.h)
      assert.equal("float", math.type(v.n))
      local inf = decode_ok(yaml.encode({math.huge, -math.huge, 0 / 0, math.mininteger}))
      assert.equal(math.huge, inf[1])
      assert.equal(-math.huge, inf[2])
      assert.is_true(inf[3] ~= inf[3])
      assert.equal(math.mininteger, inf[4])
    end)

    it("writes nil and yaml.null as null", function()
      assert.equal(null, decode_ok(yaml.encode(nil)))
      assert.equal(null, decode_ok(yaml.encode(null)))
    end)

    local tricky = {
      "yes", "no", "on", "1e3", "a: b", "#x", "- x", "multi\nline", "", " lead",
      "trail ", "true", "True", "false", "null", "~", "123", "-5", "0x1F", "0o17", ".inf",
      "-.inf", ".nan", "1.", "---", "...", "- ", ":", "?", "a #b", "[x]", "{x}", "*x", "&x",
      "!x", "|", ">", "'q'", '"q"', "%x", "@x", "`x", "x\n", "\n", "\nx", "  x\n  y\n",
      "trail \nx", "a\tb", "nul\0byte", "cr\rlf", "\u{e9}t\u{e9}", "emoji \u{1F600}",
      "\u{85}next", ("long "):rep(100),
    }
    for _, s in ipairs(tricky) do
      it(("round-trips the string %q as a value and as a key"):format(s), function()
        local out = assert(yaml.encode(s))
        assert.equal("string", type(decode_ok(out)))
        assert.equal(s, decode_ok(out))
        local doc = decode_ok(yaml.encode({[s] = s, list = {s, s}}))
        assert.equal(s, doc[s])
        assert.equal(s, doc.list[2])
      end)
    end

    it("quotes strings that would otherwise read as other types", function()
      assert.equal("'yes'\n", yaml.encode("yes"))
      assert.equal("'123'\n", yaml.encode("123"))
      assert.equal("''\n", yaml.encode(""))
      assert.equal("plain\n", yaml.encode("plain"))
      -- YAML 1.1 booleans are quoted too, for readers that still use 1.1
      assert.equal("'y'\n", yaml.encode("y"))
      assert.equal("'off'\n", yaml.encode("off"))
    end)

    it("round-trips a nested structure", function()
      local value = {
        name = "job", steps = {{run = "make", env = {"A=1", "B: 2"}}, {run = "true"}},
        limits = {cpus = 4, mem_mib = 8192, ratio = 0.75, on = false}, none = null,
        [7] = "seven", empty = {},
      }
      assert.same(value, decode_ok(yaml.encode(value)))
    end)

    it("refuses functions, threads, userdata and cycles with nil, message", function()
      local out, msg = yaml.encode(print)
      assert.is_nil(out)
      assert.equal("cannot encode a function", msg)
      out, msg = yaml.encode({a = {b = function() end}})
      assert.is_nil(out)
      assert.matches("function", msg)
      assert.is_nil((yaml.encode({coroutine.create(print)})))
      assert.is_nil((yaml.encode({io.stdout})))
      local cycle = {}
      cycle.self = {back = cycle}
      out, msg = yaml.encode(cycle)
      assert.is_nil(out)
      assert.equal("cannot encode a cycle", msg)
    end)

    it("encodes a table shared twice (not a cycle) twice", function()
      local shared = {1}
      assert.equal("a:\n- 1\nb:\n- 1\n", yaml.encode({a = shared, b = shared}))
    end)

    it("refuses table keys, invalid UTF-8 and too deep nesting", function()
      assert.is_nil((yaml.encode({[{}] = 1})))
      local out, msg = yaml.encode({s = "\255"})
      assert.is_nil(out)
      assert.matches("UTF%-8", msg)
      local deep = {}
      local cur = deep
      for _ = 1, 300 do
        cur.x = {}
        cur = cur.x
      end
      out, msg = yaml.encode(deep)
      assert.is_nil(out)
      assert.matches("too deep", msg)
    end)

    it("ignores metatables", function()
      local t = setmetatable({a = 1}, {
        __index = function() error("no __index") end,
        __pairs = function() error("no __pairs") end,
      })
      assert.equal("a: 1\n", yaml.encode(t))
    end)
  end)
end)
