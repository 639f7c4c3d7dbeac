local server = require "obleth.api"

describe("server: canonical paths", function()
  it("accepts ordinary paths and one trailing slash", function()
    for _, p in ipairs({ "/", "/api/v1/models", "/api/v1/models/3/managed", "/v1/chat/completions", "/metrics",
      "/api/v1/models/", "/api/v1/recipes/vllm-multinode" }) do
      assert.is_true(server.canonical_path(p), p)
    end
  end)

  it("refuses empty, dot and dot-dot segments, also percent-encoded, and hidden slashes", function()
    for _, p in ipairs({ "//api/v1/provisioner/snapshot", "/api//v1/models", "/v1/../health", "/v1/./models",
      "/v1/%2e%2e/health", "/v1/%2E%2e/x", "/api/v1/models/..%2f..", "/api/v1/models/a%2fb", "/v1/a%5cb",
      "/api/v1/models/%00", "relative/path", "" }) do
      assert.is_false(server.canonical_path(p), p)
    end
  end)
end)
