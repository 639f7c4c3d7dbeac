-- F4: the database location is read by allowlist (sqlite:PATH, a plain path, a postgresql:// URI);
-- a password in it never reaches a log line, an error or a file name. Runs `obleth serve` for real,
-- against Debian's PostgreSQL started by spec.support.pg.
local util = require "spec.support.util"
local pgs = require "spec.support.pg"
local available, why = pgs.available()

local TOKEN = "adminadminadmin0123456789"

-- run serve in a fresh directory with OBLETH_DATABASE_URL = url until it exits (or, when `started`,
-- until it logs serve_started, then stop it); returns its exit status, its whole output, the dir's files
local function serve(url, started)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. util.shq(dir)))
  local cmd = ("cd %s && echo $$ && exec env OBLETH_ADMIN_TOKEN=%s OBLETH_DATABASE_URL=%s OBLETH_DB= "
    .. "timeout 60 %s serve --listen 127.0.0.1:0 2>&1"):format(util.shq(dir), TOKEN, util.shq(url),
    util.shq(util.obleth()))
  local fh = assert(io.popen(cmd))
  local pid = tonumber(fh:read("l"))
  local lines = {}
  for line in fh:lines() do
    lines[#lines + 1] = line
    if started and line:find("serve_started", 1, true) then
      require("obleth.sys").kill(pid, "TERM")
    end
  end
  local _, _, code = fh:close()
  local ls = io.popen("ls -A " .. util.shq(dir)):read("a")
  os.execute("rm -rf " .. util.shq(dir))
  return code, table.concat(lines, "\n"), ls
end

describe("the database location (OBLETH_DATABASE_URL)", function()
  it("refuses a libpq keyword string: exit 2, no SQLite file, the password nowhere", function()
    local code, out, files = serve("host=127.0.0.1 port=1 password=SECRETPW10")
    assert.equal(2, code)
    assert.matches("postgresql://", out, 1, true)
    assert.is_nil(out:find("SECRETPW10", 1, true))
    assert.equal("", files)
  end)

  it("refuses a near-miss URI (one slash) without quoting it", function()
    local code, out, files = serve("postgresql:/u:SECRETPWa@h/db")
    assert.equal(2, code)
    assert.is_nil(out:find("SECRETPWa", 1, true))
    assert.equal("", files)
  end)

  it("refuses a badly percent-encoded password without quoting it (libpq would)", function()
    local code, out = serve("postgresql://u:SECRET%zzPW9@127.0.0.1:1/db")
    assert.equal(2, code)
    assert.is_nil(out:find("SECRET", 1, true))
    assert.is_nil(out:find("PW9", 1, true))
  end)

  it("names an unreachable database by its parsed parts only (no password, no sslpassword)", function()
    local code, out = serve("postgresql://u:SECRETPW11@127.0.0.1:1/db?password=SECRETPW13&sslpassword=SECRETPW12")
    assert.equal(1, code)
    assert.matches("postgresql://u@127.0.0.1:1/db", out, 1, true)
    assert.is_nil(out:find("SECRETPW", 1, true))
  end)

  if not available then
    it("needs PostgreSQL", function() pending(why) end)
    return
  end

  it("logs serve_started with the masked location on a real PostgreSQL", function()
    local url, drop = pgs.database()
    -- trust authentication: the password is ignored by the server, but must not be shown
    local with_pw = url:gsub("^postgresql://obleth@", "postgresql://obleth:SECRETPW14@")
    with_pw = with_pw .. (with_pw:find("?", 1, true) and "&" or "?") .. "sslpassword=SECRETPW15&application_name=x"
    local _, out = serve(with_pw, true)
    drop()
    assert.matches("serve_started", out, 1, true)
    -- quoted when the masked location has a ? (a socket's host=...), bare for a TCP server
    assert.matches('db="?postgresql://obleth@', out)
    assert.is_nil(out:find("SECRETPW", 1, true))
  end)
end)
