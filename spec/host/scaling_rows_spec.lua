-- obleth.deployment.scaling.rows and load_history.sample_all over a real store (SQLite, and PostgreSQL
-- where it can run): the database counts a fixed spec's replicas, a spec is decoded again only when
-- its generation moves, and a sample in pages (a pause between two) sees the same rows as one in one
-- piece. Counts worked out by hand from the replicas written.
local stores = require "spec.support.stores"
local load = require "obleth.router.load"
local scaling = require "obleth.deployment.scaling"
local history = require "obleth.deployment.load_history"
local scale = require "obleth.policy.scale"

for _, backend in ipairs(stores.backends()) do
  describe("scaling rows on " .. backend.name, function()
    local store, why
    before_each(function() store, why = backend.open() end)
    after_each(function() if store then store:close() end end)

    -- n models: model k has a fixed spec of k replicas (paused when k % 5 == 0) and min(k, cap) live
    -- replicas, one ended replica, and, for k % 3 == 0, a successor (a rollover's) that does not count
    local function fill(n, cap)
      local reps, ids = {}, {}
      for k = 1, n do
        local m = assert(store:create_model { name = ("m%d"):format(k) })
        ids[k] = m.id
        assert(store:put_spec(m.id, { replicas = k, enabled = k % 5 ~= 0 }))
        for s = 1, math.min(k, cap or k) do
          reps[#reps + 1] = { nonce = ("%08x%08x"):format(k, s), model_id = m.id, slot = s, state = "healthy",
            job_id = 100 * k + s, check_failures = 0 }
        end
        reps[#reps + 1] = { nonce = ("%08x%08x"):format(k, 99), model_id = m.id, slot = k + 1, state = "ended",
          job_id = 100 * k + 99, check_failures = 0 }
        if k % 3 == 0 then
          reps[#reps + 1] = { nonce = ("%08x%08x"):format(k, 98), model_id = m.id, slot = 1, state = "starting",
            job_id = 100 * k + 98, check_failures = 0, successor_of = ("%08x%08x"):format(k, 1) }
        end
      end
      assert(store:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = reps, outcomes = {},
        endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
      return ids
    end

    local function by_model(rows)
      local out = {}
      for _, r in ipairs(rows) do out[r.model] = { r.current, r.desired } end
      return out
    end

    it("counts each fixed spec's live replicas in the database, successors and ended ones left out", function()
      if not store then return pending(why) end
      fill(7)
      local rows = scaling.rows(store, load.new {}, scale, os.time())
      assert.equal(7, #rows)
      assert.same({ m1 = { 1, 1 }, m2 = { 2, 2 }, m3 = { 3, 3 }, m4 = { 4, 4 }, m5 = { 5, 0 }, m6 = { 6, 6 },
        m7 = { 7, 7 } }, by_model(rows))
    end)

    it("pages of 2 give the rows of one piece, and the next page's start until the last", function()
      if not store then return pending(why) end
      fill(7)
      local whole = by_model(scaling.rows(store, load.new {}, scale, os.time()))
      local paged, pages, after = {}, 0, nil
      repeat
        local rows, nxt = scaling.rows(store, load.new {}, scale, os.time(), {}, { after = after, limit = 2 })
        for _, r in ipairs(rows) do paged[#paged + 1] = r end
        pages, after = pages + 1, nxt
      until not after
      assert.equal(4, pages) -- 2 + 2 + 2 + 1
      assert.same(whole, by_model(paged))
    end)

    it("decodes a spec again only when its generation moved, and forgets a deleted one", function()
      if not store then return pending(why) end
      local ids = fill(3)
      local cache = {}
      scaling.rows(store, load.new {}, scale, os.time(), cache)
      local reads, get_spec = 0, store.get_spec
      store.get_spec = function(self, id) reads = reads + 1; return get_spec(self, id) end
      scaling.rows(store, load.new {}, scale, os.time(), cache)
      assert.equal(0, reads)
      assert(store:put_spec(ids[2], { replicas = 9 }))
      reads = 0 -- put_spec answers the stored spec
      local rows = by_model(scaling.rows(store, load.new {}, scale, os.time(), cache))
      assert.equal(1, reads)
      assert.same({ 2, 9 }, rows.m2)
      assert(store:delete_spec(ids[3]))
      rows = by_model(scaling.rows(store, load.new {}, scale, os.time(), cache))
      assert.is_nil(rows.m3)
      assert.is_nil(cache[ids[3]])
      store.get_spec = nil
    end)

    it("sample_all pauses between pages and samples every managed model", function()
      if not store then return pending(why) end
      local ids = fill(2 * history.PAGE + 1, 1)
      local h = history.new {}
      local pauses = 0
      assert.equal(2 * history.PAGE + 1, h:sample_all(store, load.new {}, scale, function() pauses = pauses + 1 end))
      assert.equal(2, pauses)
      local last = ids[2 * history.PAGE + 1]
      assert.same({ 1, 2 * history.PAGE + 1 }, { h:points(last)[1].current, h:points(last)[1].desired })
    end)
  end)
end
