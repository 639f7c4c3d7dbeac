-- SipHash-2-4 with a 128-bit output (host/siphash.c), the keyed hash of obleth.jsonscan.element_hashes,
-- checked through obleth.crypto.siphash128 against the reference implementation's test vectors
-- (https://github.com/veorq/SipHash, vectors.h, vectors_sip128: key 00..0f, message 00..len-1).
local crypto = require "obleth.crypto"

local function bytes(n)
  local t = {}
  for i = 0, n - 1 do t[#t + 1] = string.char(i) end
  return table.concat(t)
end
local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end

describe("obleth.crypto.siphash128", function()
  it("gives the reference's vectors for messages of 0, 1, 2 and 15 bytes", function()
    local key = bytes(16)
    assert.equal("a3817f04ba25a8e66df67214c7550293", hex(crypto.siphash128(key, "")))
    assert.equal("da87c1d86b99af44347659119b22fc45", hex(crypto.siphash128(key, bytes(1))))
    assert.equal("8177228da4a45dc7fca38bdef60affe4", hex(crypto.siphash128(key, bytes(2))))
    assert.equal("5493e99933b0a8117e08ec0f97cfc3d9", hex(crypto.siphash128(key, bytes(15))))
  end)
  it("refuses a key that is not 16 bytes", function()
    assert.has_error(function() crypto.siphash128("short", "x") end)
  end)
end)
