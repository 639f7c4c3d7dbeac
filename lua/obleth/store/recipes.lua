--- obleth.store.recipes — saved recipes: methods of the store object (obleth.store.base), in the SQL every
-- backend speaks (obleth.store.sqlite, obleth.store.pg).
local base = require "obleth.store.base"
local json = require "obleth.util.json"

local Store, util = base.Store, base.util
local NULL, _abort, _now = util.NULL, util.abort, util.now

---------------------------------------------------------------------------
-- saved recipes
---------------------------------------------------------------------------

local function _recipe_out(r)
  if not r then return nil end
  return { id = r.id, name = r.name or NULL, source = "saved", recipe = json.raw(r.body),
    created_at = r.created_at, updated_at = r.updated_at }
end

function Store:list_recipes()
  local out = json.array()
  for _, r in ipairs(self:_q("SELECT * FROM recipes ORDER BY id")) do out[#out + 1] = _recipe_out(r) end
  return out
end

function Store:get_recipe(id)
  return _recipe_out(self:_one("SELECT * FROM recipes WHERE id = ?", id))
end

--- Create (create_only = true: conflict when it exists) or replace a saved recipe.
---@param id string
---@param name string|nil
---@param body string the recipe as JSON text
---@return {recipe: table, created: boolean}|nil put the stored recipe; created = there was none before
---@return table|nil err {code = "conflict"|"storage", message, field?}
function Store:put_recipe(id, name, body, create_only)
  local res, err = self:transaction(function()
    local now = _now()
    local cur = self:_one("SELECT 1 AS x FROM recipes WHERE id = ?", id)
    if cur and create_only then _abort("conflict", ("a saved recipe %q already exists"):format(id), "id") end
    if cur then
      self:_x("UPDATE recipes SET name = ?, body = ?, updated_at = ? WHERE id = ?", name, body, now, id)
    else
      self:_x("INSERT INTO recipes (id, name, body, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        id, name, body, now, now)
    end
    return { created = not cur }
  end)
  if not res then return nil, err end
  return { recipe = self:get_recipe(id), created = res.created }
end

function Store:delete_recipe(id)
  return self:transaction(function()
    if self:_x("DELETE FROM recipes WHERE id = ?", id) == 0 then
      _abort("not_found", ("saved recipe %q does not exist"):format(id))
    end
    return true
  end)
end
