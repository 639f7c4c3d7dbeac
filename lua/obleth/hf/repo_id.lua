-- Validation of Hugging Face repo ids and revisions, before anything is put
-- into a URL. Pure Lua: no host modules.
--
-- The rules follow huggingface_hub's `validate_repo_id` (1-96 characters of
-- [A-Za-z0-9._-] per part, no leading or trailing '-' or '.', no '--' or '..',
-- at most one '/', no trailing '.git'), applied to each part of the id. A
-- value that passes can only ever name a path segment under /api/models/, so
-- operator input cannot aim the server at another host or path.
local M = {}

local MAX_PART = 96
local MAX_REVISION = 200

local function fail(code, message)
  return nil, { code = code, message = message }
end

local function check_part(part, what)
  if part == "" then return fail("invalid_repo_id", what .. " is empty") end
  if #part > MAX_PART then
    return fail("invalid_repo_id", ("%s is longer than %d characters"):format(what, MAX_PART))
  end
  if part:find("[^A-Za-z0-9._-]") then
    return fail("invalid_repo_id", what .. " may only use letters, digits, '-', '_' and '.'")
  end
  if part:find("^[-.]") or part:find("[-.]$") then
    return fail("invalid_repo_id", what .. " cannot start or end with '-' or '.'")
  end
  if part:find("--", 1, true) or part:find("..", 1, true) then
    return fail("invalid_repo_id", what .. " cannot contain '--' or '..'")
  end
  return true
end

--- Validate a repo id: `namespace/name`, or a bare `name` (legacy canonical
--- repos such as `gpt2`). Surrounding whitespace is not trimmed: it is refused.
---@param s any
---@return string|nil repo_id
---@return table|nil err {code="invalid_repo_id", message}
function M.repo_id(s)
  if type(s) ~= "string" then return fail("invalid_repo_id", "the repo id must be a string") end
  if s == "" then return fail("invalid_repo_id", "the repo id is empty") end
  if s:find("%s") then return fail("invalid_repo_id", "the repo id cannot contain whitespace") end
  if s:find("://", 1, true) or s:find("%", 1, true) or s:find("?", 1, true) or s:find("#", 1, true) then
    return fail("invalid_repo_id", "give the repo id as namespace/name, not a URL")
  end
  local _, slashes = s:gsub("/", "")
  if slashes > 1 then
    return fail("invalid_repo_id", "the repo id has the form namespace/name (one '/')")
  end
  local ns, name = s:match("^([^/]*)/([^/]*)$")
  if ns then
    local ok, err = check_part(ns, "the namespace")
    if not ok then return nil, err end
  else
    name = s
  end
  local ok, err = check_part(name, "the repo name")
  if not ok then return nil, err end
  if name:lower():find("%.git$") then return fail("invalid_repo_id", "the repo name cannot end in '.git'") end
  return s
end

--- Validate a revision: a branch, a tag, a 40-hex commit, or `refs/pr/N`.
--- Allowed characters are [A-Za-z0-9._/-]; slashes separate non-empty parts
--- (they are percent-encoded when the URL is built, so they never add path
--- segments); no part starts or ends with '.' or '-', no '..'.
---@param s any
---@return string|nil revision
---@return table|nil err {code="invalid_revision", message}
function M.revision(s)
  if type(s) ~= "string" then return fail("invalid_revision", "the revision must be a string") end
  if s == "" then return fail("invalid_revision", "the revision is empty") end
  if #s > MAX_REVISION then
    return fail("invalid_revision", ("the revision is longer than %d characters"):format(MAX_REVISION))
  end
  if s:find("[^A-Za-z0-9._/-]") then
    return fail("invalid_revision", "a revision may only use letters, digits, '-', '_', '.' and '/'")
  end
  if s:find("..", 1, true) then return fail("invalid_revision", "a revision cannot contain '..'") end
  for part in (s .. "/"):gmatch("([^/]*)/") do
    if part == "" then return fail("invalid_revision", "a revision cannot have empty parts between '/'") end
    if part:find("^[-.]") or part:find("[-.]$") then
      return fail("invalid_revision", "no part of a revision can start or end with '-' or '.'")
    end
  end
  if s:find("^refs/") and not s:find("^refs/pr/%d+$") then
    return fail("invalid_revision", "the only refs/ revisions the Hub serves are refs/pr/N")
  end
  return s
end

--- The revision as one URL path segment ('/' becomes %2F). Only call it on a
--- validated revision.
---@param rev string
---@return string
function M.encode_revision(rev)
  return (rev:gsub("/", "%%2F"))
end

return M
