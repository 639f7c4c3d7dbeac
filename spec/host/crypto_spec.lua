local crypto = require "obleth.crypto"

describe("obleth.crypto", function()
  it("sha256_hex matches the FIPS 180-2 test vectors", function()
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", crypto.sha256_hex("abc"))
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", crypto.sha256_hex(""))
  end)

  it("hmac_sha256_hex matches the RFC 4231 test case 2", function()
    assert.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      crypto.hmac_sha256_hex("Jefe", "what do ya want for nothing?"))
  end)

  it("hashes binary data with embedded NUL bytes", function()
    assert.not_equal(crypto.sha256_hex("a\0b"), crypto.sha256_hex("a"))
    assert.equal(64, #crypto.sha256_hex("a\0b"))
  end)
end)
