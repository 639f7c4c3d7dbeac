-- luacheck: std lua54+busted
-- obleth.slurm.token_source: when a Slurm JWT is renewed, what happens when renewal fails,
-- and that no status or log line carries the token. Clock, file reads and commands are
-- stand-ins; the HMAC is a stand-in too (the real one is checked on the harness cluster).
local jwt = require "obleth.slurm.jwt"
local ts = require "obleth.slurm.token_source"

-- a stand-in for obleth.crypto's HMAC (C), so this runs under plain Lua
local function hmac(k, d) return ("%064x"):format(#k + #d) end

local function fake_log()
  local l = { lines = {}, secrets = {} }
  function l.add_secret(s) l.secrets[#l.secrets + 1] = s end
  function l.warn(ev, f) l.lines[#l.lines + 1] = { "warn", ev, f } end
  function l.info(ev, f) l.lines[#l.lines + 1] = { "info", ev, f } end
  return l
end

-- a token source over a fake clock; the "key" file holds `key`
local function source(opts)
  local t = { now = 1000, reads = 0, runs = 0, key = "k1" }
  t.log = fake_log()
  t.src = ts.new { now = function() return t.now end, log = t.log, allow_command = opts and opts.allow_command,
    hmac = hmac,
    read = function(path)
      t.reads = t.reads + 1
      if t.key == nil then return nil, { code = "token_source", message = path .. ": No such file or directory" } end
      return t.key
    end,
    run = function()
      t.runs = t.runs + 1
      if t.out == nil then return nil, { code = "token_source", message = "exited with exit 1" } end
      return t.out
    end }
  return t
end


local S = { token_source = "key_file", token_key_file = "/etc/slurm/jwt_hs256.key", user = "obleth", token_lifespan = 120 }

describe("obleth.slurm.token_source", function()
  it("a static token is the saved one, never renewed", function()
    local t = source()
    assert.equal("a.b.c", t.src:token { token_source = "static", token = "a.b.c" })
    assert.equal("a.b.c", t.src:token { token = "a.b.c" })
    assert.equal(0, t.reads)
  end)

  it("mints for the user with the lifespan, and renews once a third of the life is left", function()
    local t = source()
    local a = assert(t.src:token(S))
    local c = jwt.claims(a)
    assert.same({ exp = 1120, iat = 1000, sun = "obleth" }, c)
    assert.same({ a }, t.log.secrets)
    -- 120 s life: renewed 40 s before expiry, so at 1080 and not before
    t.now = 1079
    assert.equal(a, t.src:token(S))
    assert.equal(1, t.reads)
    t.now = 1080
    local b = assert(t.src:token(S))
    assert.not_equal(a, b)
    assert.equal(1200, jwt.token_expiry(b))
    local st = t.src:status(S)
    assert.same({ source = "key_file", expires_at = 1200, renewed_at = 1080 }, st)
  end)

  it("the renewal margin is a third of the life, at least 30 s, at most half", function()
    assert.equal(600, ts.margin(0, 1800))
    assert.equal(30, ts.margin(0, 60))
    assert.equal(15, ts.margin(0, 30))
  end)

  it("a failed renewal keeps the previous token while it is valid, warns once, then fails", function()
    local t = source()
    local a = assert(t.src:token(S))
    t.key = nil -- the key file went away
    t.now = 1090
    assert.equal(a, t.src:token(S))
    t.now = 1100
    assert.equal(a, t.src:token(S))
    local warns = 0
    for _, l in ipairs(t.log.lines) do if l[2] == "slurm_token_renewal_failed" then warns = warns + 1 end end
    assert.equal(1, warns)
    assert.matches("No such file", t.src:status(S).error)
    t.now = 1120
    local tok, err = t.src:token(S)
    assert.is_nil(tok)
    assert.equal("token_key_file", err.field)
    assert.matches("cannot read the JWT key on this host", err.message)
    t.key = "k1"
    assert.is_string(t.src:token(S))
    assert.is_nil(t.src:status(S).error)
  end)

  it("changing the settings (user, file, lifespan) mints at once", function()
    local t = source()
    local a = t.src:token(S)
    local s2 = {}
    for k, v in pairs(S) do s2[k] = v end
    s2.user = "other"
    local b = t.src:token(s2)
    assert.not_equal(a, b)
    assert.equal("other", jwt.claims(b).sun)
  end)

  it("a command runs only where the host allows it, and its SLURM_JWT= line is the token", function()
    local C = { token_source = "command", token_command = "ssh login1 scontrol token lifespan=300" }
    local t = source { allow_command = false }
    local tok, err = t.src:token(C)
    assert.is_nil(tok)
    assert.equal("token_command", err.field)
    assert.matches("OBLETH_ALLOW_TOKEN_COMMAND=1", err.message)
    assert.equal(0, t.runs)

    t = source { allow_command = true }
    local minted = jwt.mint { key = "x", user = "obleth", lifespan = 300, now = 1000, hmac_sha256_hex = hmac }
    t.out = "some banner\nSLURM_JWT=" .. minted .. "\n"
    assert.equal(minted, t.src:token(C))
    assert.same({ source = "command", expires_at = 1300, renewed_at = 1000 }, t.src:status(C))
    -- a bare token works too; a line that is not one does not
    t.now = 1250
    t.out = "not a token\n"
    local again = t.src:token(C)
    assert.equal(minted, again) -- the previous one, still valid
    assert.matches("printed no token", t.src:status(C).error)
  end)

  it("status never carries the token", function()
    local t = source()
    local a = t.src:token(S)
    for _, v in pairs(t.src:status(S)) do assert.is_nil(tostring(v):find(a, 1, true)) end
  end)
end)
