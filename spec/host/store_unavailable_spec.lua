-- F5: with PostgreSQL down, `obleth serve` answers reads and the router's
-- lookups with 503 `storage` and Retry-After (writes already did), not 500 "internal"; and serves
-- again once the server is back. A server of its own (Debian's, spec/support/pg.sh), stopped and
-- started with pg_ctl; `obleth serve` runs for real.
local pgs = require "spec.support.pg"
local util = require "spec.support.util"
local available, why = pgs.available()
local BIN = os.getenv("OBLETH_PG_BIN") or "/usr/lib/postgresql/15/bin"
local has_pg_ctl = io.open(BIN .. "/pg_ctl") ~= nil

local TOKEN = "adminadminadmin0123456789"
local PORT -- the port serve took (it listens on port 0: any free one)

-- status, headers (lower-case names), body of one request
local function http(method, path, auth, body)
  local cmd = ("curl -s -D - -X %s -H %s %s %s"):format(method, util.shq("Authorization: Bearer " .. auth),
    body and ("-H 'Content-Type: application/json' --data " .. util.shq(body)) or "",
    util.shq(("http://127.0.0.1:%d%s"):format(PORT, path)))
  local out = io.popen(cmd):read("a")
  local head, rest = out:match("^(.-)\r\n\r\n(.*)$")
  local status = tonumber(head:match("^HTTP/%S+ (%d+)"))
  local h = {}
  for k, v in head:gmatch("\n([^:\r\n]+):%s*([^\r\n]*)") do h[k:lower()] = v end
  return status, h, rest
end

describe("obleth serve with its PostgreSQL down", function()
  if not available or not has_pg_ctl then
    it("needs PostgreSQL", function() pending(why or "pg_ctl is missing (Debian package postgresql-15)") end)
    return
  end
  local root = util.root()
  local pgsh = root .. "/spec/support/pg.sh"
  local as_pg = require("obleth.sys").geteuid() == 0
    and "runuser -u postgres -- " or ""
  local dir, url, proc

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    local p = io.popen(util.shq(pgsh) .. " start " .. util.shq(dir))
    url = p:read("a"):match("(postgresql://%S+)")
    assert(p:close() and url, "pg.sh start failed")
  end)
  teardown(function()
    if proc then proc:kill(); proc:wait() end
    os.execute(util.shq(pgsh) .. " stop " .. util.shq(dir))
  end)

  it("answers reads and the router with 503 storage + Retry-After, then recovers", function()
    local cmd = ("echo $$; cd %s && exec env OBLETH_ADMIN_TOKEN=%s timeout 120 %s serve --db %s "
      .. "--listen 127.0.0.1:0 2>&1"):format(util.shq(dir), TOKEN, util.shq(util.obleth()), util.shq(url))
    local fh = assert(io.popen(cmd))
    local pid = tonumber(fh:read("l"))
    proc = { kill = function() require("obleth.sys").kill(pid, "TERM") end, wait = function() fh:read("a"); fh:close() end }
    for line in fh:lines() do
      if line:find("serve_started", 1, true) then
        PORT = tonumber(line:match('listen="?http://127%.0%.0%.1:(%d+)'))
        break
      end
    end
    assert.is_not_nil(PORT, "serve_started names its port")
    assert.equal(200, (http("GET", "/api/v1/models", TOKEN)))

    assert(os.execute(as_pg .. util.shq(BIN .. "/pg_ctl") .. " -D " .. util.shq(dir .. "/data") .. " -m fast -w -s stop"))
    for _, path in ipairs({ "/api/v1/models", "/api/v1/keys", "/api/v1/audit" }) do
      local status, h, body = http("GET", path, TOKEN)
      assert.equal(503, status, path .. ": " .. body)
      assert.matches('"code":"storage"', body, 1, true)
      assert.is_not_nil(h["retry-after"], path)
    end
    local status, h, body = http("POST", "/v1/chat/completions", "obk_0123456789abcdef0123456789abcdef",
      '{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    assert.equal(503, status, body)
    assert.matches('"code":"storage"', body, 1, true)
    assert.matches('"type":"server_error"', body, 1, true)
    assert.is_not_nil(h["retry-after"])

    -- pg_ctl restart on a stopped server starts it with its last options (postmaster.opts)
    assert(os.execute(util.shq(pgsh) .. " restart " .. util.shq(dir) .. " 2>/dev/null"))
    assert.equal(200, (http("GET", "/api/v1/models", TOKEN)))
  end)
end)
