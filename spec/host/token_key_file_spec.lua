-- The key file of token_source key_file comes through the API: reading it must not block the
-- loop (a FIFO), exhaust memory (/dev/zero, a huge file) or read /proc (the environment holds
-- the admin token), and a refusal must not tell which files exist.
local ts = require "obleth.slurm.token_source"

describe("token_source key file", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  local function write(name, content)
    local fh = assert(io.open(dir .. "/" .. name, "wb"))
    fh:write(content)
    fh:close()
    return dir .. "/" .. name
  end

  it("reads a regular file of a key's size", function()
    assert.equal("k3y-bytes", ts.read_key_file(write("key", "k3y-bytes")))
  end)

  it("refuses a FIFO at once (it would block the event loop), /dev/zero, /proc and a huge file, with one message", function()
    assert(os.execute("mkfifo " .. dir .. "/fifo"))
    local big = write("big", ("x"):rep(ts.MAX_KEY_FILE + 1))
    local msgs = {}
    for _, p in ipairs({ dir .. "/fifo", "/dev/zero", "/proc/self/environ", big, write("empty", ""),
      dir .. "/missing", dir }) do
      local k, err = ts.read_key_file(p)
      assert.is_nil(k, p)
      assert.same({ "token_source", "token_key_file" }, { err.code, err.field })
      msgs[#msgs + 1] = err.message:gsub("^.-: ", "")
    end
    for i = 2, #msgs do assert.equal(msgs[1], msgs[i]) end
    assert.matches("not usable as a JWT key file", msgs[1], 1, true)
  end)
end)
