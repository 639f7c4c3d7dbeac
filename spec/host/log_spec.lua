local util = require("spec.support.util")

local function run(code)
  local status, _, err = util.run_obleth({ "lua", "-e", code })
  return status, err
end

describe("obleth.log", function()
  it("writes one logfmt line per event with level, event and sorted fields", function()
    local status, err = run([[
      local log = require("obleth.log")
      log.info("pass_done", {duration = 0.5, model = "m 1", n = 3})
    ]])
    assert.equal(0, status)
    assert.matches('level=info event=pass_done duration=0.5 model="m 1" n=3\n', err, 1, true)
  end)

  it("never prints a registered secret, nor the value of a credential-named field", function()
    local status, err = run([[
      local log = require("obleth.log")
      log.add_secret("eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig")
      log.warn("slurm_error", {message = "bad token eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig given"})
      log.info("settings", {hf_token = "hf_abcdefgh", jwt = "whatever", url = "http://x"})
      io.stdout:write(log.redact("x eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig y"))
    ]])
    assert.equal(0, status)
    assert.is_nil(err:find("c2VjcmV0", 1, true))
    assert.is_nil(err:find("hf_abcdefgh", 1, true))
    assert.is_nil(err:find("whatever", 1, true))
    assert.matches('message="bad token [redacted] given"', err, 1, true)
    assert.matches("hf_token=[redacted]", err, 1, true)
  end)

  it("ignores secrets shorter than 8 bytes: a token 'info' does not turn level=info into [redacted]", function()
    local status, err = run([[
      local log = require("obleth.log")
      log.add_secret("info")
      log.add_secret("1234567")
      log.info("pass_done", {n = 1234567})
      log.add_secret("12345678")
      log.info("pass_done", {n = 12345678})
    ]])
    assert.equal(0, status)
    assert.matches("level=info event=pass_done n=1234567\n", err)
    assert.matches("level=info event=pass_done n=%[redacted%]\n", err)
  end)

  it("matches a secret before logfmt escaping: quotes, backslashes and newlines in it do not let it out", function()
    local status, err = run([==[
      local log = require("obleth.log")
      log.add_secret('pa"ss\\wo\nrd')
      log.warn("slurm_error", {message = 'bad pa"ss\\wo\nrd given'})
    ]==])
    assert.equal(0, status)
    assert.is_nil(err:find("wo", 1, true), err)
    assert.matches('message="bad [redacted] given"', err, 1, true)
  end)

  it("keeps a multi-line value on one line", function()
    local _, err = run([[require("obleth.log").error("e", {detail = "a\nb"})]])
    assert.matches('detail="a\\nb"\n', err, 1, true)
  end)

  it("filters by level, set from OBLETH_LOG_LEVEL or set_level", function()
    local _, err = run([[
      local log = require("obleth.log")
      log.debug("hidden")
      log.set_level("debug")
      log.debug("shown")
      log.set_level("error")
      log.warn("hidden_too")
    ]])
    assert.is_nil(err:find("hidden", 1, true))
    assert.matches("event=shown", err, 1, true)
  end)

  it("uses syslog priority prefixes instead of timestamps under journald", function()
    local _, _, err = util.run_obleth({ "lua", "-e", [[
      local log = require("obleth.log"); log.error("x"); log.info("y")
    ]] })
    assert.matches("^ts=", err)
    local fh = io.popen("JOURNAL_STREAM=1:2 " .. util.shq(util.obleth()) ..
      [[ lua -e 'local log = require("obleth.log"); log.error("x"); log.info("y")' 2>&1]])
    local out = fh:read("a")
    fh:close()
    assert.matches("^<3>level=error event=x\n<6>level=info event=y\n$", out)
  end)
end)
