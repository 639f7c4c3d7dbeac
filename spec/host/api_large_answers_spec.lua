-- Large answers are produced in parts (obleth.api.parts): GET /api/v1/provisioner/snapshot and
-- GET /api/v1/replicas at thousands of replicas never hold obleth serve's one event loop, so a request
-- that arrives while one is being made is answered before it ends. The store is filled in this
-- process before obleth serve starts on it: 1,500 models with 2 live replicas each.
local cjson = require "cjson"
local http = require "obleth.http"
local server = require "spec.support.server"

local MODELS = 1500

local last_id

local function fill(db)
  local store = assert(require("obleth.store").open(db))
  local reps = {}
  for m = 1, MODELS do
    local model = assert(store:create_model { name = ("model-%d"):format(m) })
    last_id = model.id
    for s = 1, 2 do
      reps[#reps + 1] = { nonce = ("%08x%08x"):format(m, s), model_id = model.id, slot = s, state = "healthy",
        job_id = 1000 + 2 * m + s, node = "n1", port = 20000 + s, endpoint = ("http://n1:%d"):format(20000 + s) }
    end
  end
  assert(store:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = reps, outcomes = {},
    endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
  store:close()
end

describe("large answers of obleth serve", function()
  local srv
  setup(function()
    local db = server.tmpdb()
    fill(db)
    srv = server.start { db = db }
  end)
  teardown(function() if srv then srv:stop() end end)

  -- Start GET path as a stream and, once its answer has started and before reading any of its body,
  -- make a write that changes the last model's part (a restart asked for its replica in slot 2).
  -- An answer made in parts is still being made then (its parts wait for this client to read them),
  -- so the write shows in its last part; an answer made in one piece was whole before its first byte.
  local function interleaved(path)
    local resp = assert(http.request { url = srv.base .. path, stream = true, timeout = 120,
      headers = { Authorization = "Bearer " .. srv.token } })
    assert.equal(200, resp.status)
    local _, reps = srv:request("GET", ("/api/v1/models/%d/replicas"):format(last_id))
    local target
    for _, r in ipairs(reps.replicas) do if r.slot == 2 then target = r.id end end
    local st = srv:request("POST", ("/api/v1/replicas/%d/restart"):format(target))
    assert.equal(202, st)
    local parts = {}
    while true do
      local chunk, err = resp:read()
      assert.is_nil(err)
      if not chunk then break end
      parts[#parts + 1] = chunk
    end
    -- answered in parts, and logged as answered (not as a handler that returned nothing)
    assert.is_nil(srv:log():find("api_handler_error", 1, true), srv:log())
    return cjson.decode(table.concat(parts)), resp, target
  end

  it("the provisioner snapshot goes out in parts: a write made meanwhile shows in its last part", function()
    local doc, resp, target = interleaved("/api/v1/provisioner/snapshot")
    assert.equal("chunked", (resp.headers["transfer-encoding"] or ""):lower())
    assert.equal(MODELS, #doc.models)
    local last = doc.models[MODELS]
    assert.equal(last_id, last.id)
    assert.equal(2, #last.replicas)
    local asked
    for _, r in ipairs(last.replicas) do if r.id == target then asked = r.restart_requested end end
    assert.is_true(asked, "the last model's part was made before the write: the answer was made in one piece")
    assert.matches("^%x+$", doc.instance)
    assert.is_table(doc.settings)
    for i = 2, #doc.models do assert.is_true(doc.models[i].id > doc.models[i - 1].id) end
  end)

  it("GET /api/v1/replicas goes out in parts too, every replica once, in model order", function()
    local doc, resp = interleaved("/api/v1/replicas")
    assert.equal("chunked", (resp.headers["transfer-encoding"] or ""):lower())
    assert.equal(2 * MODELS, #doc.replicas)
    local seen = {}
    for i, r in ipairs(doc.replicas) do
      assert.is_nil(seen[r.nonce])
      seen[r.nonce] = true
      if i > 1 then assert.is_true(r.model_id >= doc.replicas[i - 1].model_id) end
    end
  end)

  it("?state=live answers through the same parts, as one JSON document", function()
    local status, doc = srv:request("GET", "/api/v1/replicas?state=live")
    assert.equal(200, status)
    assert.equal(2 * MODELS, #doc.replicas)
  end)
end)
