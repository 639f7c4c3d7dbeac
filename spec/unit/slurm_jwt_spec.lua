-- luacheck: std lua54+busted
local jwt = require "obleth.slurm.jwt"

-- base64url without padding, written independently of the module
local function b64url(s)
  local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local k = (c and 4) or (b and 3) or 2
    for j = 1, k do
      local idx = (n >> (6 * (4 - j))) & 63
      out[#out + 1] = chars:sub(idx + 1, idx + 1)
    end
  end
  return table.concat(out)
end

describe("obleth.slurm.jwt", function()
  local header = b64url('{"alg":"HS256","typ":"JWT"}')

  it("reads exp from a Slurm token without verifying it", function()
    local token = header .. "." .. b64url('{"exp":1796035200,"iat":1796031600,"sun":"obleth"}') .. ".sig"
    assert.equal(1796035200, jwt.token_expiry(token))
    assert.equal("obleth", jwt.claims(token).sun)
  end)

  it("accepts the SLURM_JWT= line printed by scontrol token", function()
    local token = header .. "." .. b64url('{"exp":42}') .. ".c2ln"
    assert.equal(42, jwt.token_expiry("SLURM_JWT=" .. token .. "\n"))
  end)

  it("decodes payloads whose base64url uses - and _", function()
    -- "?>" encodes to "Pz4" and "~~~" to "fn5-": check both alphabets map right
    assert.equal("?>", jwt.base64url_decode("Pz4"))
    assert.equal("~~~", jwt.base64url_decode("fn5-"))
    assert.equal("\255\255", jwt.base64url_decode("__8"))
  end)

  it("refuses what is not a JWT", function()
    local exp, err = jwt.token_expiry("not-a-token")
    assert.is_nil(exp)
    assert.equal("invalid_token", err.code)
    exp, err = jwt.token_expiry(header .. "." .. b64url("not json") .. ".x")
    assert.is_nil(exp)
    assert.equal("invalid_token", err.code)
    exp, err = jwt.token_expiry(header .. "." .. b64url('{"sun":"x"}') .. ".x")
    assert.is_nil(exp)
    assert.equal("no_expiry", err.code)
    exp, err = jwt.token_expiry(nil)
    assert.is_nil(exp)
    assert.equal("invalid_token", err.code)
  end)
end)

describe("obleth.slurm.jwt.mint", function()
  -- RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?")
  local RFC4231 = "5bdcc146bf60754a6a042426089575c75a003f089d2739839dec58b964ec3843"

  it("signs header.payload with HS256 over the key, claims exp, iat and sun", function()
    local seen
    local token = jwt.mint { key = "Jefe", user = "obleth", lifespan = 120, now = 1000,
      hmac_sha256_hex = function(k, data) seen = { k, data }; return RFC4231 end }
    local h, p, sig = token:match("^([^.]+)%.([^.]+)%.([^.]+)$")
    assert.equal("Jefe", seen[1])
    assert.equal(h .. "." .. p, seen[2])
    assert.same({ alg = "HS256", typ = "JWT" }, require("cjson").decode(jwt.base64url_decode(h)))
    local claims = jwt.claims(token)
    assert.same({ exp = 1120, iat = 1000, sun = "obleth" }, claims)
    -- the signature is the MAC's 32 bytes, base64url without padding
    local mac = RFC4231:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)
    assert.equal(b64url(mac), sig)
    assert.is_nil(sig:find("[=+/]"))
  end)

  it("refuses a user name that could not be Slurm's", function()
    assert.has_error(function()
      jwt.mint { key = "k", user = "a b", lifespan = 1, now = 1, hmac_sha256_hex = function() return "" end }
    end)
  end)
end)
