-- /metrics and the Slurm settings tell an operator what needs them:
-- a static JWT close to expiry, the provisioner's pass duration, lease and policy error.
local server = require "spec.support.server"
local jwt = require "obleth.slurm.jwt"

local function static_token(seconds_left)
  local now = os.time()
  return jwt.mint { key = "not the site's key", user = "obleth", lifespan = seconds_left, now = now }
end

describe("/metrics for the provisioner and the Slurm JWT", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:stop(); srv:cleanup() end)

  local function metric(name, labels)
    local _, _, text = srv:request("GET", "/metrics", nil, { Authorization = false })
    local pat = "\n" .. name:gsub("%p", "%%%0") .. (labels and labels:gsub("%p", "%%%0") or "") .. " (%S+)"
    local raw = text:match(pat)
    return tonumber(raw), raw
  end

  local function put_token(tok)
    local st, s, raw = srv:request("PUT", "/api/v1/settings/slurm", { enabled = true, url = "http://127.0.0.1:9",
      user = "obleth", token = tok })
    assert(st == 200, raw)
    return s
  end

  it("warns about a static token that expires within a day, not about one that lasts longer", function()
    local s = put_token(static_token(3600))
    assert.equal("static", s.token_source)
    assert.matches("expires in %d+ min and is not renewed", s.token_warning)
    assert.equal(1, metric("obleth_slurm_token_warning", '{source="static"}'))
    local left = metric("obleth_slurm_token_expires_in_seconds", '{source="static"}')
    assert.is_true(left > 3590 and left <= 3600, tostring(left))

    s = put_token(static_token(3 * 86400))
    assert.equal(require("cjson").null, s.token_warning)
    assert.equal(0, metric("obleth_slurm_token_warning", '{source="static"}'))

    put_token(static_token(1))
    require("obleth.loop").sleep(1.5)
    local _, cur = srv:request("GET", "/api/v1/settings/slurm")
    assert.matches("has expired", cur.token_warning)
  end)

  it("shows the last pass's duration, the lease and a policy error", function()
    local _, raw = metric("obleth_provisioner_lease_expires_in_seconds")
    assert.equal("NaN", raw) -- before any provisioner held the lease
    local st, l = srv:request("POST", "/api/v1/provisioner/lease", { holder = "p", host = "h", pid = 7, ttl = 30 })
    assert.equal(200, st)
    assert.equal(l.lease.generation, metric("obleth_provisioner_lease_generation"))
    local left = metric("obleth_provisioner_lease_expires_in_seconds")
    assert.is_true(left > 25 and left <= 30, tostring(left))

    local holder = { ["Obleth-Lease-Token"] = l.token } -- the lease holder proves itself with its token
    st = srv:request("POST", "/api/v1/provisioner/report", { lease_generation = l.lease.generation,
      pass = { started_at = os.time(), duration = 0.25, policy_error = { file = "/etc/obleth/policy.d/lost.lua",
        line = 3, message = "lost.lua:3: unexpected symbol", since = os.time() } } }, holder)
    assert.equal(200, st)
    assert.equal(0.25, metric("obleth_provisioner_last_pass_duration_seconds"))
    assert.equal(1, metric("obleth_provisioner_policy_error"))
    assert.equal(0, metric("obleth_provisioner_failed_passes"))
    local _, s = srv:request("GET", "/api/v1/settings/slurm")
    assert.same({ file = "/etc/obleth/policy.d/lost.lua", line = 3, message = "lost.lua:3: unexpected symbol" },
      { file = s.provisioner.policy_error.file, line = s.provisioner.policy_error.line,
        message = s.provisioner.policy_error.message })
    -- null clears it
    srv:request("POST", "/api/v1/provisioner/report", { lease_generation = l.lease.generation,
      pass = { started_at = os.time(), duration = 0.5, policy_error = require("cjson").null } }, holder)
    assert.equal(0, metric("obleth_provisioner_policy_error"))
  end)

  it("shows a policy file of obleth serve's own policy.d that does not load, until it is fixed", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p '" .. dir .. "'"))
    local function put(text)
      local fh = assert(io.open(dir .. "/suggestions.lua", "w"))
      fh:write(text)
      fh:close()
    end
    put("return { suggest = function( end }\n")
    local s2 = server.start { env = { OBLETH_POLICY_DIR = dir } }
    finally(function() s2:stop(); s2:cleanup(); os.execute("rm -rf '" .. dir .. "'") end)
    local function serve_metric(labels)
      local _, _, text = s2:request("GET", "/metrics", nil, { Authorization = false })
      local pat = "\nobleth_serve_policy_error" .. labels:gsub("%p", "%%%0") .. " (%S+)"
      return tonumber(text:match(pat))
    end
    assert.equal(1, serve_metric('{policy="suggestions"}'))
    assert.equal(0, serve_metric('{policy="lost"}'))
    -- the Slurm card's answer names the file and the line
    local _, st = s2:request("GET", "/api/v1/settings/slurm")
    assert.equal(1, #st.serve_policy_errors)
    local e = st.serve_policy_errors[1]
    assert.same({ "suggestions", dir .. "/suggestions.lua", 1 }, { e.policy, e.file, e.line })
    assert.matches("suggestions.lua:1:", e.message, 1, true)
    -- a fixed file (another size: the loader looks at mtime and size) loads on the next look
    put("return { DEFAULTS = {} }\n")
    require("spec.support.util").wait_until(function() return serve_metric('{policy="suggestions"}') == 0 end, 10,
      "the fixed file to load")
    _, st = s2:request("GET", "/api/v1/settings/slurm")
    assert.same({}, st.serve_policy_errors)
  end)
end)
