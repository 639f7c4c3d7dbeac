local tables = require "obleth.util.tables"

describe("obleth.util.tables.deep_copy", function()
  it("copies tables all the way down, so changing the copy leaves the original as it was", function()
    local orig = { a = { b = { 1, 2 } }, s = "x", n = 3 }
    local c = tables.deep_copy(orig)
    c.a.b[1] = 9
    c.s = "y"
    assert.same({ a = { b = { 1, 2 } }, s = "x", n = 3 }, orig)
    assert.same({ a = { b = { 9, 2 } }, s = "y", n = 3 }, c)
  end)

  it("gives back a value that is not a table as it is", function()
    assert.equal(4, tables.deep_copy(4))
    assert.equal("s", tables.deep_copy("s"))
    assert.is_nil(tables.deep_copy(nil))
  end)
end)
