--- A client API key as POST /api/v1/keys takes it (docs/router.md "Limits and usage"), as data
-- (obleth.schema): the API's check and the OpenAPI ApiKeyInput are read from here. Format "label":
-- no control characters (obleth.api.keys checks it).
local M = {}

M.input = { type = "object", fields = {
  { "name", { type = "string", nullable = true, max_len = 128, format = "label",
    description = "a label for the key (who or what uses it); not empty; left out: \"key <prefix>\"" } },
  { "owner", { type = "string", nullable = true, max_len = 128, format = "label",
    description = "who the key's usage is charged to (default: who made it)" } },
  { "requests_per_minute", { type = "integer", nullable = true, min = 1, max = 100000,
    description = "at most this many requests in any 60 s (429 with Retry-After beyond); null: no limit" } },
  { "max_concurrent", { type = "integer", nullable = true, min = 1, max = 10000,
    description = "at most this many requests answered at once (429 beyond); null: no limit" } },
} }

return M
