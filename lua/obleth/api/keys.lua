--- Client API keys for the OpenAI-compatible router (docs/router.md), and the
-- router's settings (keyless access). A key is shown once, when it is made;
-- the store keeps only its SHA-256.
local errors = require "obleth.api.errors"
local params = require "obleth.api.params"
local schema = require "obleth.schema"
local keys_schema = require "obleth.schema.keys"

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

-- The keys' usage the router counted and has not written yet goes to the store first.
local function _flush(app)
  if app.flush_key_usage then app:flush_key_usage() end
end

local function list(ctx)
  _flush(ctx.app)
  return 200, { keys = ctx.app.store:list_api_keys() }
end

local function usage(ctx)
  local id = params.int_param(ctx, "id")
  if not id then return errors.not_found("API key", ctx.params.id) end
  _flush(ctx.app)
  local key = ctx.app.store:get_api_key(id)
  if not key then return errors.not_found("API key", ctx.params.id) end
  local u = key.usage
  return 200, { id = key.id, name = key.name, owner = key.owner, prefix = key.prefix, requests = u.requests,
    limited = u.limited, prompt_tokens = u.prompt_tokens, completion_tokens = u.completion_tokens,
    total_tokens = u.prompt_tokens + u.completion_tokens, updated_at = u.updated_at }
end

local CHECKS = { formats = {
  label = function(v, field)
    if v:find("%c") then
      return nil, { code = "invalid", field = field, message = field .. ": must have no control characters" }
    end
    return v
  end,
} }

local function create(ctx)
  -- a key is never nameless: a name sent empty is refused; none (or null) names it by its prefix
  if type(ctx.json) == "table" and type(ctx.json.name) == "string" and ctx.json.name:match("^%s*$") then
    return errors.fail(400, "invalid", "name: must not be empty (leave it out to name the key by its prefix)", "name")
  end
  local b, verr = schema.validate(keys_schema.input, ctx.json == nil and {} or ctx.json, nil, CHECKS)
  if not b then return errors.fail(400, "invalid", verr.message, verr.field) end
  -- the key's owner: who it is charged to, by default who made it
  local owner = b.owner or ctx.actor or "admin"
  local g = M.generate()
  local key, err = ctx.app.store:create_api_key { name = b.name or ("key " .. g.prefix), prefix = g.prefix, hash = g.hash,
    owner = owner, requests_per_minute = b.requests_per_minute, max_concurrent = b.max_concurrent }
  if not key then return errors.store(err) end
  ctx.app.log.info("api_key_created", { id = key.id, name = key.name, prefix = g.prefix, owner = owner, actor = ctx.actor,
    requests_per_minute = b.requests_per_minute, max_concurrent = b.max_concurrent })
  key.key = g.key
  return 201, key, { Location = "/api/v1/keys/" .. key.id }
end

local function revoke(ctx)
  local id = params.int_param(ctx, "id")
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
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
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
  ApiKeyInput = schema.openapi(keys_schema.input),
  RouterSettings = { type = "object", additionalProperties = false, required = { "keyless" }, properties = {
    keyless = { type = "boolean", description = "true: /v1/ needs no client key (obleth behind the site's own gateway)" },
  } },
}

M.routes = {
  { "GET", "/api/v1/keys", list, tag = "router",
    summary = "Client API keys for /v1/ (id, name, prefix, owner, limits, usage, created_at, revoked_at; "
      .. "never the key)" },
  { "GET", "/api/v1/keys/{id}/usage", usage, tag = "router",
    summary = "A client key's usage for chargeback: requests answered, requests a limit refused, and the "
      .. "prompt / completion tokens the engines reported (counted since the key was made)" },
  { "POST", "/api/v1/keys", create, action = "keys.manage",
    body = "ApiKeyInput", body_optional = true, tag = "router", changes = { "keys" },
    summary = "Create a client API key, with optional limits (requests_per_minute, max_concurrent); the "
      .. "answer's `key` is shown this once (only its hash is stored)" },
  { "DELETE", "/api/v1/keys/{id}", revoke, action = "keys.manage", tag = "router", changes = { "keys" },
    summary = "Revoke a client API key (it stops working at once; listed with revoked_at)" },
  { "GET", "/api/v1/settings/router", get_settings, tag = "router",
    summary = "The router's settings: keyless (whether /v1/ needs a client key)" },
  { "PUT", "/api/v1/settings/router", put_settings, action = "keys.manage", body = "RouterSettings", tag = "router",
    changes = { "keys" },
    summary = "Set keyless: true to let /v1/ through without a client key (behind the site's own gateway)" },
}

return M
