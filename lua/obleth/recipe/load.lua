--- obleth.recipe.load — reading recipes from YAML text, a file or a directory (host only: needs
-- obleth.yaml and obleth.sys).
local schema = require "obleth.recipe.schema"
local validate = require "obleth.recipe.validate"
-- the names this part's code shares with the other parts of obleth.recipe
local M = {}

--- Decode and validate recipe YAML text.
---@param text string
---@param name string|nil file name for messages
---@return table|nil recipe
---@return table|nil err {code = "invalid", field, message, errors = {{field, message, line, column}}}
function M.load_text(text, name)
  local yaml = require "obleth.yaml"
  local doc, pos = yaml.decode(text, { positions = true })
  if doc == nil then
    local e = pos or {}
    return nil, schema.invalid({ { field = "", line = e.line, column = e.column,
      message = (name and (name .. ": ") or "") .. tostring(e.message or e) } })
  end
  return validate.validate(doc, pos)
end

--- Read, decode and validate a recipe file.
---@param path string
---@return table|nil recipe
---@return table|nil err as load_text's
function M.load_file(path)
  local fh, ferr = io.open(path, "rb")
  if not fh then return nil, schema.invalid({ { field = "", message = tostring(ferr) } }) end
  local text = fh:read("a")
  fh:close()
  return M.load_text(text, path)
end

--- Every `*.yaml` recipe in a directory, by id.
---@param dir string
---@return table<string, table> recipes
---@return table<string, table> errors by file name (load_file's err)
function M.load_dir(dir)
  local sys = require "obleth.sys"
  local names = sys.listdir(dir) or {}
  table.sort(names)
  local recipes, errors = {}, {}
  for _, n in ipairs(names) do
    if n:match("%.ya?ml$") then
      local r, err = M.load_file(dir .. "/" .. n)
      if r then recipes[r.id] = r else errors[n] = err end
    end
  end
  return recipes, errors
end

return M
