-- obleth.api.replica_logs' pieces with the real host: reading the end of a job's output file from the
-- job log dir (never outside it, never through a symbolic link), Slurm's filename patterns,
-- redaction and the line cut.
local rl = require "obleth.api.replica_logs"
local sys = require "obleth.sys"

describe("the job's last words", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(sys.mkdir(dir))
  end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  local function write(path, text)
    local fh = assert(io.open(path, "wb"))
    fh:write(text)
    fh:close()
  end

  it("reads the end of a file inside the log dir; the first partial line of a long file is dropped", function()
    local lines = {}
    for i = 1, 3000 do lines[i] = ("line %04d of the engine's output"):format(i) end
    write(dir .. "/j-7.err", table.concat(lines, "\n") .. "\n")
    local text, cut = rl.read_tail(dir .. "/j-7.err", dir)
    assert.is_true(cut)
    assert.equal(rl.MAX_BYTES, #text)
    local got, truncated = rl.lines(text, 40, cut)
    assert.is_true(truncated)
    assert.equal(40, #got)
    assert.equal("line 3000 of the engine's output", got[40])
    assert.equal("line 2961 of the engine's output", got[1])
  end)

  it("refuses a path outside the log dir, with .. in it, or a symbolic link to elsewhere", function()
    write(dir .. "/secret", "x")
    os.execute(("ln -s /etc/passwd '%s/link.err'"):format(dir))
    local t, why = rl.read_tail(dir .. "/link.err", dir)
    assert.is_nil(t)
    assert.equal("log_unreadable", why.code)
    assert.equal("not a regular file", why.message)
    assert.is_nil((rl.read_tail(dir .. "/../" .. dir:match("[^/]+$") .. "/secret", dir)))
    assert.matches("outside the job log dir", select(2, rl.read_tail("/etc/passwd", dir)).message)
    assert.matches("no job log dir", select(2, rl.read_tail(dir .. "/secret", nil)).message)
    assert.matches("mounted", select(2, rl.read_tail(dir .. "/none.err", dir)).message)
  end)

  it("sys.stat(path, true) describes a symbolic link itself", function()
    os.execute(("ln -s /etc/passwd '%s/l'"):format(dir))
    assert.equal("file", sys.stat(dir .. "/l").type)
    assert.equal("link", sys.stat(dir .. "/l", true).type)
  end)

  it("fills in Slurm's %j, %A, %x, %u, %N and %%, and names no file for another pattern", function()
    local job = { id = 42, name = "obleth-x", user = "alice", node = "n1" }
    assert.equal("/l/obleth-x-42.err", rl.expand("/l/%x-%j.err", job))
    assert.equal("/l/alice/n1/0042-%.out", rl.expand("/l/%u/%N/%4A-%%.out", job))
    assert.is_nil(rl.expand("/l/%a-%j.out", job))
    assert.is_nil(rl.expand("/l/%x.out", { id = 1 }))
    assert.is_nil(rl.expand("", job))
  end)

  it("redacts token-shaped words and known secrets", function()
    local log = { redact = function(s) return (s:gsub("s3cr3tvalue", "[redacted]")) end }
    local out = rl.redact("HF_TOKEN=hf_abcdefghijklmnop Authorization: Bearer abc.def password: hunter2 "
      .. "jwt eyJhbGciOi.eyJzdWIiOi.sig key obk_0123abcd s3cr3tvalue", log)
    for _, bad in ipairs({ "hf_abc", "abc.def", "hunter2", "eyJhbGciOi", "obk_0123", "s3cr3tvalue" }) do
      assert.is_nil(out:find(bad, 1, true), bad .. " in " .. out)
    end
    assert.truthy(out:find("HF_TOKEN=[redacted]", 1, true))
  end)

  it("the report token is per replica and is not the key", function()
    local a, b = rl.token("admin-token-xyz", "0000000000000001"), rl.token("admin-token-xyz", "0000000000000002")
    assert.equal(64, #a)
    assert.are_not.equal(a, b)
    assert.is_nil(a:find("admin-token-xyz", 1, true))
  end)
end)
