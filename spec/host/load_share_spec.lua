-- obleth.serve.load_share over a real store (SQLite, and PostgreSQL where it can run): two instances'
-- windows on one database, each publishing its own and reading the other's, on a clock the test moves.
-- What the scale policy reads is the sum over the live instances; an instance that stops publishing
-- stops counting after the expiry, one that withdraws at once. Values worked out by hand.
local stores = require "spec.support.stores"
local load = require "obleth.router.load"
local load_share = require "obleth.serve.load_share"

local function clock(t0)
  local t = t0
  return function() return t end, function(dt) t = t + dt end
end

-- a log that keeps its lines
local function recorder()
  local lines = {}
  local function add(level) return function(event, fields) lines[#lines + 1] = { level, event, fields } end end
  return { lines = lines, warn = add("warn"), info = add("info"), error = add("error") }
end

for _, backend in ipairs(stores.backends()) do
  describe("load_share on " .. backend.name, function()
    local store, why
    before_each(function() store, why = backend.open() end)
    after_each(function() if store then store:close() end end)

    local function pair(now, log)
      local a = load_share.new { window = load.new { now = now }, store = store, now = now, instance = "aaaa",
        interval = 5, expiry = 15, log = log }
      local b = load_share.new { window = load.new { now = now }, store = store, now = now, instance = "bbbb",
        interval = 5, expiry = 15, log = log }
      return a, b
    end

    it("each instance reads the sum of its own counts and the other's last published ones", function()
      if not store then return pending(why) end
      local now, move = clock(1000)
      local a, b = pair(now)
      a:begin("m"); a:begin("m"); a:begin("m")
      b:begin("m"); b:hold("m")
      assert.equal(3, a:view("m").inflight, "nothing published yet: a counts its own")
      assert.is_true(a:publish())
      assert.is_true(b:publish())
      assert.is_true(a:publish())
      move(1)
      a:finish("m", 1)                       -- a's own count is live; b's is as b published it
      local v = a:view("m")
      assert.equal(3, v.inflight)
      assert.equal(1, v.queued)
      assert.equal(4, b:view("m").inflight, "b reads a's 3 as published, and its own 1")
      assert.equal(2, a:instances())
      assert.same({ "m" }, a:names())
    end)

    it("an instance that stops publishing stops counting after the expiry; its row goes after twice that", function()
      if not store then return pending(why) end
      local now, move = clock(1000)
      local a, b = pair(now)
      b:begin("m"); b:begin("m")
      assert.is_true(b:publish())
      assert.is_true(a:publish())
      assert.equal(2, a:view("m").inflight)
      move(14)                                -- b is silent (SIGKILLed); a publishes on
      assert.is_true(a:publish())
      assert.equal(2, a:view("m").inflight, "14 s after b's last publish: still counted")
      move(2)
      assert.equal(0, a:view("m").inflight, "16 s: b no longer counts, even before a reads again")
      assert.is_true(a:publish())
      assert.equal(1, a:instances())
      assert.equal(1, #store:_q("SELECT instance FROM load_shares WHERE instance = 'bbbb'"), "the row stays until 2 × expiry")
      move(15)
      assert.is_true(a:publish())
      assert.equal(0, #store:_q("SELECT instance FROM load_shares WHERE instance = 'bbbb'"))
    end)

    it("an instance that withdraws (SIGTERM) stops counting at the other's next read", function()
      if not store then return pending(why) end
      local now = clock(1000)
      local a, b = pair(now)
      b:begin("m")
      assert.is_true(b:publish())
      assert.is_true(a:publish())
      assert.equal(1, a:view("m").inflight)
      assert.is_true(b:withdraw())
      assert.is_true(a:publish())
      assert.equal(0, a:view("m").inflight)
    end)

    it("a row that is no load window is left out and named once in the log", function()
      if not store then return pending(why) end
      local now = clock(1000)
      local log = recorder()
      local a, b = pair(now, log)
      b:begin("m")
      assert.is_true(b:publish())
      store:load_share_put("cccc", '{"since": "yesterday"}', 1000, { host = "h", pid = 7, started_at = 900 })
      assert.is_true(a:publish())
      assert.is_true(a:publish())
      assert.equal(1, a:view("m").inflight, "b's counts, not c's")
      local warned = 0
      for _, l in ipairs(log.lines) do
        if l[2] == "load_share_unreadable" then
          warned = warned + 1
          assert.equal("cccc", l[3].instance)
          assert.matches("since and models are expected", l[3].error, 1, true)
        end
      end
      assert.equal(1, warned)
    end)
  end)
end

describe("load_share.new", function()
  it("refuses an expiry shorter than twice the interval", function()
    local w = load.new { now = os.time }
    assert.has_error(function() load_share.new { window = w, store = {}, now = os.time, interval = 5, expiry = 9 } end,
      "load_share.new: interval must be > 0 and expiry at least twice interval")
  end)
end)
