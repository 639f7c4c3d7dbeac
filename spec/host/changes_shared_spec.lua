-- F9: change notices between two instances sharing one PostgreSQL database (LISTEN / NOTIFY). A pass
-- touching 300 models would be a NOTIFY payload over PostgreSQL's 8000-byte limit ("payload string
-- too long": nothing reached the other instance); it is sent as its topics, and the other instance
-- publishes each of them. Two serve contexts, each with its own store, on Debian's PostgreSQL.
local pgs = require "spec.support.pg"
local available, why = pgs.available()

describe("change notices shared over PostgreSQL", function()
  if not available then
    it("needs PostgreSQL", function() pending(why) end)
    return
  end
  local loop = require "obleth.loop"
  local context = require "obleth.serve.context"
  local url, drop, sa, sb

  setup(function()
    url, drop = pgs.database()
    sa = assert(require("obleth.store").open(url, { pool = 2 }))
    sb = assert(require("obleth.store").open(url, { pool = 2 }))
  end)
  teardown(function()
    sa:close(); sb:close()
    drop()
  end)

  it("reach the other instance, ids when they fit, the topics when a pass touches 300 models", function()
    local a = context.new { store = sa, admin_token = "adminadminadmin0123456789" }
    local b = context.new { store = sb, admin_token = "adminadminadmin0123456789" }
    local sub = assert(b.events:subscribe())
    local heard = loop.notifier()
    local follow = assert(b:follow_changes(function() heard:notify() end))
    -- b's listener is up once a small notice comes through (it carries its model id)
    repeat a:share_changes({ { "settings", 7 } }) until heard:wait(0.5)
    local got = sub:next(5)
    assert.same({ topic = "settings", model_id = 7 }, got[1])
    while #sub:next(0) > 0 do end

    local list = {}
    for id = 1, 300 do
      for _, t in ipairs({ "models", "replicas", "managed", "launches" }) do list[#list + 1] = { t, id } end
    end
    assert.is_true(#require("cjson").encode(list) > 8000)
    a:share_changes(list)
    assert.is_true(heard:wait(30), "the big pass reached the other instance")
    local topics = {}
    repeat
      local batch = sub:next(5)
      for _, n in ipairs(batch) do topics[n.topic] = n.model_id or "all" end
    until #batch == 0 or (topics.models and topics.replicas and topics.managed and topics.launches)
    assert.same({ models = "all", replicas = "all", managed = "all", launches = "all" }, topics)
    follow.close()
  end)
end)
