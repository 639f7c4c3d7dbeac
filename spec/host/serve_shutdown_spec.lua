-- obleth serve stops at once on SIGTERM (break finding F12): the provisioner's long polls
-- (GET /api/v1/provisioner/wait) get an answer with the counter as it is, and a request the router
-- holds for a model at zero gets 503 shutting_down with Retry-After, instead of both waiting out the
-- shutdown's 15 s and being cut with no answer. A real obleth serve process, real sockets.
local has_host = pcall(require, "obleth.http")

describe("obleth serve on SIGTERM", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local loop = require "obleth.loop"
  local http = require "obleth.http"
  local cjson = require "cjson"
  local util = require "spec.support.util"
  local server = require "spec.support.server"

  it("answers the long polls and the held requests before it stops", function()
    local srv = server.start()
    finally(function() srv:cleanup() end)
    local st, m = srv:request("POST", "/api/v1/models", { name = "sleeper" })
    assert.equal(201, st)
    m = m.model or m
    local body
    st, body = srv:request("PUT", "/api/v1/models/" .. m.id .. "/managed", { partition = "gpu",
      launch_command = "obleth smoke-engine", autoscale = { min_replicas = 0, max_replicas = 1 } })
    assert.is_true(st == 200 or st == 201, tostring(st))
    assert.is_table(body)
    local _, key = srv:request("POST", "/api/v1/keys", { name = "client" })
    assert.is_string(key.key)
    local function get(path, timeout)
      return http.request { url = srv.base .. path, method = "GET", timeout = timeout,
        headers = { Authorization = "Bearer " .. srv.token } }
    end
    local seq = cjson.decode(get("/api/v1/provisioner/wait", 10).body).seq
    -- a request to the model at zero: held (no replica will come), and it asks for a pass now
    local held
    loop.spawn(function()
      held = table.pack(http.request { url = srv.base .. "/v1/chat/completions", method = "POST", timeout = 60,
        headers = { Authorization = "Bearer " .. key.key, ["Content-Type"] = "application/json" },
        body = cjson.encode { model = "sleeper", messages = { { role = "user", content = "hi" } } } })
    end)
    util.wait_until(function()
      local now = cjson.decode(get("/api/v1/provisioner/wait", 10).body).seq
      return now > seq, held and held[1] and held[1].body or now
    end, 20, "the held request's wake")
    seq = seq + 1
    -- three provisioners' waits, each for a minute
    local waits = {}
    for i = 1, 3 do
      loop.spawn(function()
        waits[i] = table.pack(get(("/api/v1/provisioner/wait?since=%d&timeout=60"):format(seq), 70))
      end)
    end
    util.wait_until(function()
      local r = get("/metrics", 10)
      local open = tonumber(r and r.body:match("\nobleth_http_connections (%d+)"))
      return open and open >= 5, open
    end, 20, "the waits and the held request open on the server (and this scrape)")
    local code, _, err = srv:stop("TERM")
    assert.equal(0, code, err)
    util.wait_until(function() return #waits == 3 and held ~= nil, #waits end, 20, "every answer")
    for i = 1, 3 do
      local r = waits[i][1]
      assert.is_table(r, "wait " .. i .. " was answered: " .. tostring(waits[i][2]))
      assert.equal(200, r.status)
      assert.same({ seq = seq, woken = false, why = "shutting_down" }, cjson.decode(r.body))
    end
    local r = held[1]
    assert.is_table(r, "the held request was answered: " .. tostring(held[2]))
    assert.equal(503, r.status)
    assert.equal("shutting_down", cjson.decode(r.body).error.code)
    assert.equal("1", r.headers["retry-after"])
  end)
end)
