-- Debian's slapd on loopback for the LDAP specs (docs/access.md "LDAP"): a temp dir with a database
-- (slapadd), a policy.d, and slapd run there (slapd -f); stopped and removed by stop().
--
--   local d = slapd.new()                 -- d.prefix: the dir (db/ and policy.d/ in it)
--   ... write certificates into d.prefix ...
--   d:start { urls = {url, ...}, conf = "TLS... lines", acl = "access to ... lines", ldif = "more entries" }
--   d:stop()
--
-- The directory always has SUFFIX, ou=people, ou=groups, alice (password alice-pw) and the
-- groupOfNames hpc-ops with alice in it; a spec adds its own entries (ldif) and access rules (acl,
-- before the last "access to * by * read").
local util = require "spec.support.util"

local M = {}

M.BIN = "/usr/sbin/slapd"
M.SUFFIX = "dc=example,dc=org"

local CONF = [[
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile PREFIX/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
CONF
database mdb
maxsize 10485760
suffix "SUFFIX"
rootdn "cn=admin,SUFFIX"
rootpw admin-secret
directory PREFIX/db
access to attrs=userPassword by anonymous auth by self read by * none
ACL
access to * by * read
]]

local LDIF = [[
dn: SUFFIX
objectClass: dcObject
objectClass: organization
dc: example
o: Example

dn: ou=people,SUFFIX
objectClass: organizationalUnit
ou: people

dn: ou=groups,SUFFIX
objectClass: organizationalUnit
ou: groups

dn: uid=alice,ou=people,SUFFIX
objectClass: inetOrgPerson
uid: alice
cn: Alice
sn: A
userPassword: alice-pw

dn: cn=hpc-ops,ou=groups,SUFFIX
objectClass: groupOfNames
cn: hpc-ops
member: uid=alice,ou=people,SUFFIX
]]

--- Whether slapd is here (scripts/deps.sh all installs it).
function M.available()
  local f = io.open(M.BIN)
  if f then f:close() end
  return f ~= nil
end

local D = {}
D.__index = D

--- A temp dir for a directory, with db/ and policy.d/ (policy.d/access.lua maps hpc-ops to operator).
function M.new()
  local prefix = os.tmpname()
  os.remove(prefix)
  assert(os.execute("mkdir -p " .. util.shq(prefix .. "/db") .. " " .. util.shq(prefix .. "/policy.d")))
  local d = setmetatable({ prefix = prefix }, D)
  d:write("policy.d/access.lua", 'return { DEFAULTS = { group_roles = { ["hpc-ops"] = "operator" } } }\n')
  return d
end

--- Write `text` to a file in the dir.
function D:write(name, text)
  local f = assert(io.open(self.prefix .. "/" .. name, "w"))
  f:write(text)
  f:close()
end

--- Fill the directory and start slapd on `o.urls`; returns when it answers on the first.
---@param o {urls: string[], conf: string|nil, acl: string|nil, ldif: string|nil}
function D:start(o)
  local function fill(text)
    return (text:gsub("PREFIX", function() return self.prefix end):gsub("SUFFIX", M.SUFFIX))
  end
  self:write("slapd.conf", fill(CONF:gsub("CONF\n", function() return o.conf or "" end)
    :gsub("ACL\n", function() return o.acl or "" end)))
  self:write("data.ldif", fill(LDIF .. (o.ldif and ("\n" .. o.ldif) or "")))
  local function sh(cmd)
    local code, out = util.sh(cmd .. " 2>&1")
    assert(code == 0, cmd .. ": " .. tostring(out))
  end
  sh(("/usr/sbin/slapadd -q -f %s -l %s"):format(util.shq(self.prefix .. "/slapd.conf"),
    util.shq(self.prefix .. "/data.ldif")))
  local hs = {}
  for i, u in ipairs(o.urls) do hs[i] = u .. "/" end
  sh(("%s -f %s -h %s"):format(M.BIN, util.shq(self.prefix .. "/slapd.conf"), util.shq(table.concat(hs, " "))))
  util.wait_until(function()
    return util.sh(("ldapsearch -x -H %s -b %s -s base dn >/dev/null 2>&1"):format(o.urls[1], M.SUFFIX)) == 0
  end, 20, "slapd to answer")
end

--- Stop slapd (SIGTERM, waited for) and remove the dir.
function D:stop()
  local f = io.open(self.prefix .. "/slapd.pid")
  local pid = f and f:read("l")
  if f then f:close() end
  if pid and pid:match("^%d+$") then
    os.execute("kill " .. pid)
    pcall(util.wait_until, function() return os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= true end, 10,
      "slapd to stop")
  end
  os.execute("rm -rf " .. util.shq(self.prefix))
end

return M
