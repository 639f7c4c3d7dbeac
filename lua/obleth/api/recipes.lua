--- Recipes: library ones from recipes/*.yaml (read-only) and saved ones (CRUD, in the store).
local cjson = require "cjson"
local errors = require "obleth.api.errors"
local json = require "obleth.util.json"
local validate = require "obleth.deployment.input"
local recipe_schema = require "obleth.schema.recipe"

local M = {}

--- The library recipes folder.
function M.library_dir()
  return (os.getenv("OBLETH_RECIPES_DIR") or (require("obleth.sys").paths.share .. "/recipes"))
end

-- Library recipes by id, read from YAML each time (the folder is small; edits show at once).
local function _library(app)
  local ok, recipe = pcall(require, "obleth.recipe")
  if not ok then return {}, {} end
  local dir = M.library_dir()
  local found, errs = recipe.load_dir(dir)
  for file, e in pairs(errs or {}) do
    if not (app.cache.recipe_warned or {})[file] then
      app.cache.recipe_warned = app.cache.recipe_warned or {}
      app.cache.recipe_warned[file] = true
      app.log.warn("library_recipe_invalid", { file = file, error = e.message })
    end
  end
  return found or {}
end

local function _raw_yaml(id)
  local sys = require "obleth.sys"
  local dir = M.library_dir()
  for _, name in ipairs(sys.listdir(dir) or {}) do
    if name:match("%.ya?ml$") then
      local fh = io.open(dir .. "/" .. name)
      if fh then
        local text = fh:read("a")
        fh:close()
        local y = require("obleth.yaml").decode(text)
        if type(y) == "table" and y.id == id then return y, name end
      end
    end
  end
end

local function _library_out(r, with_doc)
  local out = { id = r.id, name = r.name or cjson.null, source = "library", engine = r.engine or cjson.null,
    description = r.description or cjson.null }
  if with_doc then
    local doc, file = _raw_yaml(r.id)
    out.recipe = doc or r
    out.file = file
  end
  return out
end

local function list(ctx)
  local out = json.array()
  local lib = _library(ctx.app)
  local ids = {}
  for id in pairs(lib) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do out[#out + 1] = _library_out(lib[id], false) end
  for _, r in ipairs(ctx.app.store:list_recipes()) do
    -- a saved recipe is listed like a library one: its engine and description from its document
    local doc = type(r.recipe) == "table" and r.recipe or {}
    if type(doc[1]) == "string" then -- the stored text (obleth.util.json.raw)
      local ok, d = pcall(cjson.decode, doc[1])
      doc = ok and type(d) == "table" and d or {}
    end
    r.engine = type(doc.engine) == "string" and doc.engine or cjson.null
    r.description = type(doc.description) == "string" and doc.description or cjson.null
    r.recipe = nil
    out[#out + 1] = r
  end
  return 200, { recipes = out }
end

local function get(ctx)
  local id = ctx.params.id
  local lib = _library(ctx.app)
  if lib[id] then return 200, _library_out(lib[id], true) end
  local r = ctx.app.store:get_recipe(id)
  if not r then return errors.fail(404, "not_found", ("recipe %q does not exist"):format(id)) end
  return 200, r
end


local function _save(ctx, id, create_only)
  local b = ctx.json -- checked: the route declares its body (obleth.api.request)
  local doc, err = validate.recipe(b, id)
  if not doc then return errors.invalid(err) end
  if _library(ctx.app)[doc.id] then
    return errors.fail(409, "read_only", ("%q is a library recipe (read-only); save under another id"):format(doc.id), "id")
  end
  local ok, recipe = pcall(require, "obleth.recipe")
  if ok then
    local r, rerr = recipe.validate(json.plain(doc)) -- as from YAML: integers, null absent
    if not r then
      local f, errs = rerr.field, rerr.errors
      return errors.fail(400, "invalid", (f and (f .. ": ") or "") .. tostring(rerr.message), f,
        { errors = #errs > 1 and errs or nil })
    end
  end
  local text = json.encode(doc)
  if b.id ~= nil and b.source == nil then text = ctx.req.body end
  local name = type(doc.name) == "string" and doc.name or nil
  local put, perr = ctx.app.store:put_recipe(doc.id, name, text, create_only)
  if not put then return errors.store(perr) end
  return put.created and 201 or 200, put.recipe
end

local function create(ctx) return _save(ctx, nil, true) end
local function put(ctx) return _save(ctx, ctx.params.id, false) end

local function delete(ctx)
  local id = ctx.params.id
  if _library(ctx.app)[id] then
    return errors.fail(409, "read_only", ("%q is a library recipe (read-only)"):format(id))
  end
  local ok, err = ctx.app.store:delete_recipe(id)
  if not ok then return errors.store(err) end
  return 204, "", {}
end

M.routes = {
  { "GET", "/api/v1/recipes", list, summary = "Library and saved recipes" },
  { "POST", "/api/v1/recipes", create, action = "recipes.write", body = "Recipe", body_schema = recipe_schema.new,
    changes = { "recipes" }, summary = "Save a recipe (the body is the recipe)" },
  { "GET", "/api/v1/recipes/{id}", get, summary = "One recipe (library or saved)" },
  { "PUT", "/api/v1/recipes/{id}", put, action = "recipes.write", body = "RecipeById",
    body_schema = recipe_schema.saved, changes = { "recipes" }, summary = "Create or replace a saved recipe" },
  { "DELETE", "/api/v1/recipes/{id}", delete, action = "recipes.write", changes = { "recipes" },
    summary = "Delete a saved recipe (library ones are read-only)" },
}

return M
