-- GPU count suggestions: bytes x 1.2 / per-GPU memory, power of two for tensor parallelism.
local gpus = require("obleth.hf.gpus")

local GIB = 1024 ^ 3

describe("obleth.hf.gpus", function()
  it("fits a 16 GB model on one 80 GiB GPU", function()
    local s = gpus.suggest(16060556376, "h100")
    assert.equal(1, s.gpus)
    assert.equal(80, s.gpu_memory_gib)
  end)

  it("takes 80 GiB for a100 and says 40/80 is ambiguous", function()
    local s = gpus.suggest(70 * GIB, "a100")
    -- 70 * 1.2 = 84 GiB > 80 GiB -> 2
    assert.equal(2, s.gpus)
    assert.truthy(table.concat(s.notes, " "):find("40 or 80", 1, true))
  end)

  it("reads an explicit size in the type name", function()
    assert.equal(40, (gpus.memory_gib("a100_40g")))
    assert.equal(80, (gpus.memory_gib("a100-sxm4-80gb")))
    assert.equal(48, (gpus.memory_gib("l40s")))
    assert.equal(24, (gpus.memory_gib("a10")))
    assert.equal(80, (gpus.memory_gib("nvidia_h100")))
  end)

  it("rounds up to a power of two for tensor parallelism", function()
    -- 141.92e9 B * 1.2 = 170.3e9 B; / 24 GiB (25.77e9 B) = 6.6 -> 7 -> 8
    assert.equal(8, gpus.suggest(141920000000, "l4").gpus)
    assert.equal(7, gpus.suggest(141920000000, "l4", { power_of_two = false }).gpus)
  end)

  it("suggests 1 GPU with a note when the GPU type is unknown", function()
    local s = gpus.suggest(100 * GIB, "mystery9000")
    assert.equal(1, s.gpus)
    assert.truthy(table.concat(s.notes, " "):find("not known", 1, true))
    assert.equal(120, s.need_gib)
    s = gpus.suggest(100 * GIB, nil)
    assert.equal(1, s.gpus)
  end)

  it("suggests 1 GPU with a note when the size is unknown", function()
    local s = gpus.suggest(nil, "h100")
    assert.equal(1, s.gpus)
    assert.truthy(s.notes[1]:find("size is not known", 1, true))
  end)

  it("says when the count passes one node", function()
    local s = gpus.suggest(470500000000, "a10")
    -- 470.5e9 * 1.2 / 24 GiB = 21.9 -> 22 -> 32
    assert.equal(32, s.gpus)
    assert.truthy(table.concat(s.notes, " "):find("more than one node", 1, true))
  end)
end)
