local loop = require("obleth.loop")
local http = require("obleth.http")

local function serve(handler, opts)
  opts = opts or {}
  opts.port = 0
  opts.handler = handler
  local srv = assert(http.server(opts))
  return srv, ("http://127.0.0.1:%d"):format(srv:port())
end

describe("obleth.http", function()
  it("200 concurrent requests to a server in the same host all complete while a 50 ms timer keeps firing", function()
    local srv, base = serve(function(req)
      loop.sleep(0.3) -- every request is slow, so they must overlap
      return { status = 200, headers = { ["Content-Type"] = "text/plain" }, body = req.method .. " " .. req.path }
    end)
    local ticks = 0
    local timer = loop.every(0.05, function() ticks = ticks + 1 end)
    local t0 = loop.monotonic()
    local ok, n = 0, 200
    local failures = {}
    for i = 1, n do
      loop.spawn(function()
        local r, err = http.request { url = base .. "/r" .. i, timeout = 10 }
        if r and r.status == 200 and r.body == "GET /r" .. i then ok = ok + 1
        else failures[#failures + 1] = err and err.message or (r and r.status) end
      end)
    end
    while ok + #failures < n and loop.monotonic() - t0 < 10 do loop.sleep(0.01) end
    local elapsed = loop.monotonic() - t0
    timer:cancel()
    srv:close()
    assert.same({}, failures)
    assert.equal(n, ok)
    assert.is_true(elapsed < 2, "requests did not overlap: " .. elapsed .. " s")
    -- 0.3 s of handler time at 50 ms: the loop was never blocked for long
    assert.is_true(ticks >= 5, "timer fired only " .. ticks .. " times")
  end)

  it("passes method, headers, query and body through, and returns lower-case response headers", function()
    local seen
    local srv, base = serve(function(req)
      seen = req
      return { status = 201, headers = { ["X-Answer"] = "42" }, body = "made" }
    end)
    local r = assert(http.request {
      url = base .. "/things?name=a%20b&x=1", method = "PUT",
      headers = { ["X-Token-Test"] = "v", ["Content-Type"] = "application/json" }, body = '{"a":1}',
    })
    srv:close()
    assert.equal(201, r.status)
    assert.equal("42", r.headers["x-answer"])
    assert.equal("made", r.body)
    assert.equal("PUT", seen.method)
    assert.equal("/things", seen.path)
    assert.equal("a b", seen.query.name)
    assert.equal("v", seen.headers["x-token-test"])
    assert.equal('{"a":1}', seen.body)
  end)

  it("reads the query string whole or not at all: a name twice or empty, or a NUL byte, is a query_error", function()
    local seen
    local srv, base = serve(function(req)
      seen = req
      return { status = 200 }
    end)
    local function query(qs)
      assert(http.request { url = base .. "/q?" .. qs })
      return seen.query, seen.query_error
    end
    assert.same({ { a = "1", b = "", c = "x y+" }, nil }, { query("a=1&b&&c=x+y%2B") })
    assert.same({ { hours = "7", x = "" }, nil }, { query("hours=7&x") })
    for qs, why in pairs {
      ["hours=1&hours=7"] = "more than once", ["hours=6%00evil"] = "NUL", ["=1"] = "no name", ["a=1&=2"] = "no name",
    } do
      local q, err = query(qs)
      assert.same({}, q, qs)
      assert.matches(why, err, 1, true)
    end
    srv:close()
  end)

  it("answers 413 to a body over the limit without calling the handler", function()
    local called = false
    local srv, base = serve(function() called = true; return { status = 200 } end, { body_limit = 1000 })
    local r = assert(http.request { url = base .. "/", method = "POST", body = ("x"):rep(5000) })
    srv:close()
    assert.equal(413, r.status)
    assert.is_false(called)
  end)

  it("a handler that raises gets a 500 JSON error that leaks nothing of the error", function()
    local srv, base = serve(function() error("secret internals") end)
    local r = assert(http.request { url = base .. "/" })
    srv:close()
    assert.equal(500, r.status)
    assert.matches('"code":"internal"', r.body, 1, true)
    assert.is_nil(r.body:find("secret internals", 1, true))
  end)

  it("streams server-sent events chunk by chunk with nothing buffered", function()
    local srv, base = serve(function(_, res)
      res:start(200, { ["Content-Type"] = "text/event-stream" })
      for i = 1, 4 do
        res:write("data: " .. i .. "\n\n")
        loop.sleep(0.05)
      end
      res:finish()
    end)
    local r = assert(http.request { url = base .. "/events", stream = true })
    assert.equal(200, r.status)
    assert.equal("chunked", r.headers["transfer-encoding"])
    local chunks, arrivals = {}, {}
    while true do
      local c, err = r:read()
      assert.is_nil(err)
      if not c then break end
      chunks[#chunks + 1] = c
      arrivals[#arrivals + 1] = loop.monotonic()
    end
    srv:close()
    assert.equal("data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n", table.concat(chunks))
    assert.is_true(#chunks >= 4, "events were buffered into " .. #chunks .. " reads")
    assert.is_true(arrivals[#arrivals] - arrivals[1] >= 0.1)
  end)

  it("a streaming writer learns that the client went away", function()
    local result
    local srv, base = serve(function(_, res)
      res:start(200, { ["Content-Type"] = "text/event-stream" })
      for _ = 1, 100 do
        local ok, err = res:write(("x"):rep(1000) .. "\n")
        if not ok then result = err; return end
        loop.sleep(0.02)
      end
      result = "finished"
      res:finish()
    end)
    local r = assert(http.request { url = base .. "/", stream = true })
    assert.truthy(r:read())
    r:close()
    local t0 = loop.monotonic()
    while not result and loop.monotonic() - t0 < 3 do loop.sleep(0.02) end
    srv:close()
    assert.equal("closed", result)
  end)

  it("reports a refused connection as unreachable and a slow server as timeout", function()
    local srv0 = assert(http.server { port = 0, handler = function() return { status = 200 } end })
    local dead = srv0:port()
    srv0:close()
    local r, err = http.request { url = ("http://127.0.0.1:%d/"):format(dead), timeout = 2 }
    assert.is_nil(r)
    assert.equal("unreachable", err.code)

    local srv, base = serve(function() loop.sleep(2); return { status = 200 } end)
    local t0 = loop.monotonic()
    r, err = http.request { url = base .. "/", timeout = 0.3 }
    srv:close()
    assert.is_nil(r)
    assert.equal("timeout", err.code)
    assert.is_true(loop.monotonic() - t0 < 1.5)
  end)

  it("refuses non-HTTP schemes and header injection", function()
    local r, err = http.request { url = "file:///etc/passwd" }
    assert.is_nil(r)
    assert.equal("bad_url", err.code)
    assert.has_error(function()
      http.request { url = "http://127.0.0.1:1/", headers = { ["X-A"] = "v\r\nInjected: 1" } }
    end)
  end)

  it("refuses response bodies above max_body", function()
    local srv, base = serve(function() return { status = 200, body = ("y"):rep(10000) } end)
    local r, err = http.request { url = base .. "/", max_body = 1000 }
    srv:close()
    assert.is_nil(r)
    assert.equal("too_large", err.code)
  end)

  it("reports a port already in use", function()
    local srv = assert(http.server { port = 0, handler = function() end })
    local again, err, code = http.server { port = srv:port(), handler = function() end }
    srv:close()
    assert.is_nil(again)
    assert.matches("cannot listen", err)
    assert.equal("addr_in_use", code)
    local _, err2, code2 = http.server { host = "localhost", port = 0, handler = function() end }
    assert.equal("bad_address", code2)
    assert.matches("not a numeric IP address", err2)
  end)

  it("answers HEAD with headers only", function()
    local srv, base = serve(function() return { status = 200, body = "hello" } end)
    local r = assert(http.request { url = base .. "/", method = "HEAD", timeout = 3 })
    local r2 = assert(http.request { url = base .. "/", timeout = 3 })
    srv:close()
    assert.equal(200, r.status)
    assert.equal("", r.body)
    assert.equal("5", r.headers["content-length"])
    assert.equal("hello", r2.body)
  end)

  it("must be called inside a task", function()
    local co = coroutine.wrap(function() end)
    co()
    -- the main thread of a plain pcall is not a task: simulated through a
    -- non-yieldable C boundary (table.sort comparator)
    assert.has_error(function()
      table.sort({ 1, 2 }, function() http.request { url = "http://127.0.0.1:1/" }; return true end)
    end)
  end)
end)

describe("obleth.http server shutdown", function()
  it("stop_listening refuses new connections while a request in flight still completes", function()
    local started = false
    local srv = assert(http.server { port = 0, handler = function()
      started = true
      loop.sleep(0.3)
      return { status = 200, body = "done" }
    end })
    local base = ("http://127.0.0.1:%d"):format(srv:port())
    local result
    loop.spawn(function() result = http.request { url = base .. "/slow", timeout = 5 } end)
    while not started do loop.sleep(0.01) end
    srv:stop_listening()
    local r, err = http.request { url = base .. "/new", timeout = 2 }
    assert.is_nil(r)
    assert.equal("unreachable", err.code)
    while not result do loop.sleep(0.02) end
    srv:close()
    assert.equal("done", result.body)
  end)
end)

describe("obleth.http response bodies held in C", function()
  local big = ("x"):rep(3 * 1024 * 1024)

  it("a body over max_body is freed when the call fails, not when the collector runs", function()
    collectgarbage("stop") -- the collector must not be what frees it
    -- http.held() counts every request of the process: an earlier spec's request may still hold a few
    -- bytes, so what is measured is what this call left behind
    local before = http.held()
    local srv, base = serve(function() return { status = 200, body = big } end)
    local r, err = http.request { url = base .. "/big", max_body = 2 * 1024 * 1024, timeout = 10 }
    local held = http.held() - before
    srv:close()
    collectgarbage("restart")
    assert.is_nil(r)
    assert.equal("too_large", err.code)
    assert.equal(0, held)
  end)

  it("a body that arrived in full is handed to Lua and no copy stays in C", function()
    collectgarbage("stop")
    local before = http.held()
    local srv, base = serve(function() return { status = 500, body = big } end)
    local r = assert(http.request { url = base .. "/big", timeout = 10 })
    local held = http.held() - before
    srv:close()
    collectgarbage("restart")
    assert.equal(500, r.status)
    assert.equal(#big, #r.body)
    assert.equal(0, held)
  end)
end)
