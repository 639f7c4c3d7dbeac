--- A model (POST /api/v1/models, PATCH /api/v1/models/{id}) and an endpoint's base URL, as data
-- (obleth.schema): obleth.deployment.input.model / .endpoint and the OpenAPI ModelInput / EndpointInput
-- read them, and the API model name's rule is also the launch form's (obleth.recipe.schema).
local M = {}

--- The API model name (what clients send, and the served model name an engine is given): 1 to 128 of
--- A-Z a-z 0-9 . _ : / -, starting with a letter or digit — a name that starts with "-" would reach the
--- engine's command line as an option (--served-model-name --trust-remote-code).
M.name = { type = "string", max_len = 128, pattern = "^[A-Za-z0-9][A-Za-z0-9._:/%-]*$",
  rule = "1 to 128 of A-Z a-z 0-9 . _ : / -, starting with a letter or digit" }

--- A model's body; PATCH gives any of its fields, POST needs name. A null description clears it.
M.input = { type = "object", no_defaults = true, fields = {
  { "name", M.name },
  { "description", { type = "string", nullable = true, max_len = 4096, multiline = true } },
}, read_only = { "id", "status", "endpoints", "managed", "created_at", "updated_at" } }

--- An endpoint base URL: http(s)://host:port[/path].
M.endpoint = { type = "string", max_len = 2048, pattern = "^https?://[%w%.%-_%[%]:]+[%w/%.%-_~%%]*$",
  rule = "an http:// or https:// base URL" }

--- The body of POST /api/v1/models/{id}/endpoints.
M.endpoint_input = { type = "object", fields = { { "url", M.endpoint } } }

return M
