-- res:proxy (host/http_proxy.c): a front server passes requests on to upstream
-- servers over real loopback sockets; every case checks what the client got,
-- what the upstream saw, and what res:proxy returned.
local loop = require("obleth.loop")
local http = require("obleth.http")

local function serve(handler, opts)
  opts = opts or {}
  opts.port = opts.port or 0
  opts.handler = handler
  local srv = assert(http.server(opts))
  return srv, srv:port()
end

local front = require("spec.support.proxy_front")

local function wait_for(pred, secs)
  local t0 = loop.monotonic()
  while not pred() do
    if loop.monotonic() - t0 > (secs or 5) then return false end
    loop.sleep(0.01)
  end
  return true
end

describe("res:proxy", function()
  it("passes method, target, headers and body on, and the answer back with its status and headers", function()
    local seen
    local up = serve(function(req)
      seen = req
      return { status = 201, headers = { ["Content-Type"] = "application/json", ["X-Up"] = "yes",
        ["Keep-Alive"] = "timeout=5" }, body = '{"made":true}' }
    end)
    local fr, base, results = front(up:port())
    local r = assert(http.request { url = base .. "/v1/things?x=1", method = "PUT", body = "payload",
      headers = { ["Content-Type"] = "text/plain", Authorization = "Bearer client-key", ["X-Custom"] = "c",
        ["X-Forwarded-For"] = "10.1.2.3", Connection = "X-Drop", ["X-Drop"] = "secret-ish" } })
    assert.equal(201, r.status)
    assert.equal('{"made":true}', r.body)
    assert.equal("yes", r.headers["x-up"])
    assert.is_nil(r.headers["keep-alive"])
    assert.equal("PUT", seen.method)
    assert.equal("/v1/things?x=1", seen.target)
    assert.equal("payload", seen.body)
    assert.equal("c", seen.headers["x-custom"])
    assert.is_nil(seen.headers.authorization) -- the client's obleth key stays with obleth
    assert.is_nil(seen.headers["x-drop"])     -- named by the client's Connection header
    assert.equal("10.1.2.3, 127.0.0.1", seen.headers["x-forwarded-for"])
    assert.equal("127.0.0.1:" .. up:port(), seen.headers.host)
    assert.equal(201, results[1].status)
    assert.is_nil(results[1].why)
    assert.is_true(results[1].ttfb >= 0 and results[1].ttfb < 5)
    fr:close(); up:close()
  end)

  it("sends the request to a target with the endpoint's path prefix when given one", function()
    local seen
    local up = serve(function(req) seen = req.target; return { status = 200, body = "ok" } end)
    local fr, base = front(up:port(), { target = "/prefix/v1/models" })
    assert.equal(200, assert(http.request { url = base .. "/v1/models" }).status)
    assert.equal("/prefix/v1/models", seen)
    fr:close(); up:close()
  end)

  it("keeps the connection to the endpoint alive and reuses it", function()
    local ports = {}
    local up = serve(function(req)
      ports[#ports + 1] = req.remote_port
      return { status = 200, body = "n" }
    end)
    local fr, base = front(up:port())
    for _ = 1, 5 do assert.equal(200, assert(http.request { url = base .. "/v1/x" }).status) end
    assert.equal(5, #ports)
    for i = 2, 5 do assert.equal(ports[1], ports[i]) end
    fr:close(); up:close()
  end)

  it("does not reuse a pooled connection the endpoint closed, and reports a request it cut off as closed", function()
    local up, port
    local restart = false
    up, port = serve(function()
      if not restart then return { status = 200, body = "first" } end
      -- the endpoint restarts with this request in hand: its connection closes with no
      -- byte of an answer, and a new endpoint listens on the same port
      loop.spawn(function()
        up:close()
        up = serve(function() return { status = 200, body = "second" } end, { port = port })
      end)
      loop.sleep(5)
    end)
    local fr, base, results = front(function() return port end)
    assert.equal("first", assert(http.request { url = base .. "/v1/a" }).body)
    restart = true
    local r = assert(http.request { url = base .. "/v1/b", timeout = 10 })
    assert.equal(502, r.status)
    assert.equal("closed", results[2].why) -- sent once; the router may try another replica
    -- the pooled connection to the old endpoint is closed: the next request opens a new one
    local before = http.proxy_stats()
    r = assert(http.request { url = base .. "/v1/c", timeout = 10 })
    assert.equal("second", r.body)
    local after = http.proxy_stats()
    assert.equal(before.connections_opened + 1, after.connections_opened)
    fr:close(); up:close()
  end)

  it("never reuses a connection with bytes nobody asked for, nor one the endpoint closed", function()
    -- an endpoint whose answers carry more than their Content-Length says
    local n = 0
    local up = serve(function(_, res)
      n = n + 1
      res:send(200, { ["Content-Type"] = "text/plain", ["Content-Length"] = "5" }, "ans" .. n .. "SMUGGLED")
    end)
    local fr, base = front(up:port())
    for i = 1, 3 do
      local r = assert(http.request { url = base .. "/v1/x" })
      assert.equal(200, r.status)
      assert.equal("ans" .. i .. "S", r.body) -- never the leftover of an earlier answer
    end
    fr:close(); up:close()
  end)

  it("holds back a short answer and sends it with a Content-Length", function()
    local up = serve(function() return { status = 200, headers = { ["Content-Type"] = "application/json" },
      body = '{"a":1}' } end)
    local fr, base = front(up:port())
    local r = assert(http.request { url = base .. "/v1/x" })
    assert.equal("7", r.headers["content-length"])
    assert.is_nil(r.headers["transfer-encoding"])
    fr:close(); up:close()
  end)

  it("passes an answer over buffer_limit through as it comes", function()
    local big = string.rep("0123456789abcdef", 8192) -- 128 KiB
    local up = serve(function() return { status = 200, headers = { ["Content-Type"] = "application/octet-stream" },
      body = big } end)
    local fr, base = front(up:port(), { buffer_limit = 1024 })
    local r = assert(http.request { url = base .. "/v1/x" })
    assert.equal(200, r.status)
    assert.equal(#big, #r.body)
    assert.equal(big, r.body)
    assert.equal("chunked", r.headers["transfer-encoding"])
    fr:close(); up:close()
  end)

  it("passes server-sent events through chunk by chunk, before the stream ends", function()
    local release = false
    local up = serve(function(_, res)
      res:start(200, { ["Content-Type"] = "text/event-stream" })
      res:write("data: one\n\n")
      wait_for(function() return release end, 5)
      res:write("data: two\n\n")
      res:write("data: [DONE]\n\n")
      res:finish()
    end)
    local fr, base, results = front(up:port())
    local chunks, first_at = {}, nil
    local done = false
    loop.spawn(function()
      local r = assert(http.request { url = base .. "/v1/chat/completions", method = "POST", body = "{}",
        stream = true, timeout = 10 })
      while true do
        local c = r:read()
        if not c then break end
        chunks[#chunks + 1] = c
        first_at = first_at or loop.monotonic()
      end
      done = true
    end)
    -- the first event arrives while the upstream still holds the second back
    assert.is_true(wait_for(function() return #chunks > 0 end, 5))
    assert.is_false(done)
    assert.matches("data: one", table.concat(chunks))
    release = true
    assert.is_true(wait_for(function() return done end, 5))
    assert.equal("data: one\n\ndata: two\n\ndata: [DONE]\n\n", table.concat(chunks))
    assert.equal(200, results[1].status)
    fr:close(); up:close()
  end)

  it("answers HEAD with the endpoint's headers and no body", function()
    local up = serve(function() return { status = 200, headers = { ["Content-Type"] = "text/plain" },
      body = "twelve bytes" } end)
    local fr, base = front(up:port())
    local r = assert(http.request { url = base .. "/v1/x", method = "HEAD" })
    assert.equal(200, r.status)
    assert.equal("", r.body)
    assert.equal("12", r.headers["content-length"])
    fr:close(); up:close()
  end)

  it("reports a refused connection as nil, {code = \"unreachable\", message} without sending anything", function()
    local gone = serve(function() end)
    local port = gone:port()
    gone:close()
    local fr, base, results = front(port)
    local r = assert(http.request { url = base .. "/v1/x" })
    assert.equal(502, r.status)
    assert.equal("proxy: unreachable", r.body)
    assert.is_nil(results[1].status)
    assert.equal("unreachable", results[1].why)
    assert.is_true(results[1].error_shape)
    assert.is_string(results[1].message)
    fr:close()
  end)

  it("reports an endpoint that closes the connection before answering as closed", function()
    local up
    up = serve(function()
      loop.spawn(function() up:close() end) -- the endpoint dies with the request in hand
      loop.sleep(5)
    end)
    local fr, base, results = front(up:port())
    local r = assert(http.request { url = base .. "/v1/x", timeout = 10 })
    assert.equal(502, r.status)
    assert.equal("closed", results[1].why)
    fr:close()
  end)

  it("reports no answer within timeout as timeout", function()
    local up = serve(function() loop.sleep(3); return { status = 200, body = "late" } end)
    local fr, base, results = front(up:port(), { timeout = 0.2 })
    local t0 = loop.monotonic()
    local r = assert(http.request { url = base .. "/v1/x", timeout = 10 })
    assert.equal(502, r.status)
    assert.equal("timeout", results[1].why)
    assert.is_true(loop.monotonic() - t0 < 2)
    fr:close(); up:close()
  end)

  it("closes the client's connection when a passed-through answer breaks off, so the client sees the break", function()
    local up
    up = serve(function(_, res)
      res:start(200, { ["Content-Type"] = "text/event-stream" })
      res:write("data: one\n\n")
      loop.spawn(function() loop.sleep(0.1); up:close() end)
      loop.sleep(5)
    end)
    local fr, base, results = front(up:port())
    local r, err = http.request { url = base .. "/v1/x", timeout = 10 }
    assert.is_nil(r) -- the client sees an incomplete answer, not a complete one
    assert.is_truthy(err)
    assert.equal(200, results[1].status)
    assert.equal("upstream_broke", results[1].why)
    fr:close()
  end)

  it("cancels the upstream request when the client goes away", function()
    local upstream_saw_close = false
    local up = serve(function(_, res)
      res:start(200, { ["Content-Type"] = "text/event-stream" })
      for _ = 1, 500 do
        if not res:write("data: tick\n\n") then upstream_saw_close = true return end
        loop.sleep(0.01)
      end
      res:finish()
    end)
    local fr, base, results = front(up:port())
    local r = assert(http.request { url = base .. "/v1/x", stream = true, timeout = 10 })
    assert.truthy(r:read())
    r:close()
    assert.is_true(wait_for(function() return results[1] ~= nil end, 5))
    assert.equal(499, results[1].status)
    assert.equal("client_gone", results[1].why)
    assert.is_true(wait_for(function() return upstream_saw_close end, 5))
    fr:close(); up:close()
  end)

  it("notices a client that goes away while the endpoint is still silent, and cancels the request", function()
    local up = serve(function(_, res)
      loop.sleep(4)
      if not res:closed() then res:send(200, {}, "late") end
    end)
    local fr, base, results = front(up:port())
    local before = http.proxy_stats()
    local t0 = loop.monotonic()
    local r = http.request { url = base .. "/v1/x", timeout = 1.5 } -- the client gives up after 1.5 s
    assert.is_nil(r)
    assert.is_true(wait_for(function() return results[1] ~= nil end, 3))
    assert.is_true(loop.monotonic() - t0 < 3.5, "noticed only after " .. (loop.monotonic() - t0) .. " s")
    assert.equal(499, results[1].status)
    assert.equal("client_gone", results[1].why)
    local after = http.proxy_stats()
    assert.equal(before.client_gone + 1, after.client_gone)
    -- the connection to the endpoint was closed (that cancels the request), not kept
    assert.equal(before.idle_connections, after.idle_connections)
    fr:close(); up:close()
  end)

  it("refuses bad options and a second call", function()
    local errs = {}
    local fr, fport = serve(function(req, res)
      for _, o in ipairs {
        { port = 80 }, { host = "a b", port = 80 }, { host = "h", port = 0 }, { host = "h", port = 70000 },
        { host = "h", port = 80, target = "no-slash" }, { host = "h", port = 80, target = "/a\r\nX: y" },
        { host = "h", port = 80, timeout = -1 },
      } do
        local ok, e = pcall(res.proxy, res, o)
        errs[#errs + 1] = (not ok) and e or "accepted"
      end
      res:send(200, {}, "x")
      local ok, e = pcall(res.proxy, res, { host = "127.0.0.1", port = 80 })
      errs[#errs + 1] = (not ok) and e or "accepted"
      return nil, req
    end)
    assert(http.request { url = "http://127.0.0.1:" .. fport .. "/" })
    assert.equal(8, #errs)
    for _, e in ipairs(errs) do assert.matches("proxy", e) end
    assert.matches("already sent", errs[8])
    fr:close()
  end)
end)
