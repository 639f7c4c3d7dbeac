--- Policy access.lua — who may do what (docs/access.md): roles, the actions each route declares,
-- and the groups that give a role. Pure: an identity and an action in, a decision out.
--
-- Roles, each with everything of the ones before it:
--   viewer    sees everything but secrets (every GET, except the provisioner's snapshot)
--   operator  launches and manages deployments (models, specs, replicas, recipes)
--   admin     the Slurm connection, cluster defaults, client keys, the router's settings, users,
--             and the provisioner's own routes
-- The admin token (OBLETH_ADMIN_TOKEN, and a session signed in with it) is admin. A signed-in user's
-- role is the highest one its groups map to in DEFAULTS.group_roles; a user with no mapped group
-- gets DEFAULTS.default_role (viewer).
--
-- Override in policy.d/access.lua like any policy (docs/policy.md), e.g. to map the site's groups:
--   return { DEFAULTS = { group_roles = { ["hpc-admins"] = "admin", ["ml-team"] = "operator" } } }
-- or to move an action to another role:
--   return { DEFAULTS = { actions = { ["recipes.write"] = "admin" } } }
local M = {}

--- The roles, least first.
M.ROLES = { "viewer", "operator", "admin" }

local RANK = {}
for i, r in ipairs(M.ROLES) do RANK[r] = i end

M.DEFAULTS = {
  --- group name -> role (a user's role is the highest of its groups')
  group_roles = {},
  --- the role of a user whose groups map to none
  default_role = "viewer",
  --- action -> the least role that may take it (every route declares one; docs/access.md lists them)
  actions = {
    read = "viewer",                      -- every GET but the snapshot
    ["session.own"] = "viewer",           -- one's own session and personal tokens
    ["deployments.launch"] = "operator",  -- preview, launch, inspect a Hugging Face repo
    ["deployments.manage"] = "operator",  -- models, endpoints, specs, restart, stop, delete
    ["recipes.write"] = "operator",       -- save, edit, delete saved recipes
    ["settings.slurm"] = "admin",         -- the Slurm connection and the cluster defaults
    ["keys.manage"] = "admin",            -- client keys and the router's settings
    ["users.manage"] = "admin",           -- users' tokens and roles
    ["audit.read"] = "viewer",            -- the audit trail
    provisioner = "admin",                -- the provisioner's snapshot (with secrets), reports, lease
  },
}

--- The rank of a role (1 viewer .. 3 admin), or nil for an unknown name.
---@param role string
---@return integer|nil
function M.rank(role) return RANK[role] end

--- A user's role from its groups.
---@param identity {user: string|nil, groups: string[]|nil, admin: boolean|nil} admin: the admin token
---@param defaults table|nil M.DEFAULTS (an override's merged DEFAULTS)
---@return string role, string|nil group the group that gave it (nil: the admin token or the default)
function M.role_of(identity, defaults)
  local d = defaults or M.DEFAULTS
  if identity.admin then return "admin" end
  local best, from = d.default_role or "viewer", nil
  for _, g in ipairs(identity.groups or {}) do
    local r = d.group_roles and d.group_roles[g]
    if RANK[r] and RANK[r] > (RANK[best] or 0) then best, from = r, g end
  end
  return best, from
end

--- May a role take an action?
---@param role string
---@param action string
---@param defaults table|nil
---@return boolean ok, string|nil needs the least role that may (when refused; "admin" for an unknown action)
function M.allows(role, action, defaults)
  local d = defaults or M.DEFAULTS
  local needs = d.actions and d.actions[action] or "admin" -- an action nobody listed is the admin's
  if (RANK[role] or 0) >= (RANK[needs] or #M.ROLES) then return true end
  return false, needs
end

--- Every action a role may take (for the dashboard, which hides what the role cannot do).
---@param role string
---@param defaults table|nil
---@return table<string, boolean> actions
function M.actions_of(role, defaults)
  local d = defaults or M.DEFAULTS
  local out = {}
  for action in pairs(d.actions or {}) do
    if M.allows(role, action, d) then out[action] = true end
  end
  return out
end

return M
