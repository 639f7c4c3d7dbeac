--- Slurm JWTs: read the claims of one (`scontrol token`) without verifying it,
-- to warn before the token expires; mint one from the site's HS256 key, as
-- `scontrol token` does. No I/O.
local cjson = require "cjson"

local M = {}

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local DECODE = {}
for i = 1, #ALPHABET do DECODE[ALPHABET:byte(i)] = i - 1 end
DECODE[("-"):byte()] = 62 -- base64url
DECODE[("_"):byte()] = 63

--- Decode base64 or base64url text, padded or not.
---@param s string
---@return string|nil bytes
---@return table|nil err {code = "invalid_base64", message}
function M.base64url_decode(s)
  if type(s) ~= "string" then return nil, { code = "invalid_base64", message = "not a string" } end
  s = s:gsub("=+$", "")
  if #s % 4 == 1 then return nil, { code = "invalid_base64", message = "bad base64 length" } end
  local out, bits, nbits = {}, 0, 0
  for i = 1, #s do
    local v = DECODE[s:byte(i)]
    if not v then return nil, { code = "invalid_base64", message = "bad base64 character at " .. i } end
    bits = (bits << 6) | v
    nbits = nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      out[#out + 1] = string.char((bits >> nbits) & 0xff)
    end
  end
  return table.concat(out)
end

--- Encode bytes as base64url without padding (RFC 7515).
---@param s string
---@return string
function M.base64url_encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = (a << 16) | ((b or 0) << 8) | (c or 0)
    local k = (c and 4) or (b and 3) or 2
    for j = 1, k do
      local idx = (n >> (6 * (4 - j))) & 63
      out[#out + 1] = ALPHABET:sub(idx + 1, idx + 1)
    end
  end
  return (table.concat(out):gsub("[+/]", { ["+"] = "-", ["/"] = "_" }))
end

--- Mint a Slurm JWT as `scontrol token username=USER lifespan=SECONDS` does: HS256 over the
--- claims {exp, iat, sun}, signed with the key slurmctld reads from AuthAltParameters=jwt_key.
---@param opts {key: string, user: string, lifespan: integer, now: integer,
---  hmac_sha256_hex: fun(key: string, data: string): string|nil}
---  key: the key file's bytes; lifespan: seconds; now: epoch seconds; hmac_sha256_hex defaults
---  to obleth.crypto's
---@return string token
function M.mint(opts)
  if type(opts.key) ~= "string" or #opts.key == 0 then error("jwt.mint: key must be a non-empty string", 2) end
  if type(opts.user) ~= "string" or not opts.user:match("^[%w._-]+$") then error("jwt.mint: bad user name", 2) end
  local lifespan, now = math.tointeger(opts.lifespan), math.tointeger(opts.now)
  if not lifespan or lifespan <= 0 or not now then error("jwt.mint: lifespan and now must be integers", 2) end
  local hmac = opts.hmac_sha256_hex or require("obleth.crypto").hmac_sha256_hex
  local head = M.base64url_encode('{"alg":"HS256","typ":"JWT"}')
  local body = M.base64url_encode(cjson.encode({ exp = now + lifespan, iat = now, sun = opts.user }))
  local signing = head .. "." .. body
  local mac = hmac(opts.key, signing):gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
  return signing .. "." .. M.base64url_encode(mac)
end

--- Claims of a JWT (payload, not verified).
---@param token string "header.payload.signature", optionally prefixed "SLURM_JWT="
---@return table|nil claims
---@return table|nil err {code="invalid_token", message}
function M.claims(token)
  if type(token) ~= "string" then
    return nil, { code = "invalid_token", message = "token is not a string" }
  end
  token = token:gsub("^%s*SLURM_JWT=", ""):gsub("%s+$", "")
  local payload = token:match("^[%w%-_=]+%.([%w%-_=]+)%.[%w%-_=]*$")
  if not payload then
    return nil, { code = "invalid_token", message = "not a JWT (expected three dot-separated parts)" }
  end
  local json, err = M.base64url_decode(payload)
  if not json then return nil, { code = "invalid_token", message = "payload: " .. err.message } end
  local ok, claims = pcall(cjson.decode, json)
  if not ok or type(claims) ~= "table" then
    return nil, { code = "invalid_token", message = "payload is not a JSON object" }
  end
  return claims
end

--- Expiry of a JWT.
---@param token string
---@return integer|nil exp epoch seconds
---@return table|nil err {code="invalid_token"|"no_expiry", message}
function M.token_expiry(token)
  local claims, err = M.claims(token)
  if not claims then return nil, err end
  local exp = claims.exp
  if type(exp) ~= "number" then
    return nil, { code = "no_expiry", message = "token has no numeric exp claim" }
  end
  return math.tointeger(exp) or math.floor(exp)
end

return M
