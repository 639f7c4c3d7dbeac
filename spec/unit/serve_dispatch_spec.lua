local dispatch = require "obleth.serve.dispatch"

describe("obleth serve: canonical paths", function()
  it("accepts ordinary paths and one trailing slash", function()
    for _, p in ipairs({ "/", "/api/v1/models", "/api/v1/models/3/managed", "/v1/chat/completions", "/metrics",
      "/api/v1/models/", "/api/v1/recipes/vllm-multinode" }) do
      assert.is_true(dispatch.canonical_path(p), p)
    end
  end)

  it("refuses empty, dot and dot-dot segments, also percent-encoded, and hidden slashes", function()
    for _, p in ipairs({ "//api/v1/provisioner/snapshot", "/api//v1/models", "/v1/../health", "/v1/./models",
      "/v1/%2e%2e/health", "/v1/%2E%2e/x", "/api/v1/models/..%2f..", "/api/v1/models/a%2fb", "/v1/a%5cb",
      "/api/v1/models/%00", "relative/path", "" }) do
      assert.is_false(dispatch.canonical_path(p), p)
    end
  end)
end)

describe("obleth serve: which part answers a path", function()
  it("sends /v1 and /metrics to the router, /api to the API, /healthz to the readiness check, the rest to the web",
    function()
    local want = {
      ["/v1"] = "router", ["/v1/chat/completions"] = "router", ["/metrics"] = "router", ["/metrics/"] = "router",
      ["/api"] = "api", ["/api/v1/models"] = "api",
      ["/"] = "web", ["/deployments"] = "web", ["/assets/main.js"] = "web", ["/v10"] = "web", ["/apix"] = "web",
      ["/metricsx"] = "web", ["/healthz"] = "health", ["/healthz/x"] = "web",
    }
    for path, part in pairs(want) do assert.equal(part, dispatch.part(path), path) end
  end)
end)
