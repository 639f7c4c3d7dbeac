--- Client API keys for the OpenAI-compatible router (docs/router.md), and the
-- router's settings (keyless access). A key is shown once, when it is made;
-- the store keeps only its SHA-256.
local errors = require "obleth.api.errors"
local server = require "obleth.server"

local M = {}

--- Client keys look like obk_<48 hex characters> (192 random bits).
M.PREFIX = "obk_"
M.RANDOM_BYTES = 24
--- Characters of a key kept (and listed) to tell keys apart: "obk_" and 8 hex.
M.SHOWN = 12

--- A new key: the key itself, its listed prefix and its hash.
---@return {key: string, prefix: string, hash: string}
function M.generate()
  local key = M.PREFIX .. require("obleth.sys").random_hex(M.RANDOM_BYTES)
  return { key = key, prefix = key:sub(1, M.SHOWN), hash = require("obleth.crypto").sha256_hex(key) }
end

local function list(ctx)
  return 200, { keys = ctx.app.store:list_api_keys() }
end

local function create(ctx)
  local b = ctx.json
  if b == nil then b = {} end
  if type(b) ~= "table" then return errors.fail(400, "invalid", "the body must be a JSON object") end
  for k in pairs(b) do
    if k ~= "name" then return errors.fail(400, "invalid", "unknown field: " .. tostring(k), tostring(k)) end
  end
  local name = b.name
  if name == nil or name == require("cjson").null then name = "" end
  if type(name) ~= "string" or #name > 128 or name:find("[%c]") then
    return errors.fail(400, "invalid", "name: must be a string of at most 128 characters without control characters",
      "name")
  end
  local g = M.generate()
  local key, err = ctx.app.store:create_api_key { name = name, prefix = g.prefix, hash = g.hash }
  if not key then return errors.store(err) end
  ctx.app.log.info("api_key_created", { id = key.id, name = name, prefix = g.prefix })
  key.key = g.key
  return 201, key, { Location = "/api/v1/keys/" .. key.id }
end

local function revoke(ctx)
  local id = server.int_param(ctx, "id")
  if not id then return errors.not_found("API key", ctx.params.id) end
  local key, err = ctx.app.store:revoke_api_key(id)
  if not key then return errors.store(err) end
  ctx.app.log.info("api_key_revoked", { id = id, prefix = key.prefix })
  return 200, key
end

local function _router_settings(app)
  local s = app.store:get_settings("router") or {}
  return { keyless = s.keyless == true, updated_at = s.updated_at or require("cjson").null }
end

local function get_settings(ctx)
  return 200, _router_settings(ctx.app)
end

local function put_settings(ctx)
  local b, st, eb = errors.need_object(ctx)
  if not b then return st, eb end
  for k in pairs(b) do
    if k ~= "keyless" and k ~= "updated_at" then
      return errors.fail(400, "invalid", "unknown field: " .. k, k)
    end
  end
  if type(b.keyless) ~= "boolean" then
    return errors.fail(400, "invalid", "keyless: must be true or false", "keyless")
  end
  local _, err = ctx.app.store:put_settings({ keyless = b.keyless }, nil, "router")
  if err then return errors.store(err) end
  ctx.app.log.info("router_settings_saved", { keyless = b.keyless })
  return 200, _router_settings(ctx.app)
end

M.schemas = {
  ApiKeyInput = { type = "object", additionalProperties = false, properties = {
    name = { type = "string", maxLength = 128, description = "a label for the key (who or what uses it)" } } },
  RouterSettings = { type = "object", additionalProperties = false, required = { "keyless" }, properties = {
    keyless = { type = "boolean", description = "true: /v1/ needs no client key (obleth behind the site's own gateway)" },
  } },
}

M.routes = {
  { "GET", "/api/v1/keys", list, tag = "router",
    summary = "Client API keys for /v1/ (id, name, prefix, created_at, revoked_at; never the key)" },
  { "POST", "/api/v1/keys", create, body = "ApiKeyInput", tag = "router", changes = { "keys" },
    summary = "Create a client API key; the answer's `key` is shown this once (only its hash is stored)" },
  { "DELETE", "/api/v1/keys/{id}", revoke, tag = "router", changes = { "keys" },
    summary = "Revoke a client API key (it stops working at once; listed with revoked_at)" },
  { "GET", "/api/v1/settings/router", get_settings, tag = "router",
    summary = "The router's settings: keyless (whether /v1/ needs a client key)" },
  { "PUT", "/api/v1/settings/router", put_settings, body = "RouterSettings", tag = "router",
    changes = { "keys" },
    summary = "Set keyless: true to let /v1/ through without a client key (behind the site's own gateway)" },
}

return M
