-- luacheck: std lua54+busted
-- Request bodies are read strictly (RFC 8259): no NaN, Infinity or hex numbers, valid
-- UTF-8 only, integers stay integers, and an array is never taken for an object.
local json = require "obleth.util.json"
local errors = require "obleth.api.errors"
local validate = require "obleth.deployment.input"

describe("obleth.util.json.decode (request bodies)", function()
  it("refuses NaN, Infinity and hex numbers", function()
    for _, text in ipairs({ '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 0x10}', '[nan]' }) do
      local v, err = json.decode(text)
      assert.is_nil(v, text)
      assert.matches("character %d+", err)
    end
  end)

  it("refuses a NUL byte anywhere (lua-cjson stopped reading at it: '{}\\0garbage' was accepted; found by make fuzz)", function()
    local v, err = json.decode("{}\0garbage")
    assert.is_nil(v)
    assert.matches("character 3", err)
    assert.is_nil(json.decode("false\0"))
  end)

  it("refuses invalid UTF-8 and names the byte", function()
    local v, err = json.decode('{"name": "ab\255cd"}')
    assert.is_nil(v)
    assert.matches("UTF%-8 at character 13", err)
    assert.is_nil(json.decode('{"name": "\237\160\128"}')) -- an encoded surrogate
    assert.same({ name = "é€😀" }, json.decode('{"name": "é€😀"}'))
  end)

  it("keeps integers as integers, so 8080 is stored as \"8080\", not \"8080.0\"", function()
    local v = json.decode('{"environment": {"PORT": 8080}, "n": [1, 2.5, -3], "big": 1e300}')
    assert.equal("integer", math.type(v.environment.PORT))
    assert.equal("8080", tostring(v.environment.PORT))
    assert.equal("integer", math.type(v.n[1]))
    assert.equal(2.5, v.n[2])
    assert.equal("integer", math.type(v.n[3]))
    assert.equal("float", math.type(v.big))
  end)

  it("an empty array is not an object, at the top or inside", function()
    local v = assert(json.decode("[]"))
    local ok = errors.need_object({ json = v })
    assert.is_nil(ok)
    v = assert(json.decode('{"environment": [], "s": "[]", "list": [ ]}'))
    assert.equal("[]", v.s)
    assert.equal("[]", json.encode(v.environment))
    local spec, err = validate.managed_spec({ launch_command = "x", environment = v.environment })
    assert.is_nil(spec)
    assert.equal("environment", err.field)
    -- {} stays an object
    v = assert(json.decode('{"environment": {}}'))
    assert.equal("{}", json.encode(v.environment))
  end)
end)

describe("obleth.util.json.nonnull", function()
  it("reads a decoded null as nil and keeps every other value, false and 0 and empty ones too", function()
    local v = assert(json.decode('{"a": null, "b": false, "c": 0, "d": "", "e": []}'))
    assert.is_nil(json.nonnull(v.a))
    assert.is_nil(json.nonnull(nil))
    assert.equal(false, json.nonnull(v.b))
    assert.equal(0, json.nonnull(v.c))
    assert.equal("", json.nonnull(v.d))
    assert.equal(v.e, json.nonnull(v.e))
  end)
end)
