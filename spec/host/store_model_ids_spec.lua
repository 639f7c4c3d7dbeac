-- A model's id is never given twice (SQLite, and PostgreSQL where it can run): the newest model
-- deleted and another created, the new one gets a new id, so the audit trail and the provisioner's
-- deltas (model_versions keeps a deleted model's id) never take it for the deleted one. SQLite's rowid
-- alone gave the deleted id again (obleth.store.dialect's insert_model).
local stores = require "spec.support.stores"

for _, backend in ipairs(stores.backends()) do
  describe("model ids on " .. backend.name, function()
    local store, why
    before_each(function() store, why = backend.open() end)
    after_each(function() if store then store:close() end end)

    it("the newest model deleted, the next one gets a new id", function()
      if not store then return pending(why) end
      local a = assert(store:create_model { name = "a" })
      local b = assert(store:create_model { name = "b" })
      assert(store:delete_model(b.id))
      local c = assert(store:create_model { name = "c" })
      assert.is_true(c.id > b.id)
      assert(store:delete_model(c.id))
      assert(store:delete_model(a.id))
      local d = assert(store:create_model { name = "d" })
      assert.is_true(d.id > c.id)
      assert.equal("d", store:get_model(d.id).name)
    end)

    it("an id the audit trail names is not given again, and the trail keeps only the old model's rows", function()
      if not store then return pending(why) end
      local a = assert(store:create_model { name = "a" })
      assert(store:add_audit { actor = "alice", via = "session", method = "DELETE", route = "/api/v1/models/{id}",
        target = "model " .. a.id, model_id = a.id, status = 204 })
      assert(store:delete_model(a.id))
      local b = assert(store:create_model { name = "b" })
      assert.are_not.equal(a.id, b.id)
      assert.equal(0, #store:list_audit { model_id = b.id })
      assert.equal(1, #store:list_audit { model_id = a.id })
    end)
  end)
end
