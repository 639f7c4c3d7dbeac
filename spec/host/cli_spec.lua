local util = require("spec.support.util")

describe("the obleth command", function()
  it("prints its version", function()
    local status, out = util.run_obleth({ "version" })
    assert.equal(0, status)
    assert.matches("^obleth %d+%.%d+%.%d+ %(Lua 5%.4", out)
  end)

  it("prints help listing every command", function()
    local status, out = util.run_obleth({ "help" })
    assert.equal(0, status)
    for _, cmd in ipairs({ "serve", "provisioner", "slurm", "repl", "lua FILE", "lua -e CODE", "version" }) do
      assert.matches(cmd, out, 1, true)
    end
  end)

  it("refuses an unknown command with status 2", function()
    local status, _, err = util.run_obleth({ "frobnicate" })
    assert.equal(2, status)
    assert.matches("unknown command 'frobnicate'", err, 1, true)
  end)

  it("runs a file with its arguments in arg and ...", function()
    local f = util.tmpfile("local a, b = ...; print(arg[0] ~= nil, arg[1], arg[2], a, b)")
    local status, out = util.run_obleth({ "lua", f, "x", "y" })
    os.remove(f)
    assert.equal(0, status)
    assert.equal("true\tx\ty\tx\ty\n", out)
  end)

  it("reports a syntax error in a file and exits 1", function()
    local f = util.tmpfile("local = 1")
    local status, _, err = util.run_obleth({ "lua", f })
    os.remove(f)
    assert.equal(1, status)
    assert.matches("<name> expected", err, 1, true)
  end)

  it("finds its Lua modules from the source tree and when installed under a prefix", function()
    local prefix = os.tmpname()
    os.remove(prefix)
    local root = util.root()
    local ok = os.execute(("make -s -C %s install PREFIX=%s >/dev/null 2>&1"):format(util.shq(root), util.shq(prefix)))
    assert.is_true(ok)
    local fh = io.popen(("cd / && %s/bin/obleth lua -e 'local s = require(\"obleth.sys\"); print(s.paths.lua)' 2>&1")
      :format(util.shq(prefix)))
    local out = fh:read("a")
    fh:close()
    os.execute("rm -rf " .. util.shq(prefix))
    assert.equal(prefix .. "/share/obleth/lua\n", out)
  end)

  it("has no globals beyond the standard library and arg", function()
    local status, out = util.run_obleth({ "lua", "-e", [[
      for _, m in ipairs{"obleth.loop", "obleth.http", "obleth.log", "obleth.yaml", "obleth.sys"} do require(m) end
      local std = {}
      for k in pairs{_G=1,_VERSION=1,arg=1,assert=1,collectgarbage=1,coroutine=1,debug=1,dofile=1,error=1,
        getmetatable=1,io=1,ipairs=1,load=1,loadfile=1,math=1,next=1,os=1,package=1,pairs=1,pcall=1,print=1,
        rawequal=1,rawget=1,rawlen=1,rawset=1,require=1,select=1,setmetatable=1,string=1,table=1,tonumber=1,
        tostring=1,type=1,utf8=1,warn=1,xpcall=1} do std[k] = true end
      for k in pairs(_G) do if not std[k] then print("global: " .. k) end end
    ]] })
    assert.equal(0, status)
    assert.equal("", out)
  end)
end)
