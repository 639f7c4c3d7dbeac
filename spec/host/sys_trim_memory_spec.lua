-- obleth.sys.trim_memory: the provisioner's loop gives the heap its pass freed back to the system
-- (obleth.provisioner.tidy): a process that freed a large allocation holds less resident memory after.
local sys = require "obleth.sys"

local function rss_kib()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmRSS:%s+(%d+)")
    if v then return tonumber(v) end
  end
end

describe("obleth.sys.trim_memory", function()
  it("answers a boolean, and after a pass-sized garbage heap is collected the resident memory goes down", function()
    local before
    do -- many small blocks, like a decoded job listing; garbage once this block ends
      local t = {}
      for i = 1, 200000 do t[i] = { i, tostring(i), { x = i } } end
      assert.equal(200000, #t)
      before = rss_kib()
    end
    collectgarbage("collect") -- alone, this gives back about a tenth of it (glibc keeps the rest)
    local trimmed = sys.trim_memory()
    assert.is_boolean(trimmed)
    -- false: an allocator other than glibc's (a sanitizer build) that malloc_trim cannot reach
    if trimmed then
      local after = rss_kib()
      assert.is_true(after < before - 30 * 1024, ("resident %d KiB before, %d KiB after"):format(before, after))
    end
  end)
end)
