-- obleth.util.text: cutting text on a character boundary, and making a client's string safe to quote
-- in an answer (JSON needs valid UTF-8) or a log line. Values worked out by hand.
local text = require "obleth.util.text"
local errors = require "obleth.api.errors"

describe("obleth.util.text", function()
  it("cut_utf8 never leaves half a character", function()
    assert.same({ "ab", true }, { text.cut_utf8("abc", 2) })
    assert.same({ "a", true }, { text.cut_utf8("aé", 2) }) -- é is 2 bytes
    assert.same({ "aé", false }, { text.cut_utf8("aé", 3) })
  end)

  it("printable replaces each byte that is no character with U+FFFD, keeps the rest, and cuts", function()
    assert.equal("model \u{FFFD}\u{FFFD} does not exist", text.printable("model \255\254 does not exist"))
    assert.equal("é€😀", text.printable("é€😀"))
    assert.equal("a\u{FFFD}", text.printable("a\xC3")) -- half a character at the end
    assert.equal("\u{FFFD}\u{FFFD}", text.printable("\xED\xA0\x80"):sub(1, 6)) -- a surrogate is no character
    assert.equal(("x"):rep(10) .. "…", text.printable(("x"):rep(50), 10))
  end)

  it("an API error quoting a client's bytes is valid UTF-8 of bounded length", function()
    local _, body = errors.not_found("model", "\255" .. ("y"):rep(6000))
    assert.truthy(utf8.len(body.error.message))
    assert.is_true(#body.error.message <= 2048 + 3)
    local _, b2 = errors.fail(400, "invalid", "unknown field: \254", "\254")
    assert.same({ "unknown field: \u{FFFD}", "\u{FFFD}" }, { b2.error.message, b2.error.field })
  end)
end)
