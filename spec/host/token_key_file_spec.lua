-- The key file of token_source key_file comes through the API: reading it must not block the
-- loop (a FIFO), exhaust memory (/dev/zero, a huge file) or read /proc (the environment holds
-- the admin token); and it must be a key as Slurm keeps one: a regular file
-- owned by the service user that no group or other user may read, never obleth's own database or
-- a file under its state directory. Each refusal names the field and the reason.
local ts = require "obleth.slurm.token_source"
local sys = require "obleth.sys"

describe("token_source key file", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  local function write(name, content, mode)
    local fh = assert(io.open(dir .. "/" .. name, "wb"))
    fh:write(content)
    fh:close()
    assert(sys.chmod(dir .. "/" .. name, mode or tonumber("600", 8)))
    return dir .. "/" .. name
  end

  local function refused(path, protected)
    local k, err = ts.read_key_file(path, protected)
    assert.is_nil(k, path)
    assert.same({ "token_source", "token_key_file" }, { err.code, err.field })
    assert.equal("token_key_file " .. path .. ": ", err.message:sub(1, #path + 17))
    return err.message:sub(#path + 18)
  end

  it("reads a regular file of a key's size, owned by the service user, mode 0600", function()
    assert.equal("k3y-bytes", ts.read_key_file(write("key", "k3y-bytes")))
  end)

  it("refuses a FIFO at once (it would block the event loop), /dev/zero, /proc, a huge or empty file", function()
    assert(os.execute("mkfifo " .. dir .. "/fifo"))
    assert.equal("is not a regular file", refused(dir .. "/fifo"))
    assert.equal("is not a regular file", refused("/dev/zero"))
    assert.equal("is not a regular file", refused(dir))
    assert.matches("^must hold 1 byte to 64 KiB %(it has 0 bytes%)", refused("/proc/self/environ"))
    assert.matches("^must hold 1 byte to 64 KiB", refused(write("big", ("x"):rep(ts.MAX_KEY_FILE + 1))))
    assert.matches("^must hold 1 byte", refused(write("empty", "")))
    assert.matches("^does not exist", refused(dir .. "/missing"))
    assert.matches("^must be an absolute path", refused("relative/key"))
  end)

  it("refuses a key that group or others may read, naming the mode", function()
    assert.equal("is readable or writable by group or others (mode 0644): chmod 600 it",
      refused(write("open", "k3y", tonumber("644", 8))))
    assert.matches("mode 0640", refused(write("group", "k3y", tonumber("640", 8))))
    -- /etc/shadow: root's and group shadow's (or another user's, when this is not root)
    assert.matches("^is ", refused("/etc/shadow"))
  end)

  it("refuses a key owned by another user, naming both uids", function()
    local p = write("theirs", "k3y")
    if sys.geteuid() ~= 0 then
      pending("chown needs root; here the key below is this user's")
      return
    end
    assert(os.execute("chown 65534 " .. p))
    assert.equal("is owned by uid 65534, not by the service user (uid 0): chown it", refused(p))
  end)

  it("never takes obleth's own database or a file under its state directory, also through a link", function()
    local state = dir .. "/state"
    assert(sys.mkdir(state))
    local db = state .. "/obleth.db"
    local store = assert(require("obleth.store").open(db))
    store:close()
    assert(sys.chmod(db, tonumber("600", 8)))
    local protected = ts.protected_paths(db, "/nonexistent:" .. state)
    assert.equal("is obleth's own database, never a JWT key", refused(db, protected))
    assert(os.execute(("ln -s %s %s/link"):format(db, dir)))
    assert.equal("is obleth's own database, never a JWT key", refused(dir .. "/link", protected))
    local other = write("state/other.key", "k3y")
    assert.matches("^is under obleth's state directory .*/state, never a JWT key", refused(other, protected))
    -- the same key outside the state directory is fine
    assert.equal("k3y", ts.read_key_file(write("ok.key", "k3y"), protected))
  end)

  it("a token source refuses its own server's database through the settings' key file", function()
    local state = dir .. "/s"
    assert(sys.mkdir(state))
    local db = state .. "/obleth.db"
    local store = assert(require("obleth.store").open(db))
    store:close()
    assert(sys.chmod(db, tonumber("600", 8)))
    local src = ts.new { protected = ts.protected_paths(db, ""), log = { warn = function() end, info = function() end } }
    local tok, err = src:token { token_source = "key_file", token_key_file = db, user = "obleth" }
    assert.is_nil(tok)
    assert.equal("token_key_file", err.field)
    assert.matches("obleth's own database", err.message)
  end)
end)
