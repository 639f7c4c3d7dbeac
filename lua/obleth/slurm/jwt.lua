--- Read the claims of a Slurm JWT (`scontrol token`) without verifying it,
-- to warn before the token expires. No I/O.
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
---@return string|nil err
function M.base64url_decode(s)
  if type(s) ~= "string" then return nil, "not a string" end
  s = s:gsub("=+$", "")
  if #s % 4 == 1 then return nil, "bad base64 length" end
  local out, bits, nbits = {}, 0, 0
  for i = 1, #s do
    local v = DECODE[s:byte(i)]
    if not v then return nil, "bad base64 character at " .. i end
    bits = (bits << 6) | v
    nbits = nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      out[#out + 1] = string.char((bits >> nbits) & 0xff)
    end
  end
  return table.concat(out)
end

--- Claims of a JWT (payload, not verified).
---@param token string "header.payload.signature", optionally prefixed "SLURM_JWT="
---@return table|nil claims
---@return table|nil err {kind="invalid_token", message}
function M.claims(token)
  if type(token) ~= "string" then
    return nil, { kind = "invalid_token", message = "token is not a string" }
  end
  token = token:gsub("^%s*SLURM_JWT=", ""):gsub("%s+$", "")
  local payload = token:match("^[%w%-_=]+%.([%w%-_=]+)%.[%w%-_=]*$")
  if not payload then
    return nil, { kind = "invalid_token", message = "not a JWT (expected three dot-separated parts)" }
  end
  local json, err = M.base64url_decode(payload)
  if not json then return nil, { kind = "invalid_token", message = "payload: " .. err } end
  local ok, claims = pcall(cjson.decode, json)
  if not ok or type(claims) ~= "table" then
    return nil, { kind = "invalid_token", message = "payload is not a JSON object" }
  end
  return claims
end

--- Expiry of a JWT.
---@param token string
---@return integer|nil exp epoch seconds
---@return table|nil err {kind="invalid_token"|"no_expiry", message}
function M.token_expiry(token)
  local claims, err = M.claims(token)
  if not claims then return nil, err end
  local exp = claims.exp
  if type(exp) ~= "number" then
    return nil, { kind = "no_expiry", message = "token has no numeric exp claim" }
  end
  return math.tointeger(exp) or math.floor(exp)
end

return M
