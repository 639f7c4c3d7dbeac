-- obleth.util.shell: quoting for /bin/sh. Expected words are written out by hand
-- from the POSIX rule: inside '...' nothing is special, and ' is spelled '\''.
local shell = require "obleth.util.shell"

describe("obleth.util.shell", function()
  describe("quote", function()
    it("wraps a plain value in single quotes", function()
      assert.equal("'abc'", shell.quote("abc"))
    end)

    it("quotes the empty string as '' so it stays one (empty) argument", function()
      assert.equal("''", shell.quote(""))
    end)

    it("spells a single quote as '\\'' (close, escaped quote, reopen)", function()
      assert.equal([['it'\''s']], shell.quote("it's"))
      assert.equal([[''\''; rm -rf /tmp/x; '\''']], shell.quote("'; rm -rf /tmp/x; '"))
    end)

    it("leaves $, backticks, backslashes, globs and newlines untouched inside the quotes", function()
      assert.equal("'$(touch /tmp/p) `id` \\ * ; && \"x\"\nnext'", shell.quote("$(touch /tmp/p) `id` \\ * ; && \"x\"\nnext"))
    end)

    it("writes integers without a decimal point and booleans as words", function()
      assert.equal("'4'", shell.quote(4))
      assert.equal("'4'", shell.quote(4.0))
      assert.equal("'0.9'", shell.quote(0.9))
      assert.equal("'true'", shell.quote(true))
    end)

    it("refuses a NUL byte, which no shell word can carry", function()
      local q, err = shell.quote("a\0b")
      assert.is_nil(q)
      assert.matches("NUL", err)
    end)

    it("raises on a value that is not a string, number or boolean (misuse)", function()
      assert.has_error(function() shell.quote({}) end)
      assert.has_error(function() shell.quote(nil) end)
    end)
  end)

  describe("join", function()
    it("quotes each argument and separates them with one space", function()
      assert.equal([['vllm' 'serve' 'a b' ''\''']], shell.join({ "vllm", "serve", "a b", "'" }))
    end)

    it("joins an empty argv to the empty string", function()
      assert.equal("", shell.join({}))
    end)

    it("names the argument that holds a NUL byte", function()
      local s, err = shell.join({ "a", "b\0" })
      assert.is_nil(s)
      assert.equal("argument 2 contains a NUL byte", err)
    end)
  end)

  describe("is_name", function()
    it("accepts environment names and refuses the rest", function()
      assert.is_true(shell.is_name("OBLETH_PORT"))
      assert.is_true(shell.is_name("_x1"))
      assert.is_false(shell.is_name("1X"))
      assert.is_false(shell.is_name("A-B"))
      assert.is_false(shell.is_name(""))
      assert.is_false(shell.is_name(nil))
    end)
  end)
end)
