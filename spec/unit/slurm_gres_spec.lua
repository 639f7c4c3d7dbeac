-- luacheck: std lua54+busted
local gres = require "obleth.slurm.gres"

describe("obleth.slurm.gres", function()
  describe("parse", function()
    it("reads a typed count and ignores the socket detail", function()
      assert.same({ gpu = { total = 4, by_type = { a100 = 4 } } }, gres.parse("gpu:a100:4(S:0-1)"))
    end)

    it("does not split on the comma inside an IDX list", function()
      assert.same({ gpu = { total = 3, by_type = { a100 = 3 } } }, gres.parse("gpu:a100:3(IDX:0,2-3)"))
    end)

    it("sums several types of one name", function()
      assert.same({ gpu = { total = 4, by_type = { a = 2, b = 2 } } }, gres.parse("gpu:a:2,gpu:b:2"))
      assert.same({ gpu = { total = 6, by_type = { h100 = 2, h200 = 4 } } },
        gres.parse("gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)"))
    end)

    it("keeps an untyped count under by_type[\"\"]", function()
      assert.same({ gpu = { total = 4, by_type = { [""] = 4 } } }, gres.parse("gpu:4"))
      assert.same({ gpu = { total = 1, by_type = { [""] = 1 } } }, gres.parse("gpu:1(S:0)"))
      assert.equal("", gres.UNTYPED)
    end)

    it("reads a zero count with IDX:N/A", function()
      assert.same({ gpu = { total = 0, by_type = { h100 = 0 } } }, gres.parse("gpu:h100:0(IDX:N/A)"))
    end)

    it("gives no GRES for (null), N/A, empty and nil", function()
      assert.same({}, gres.parse("(null)"))
      assert.same({}, gres.parse(""))
      assert.same({}, gres.parse(nil))
      assert.same({}, gres.parse("N/A"))
    end)

    it("reads job TRES forms of every version", function()
      assert.same({ gpu = { total = 1, by_type = { [""] = 1 } } }, gres.parse("gres:gpu:1"))
      assert.same({ gpu = { total = 1, by_type = { a100 = 1 } } }, gres.parse("gres:gpu:a100:1"))
      assert.same({ gpu = { total = 2, by_type = { a100 = 2 } } }, gres.parse("gres/gpu:a100:2"))
      assert.same({ gpu = { total = 2, by_type = { [""] = 2 } } }, gres.parse("cpu=2,gres/gpu:2"))
    end)

    it("keeps other GRES names apart", function()
      local g = gres.parse("gpu:a100:2,shard:8,mps:100")
      assert.equal(2, g.gpu.total)
      assert.equal(8, g.shard.total)
      assert.equal(100, g.mps.total)
    end)
  end)

  describe("free", function()
    it("finds one GPU free on gpu:a100:4(S:0-1) with gpu:a100:3(IDX:0,2-3) used", function()
      assert.same({ gpu = { total = 1, by_type = { a100 = 1 } } },
        gres.free("gpu:a100:4(S:0-1)", "gpu:a100:3(IDX:0,2-3)"))
    end)

    it("counts free GPUs per type", function()
      local f = gres.free("gpu:h100:2,gpu:h200:4", "gpu:h100:2(IDX:0-1),gpu:h200:1(IDX:2)")
      assert.same({ gpu = { total = 3, by_type = { h100 = 0, h200 = 3 } } }, f)
    end)

    it("treats a missing used string as nothing used", function()
      assert.same({ gpu = { total = 4, by_type = { [""] = 4 } } }, gres.free("gpu:4", nil))
    end)

    it("never goes below zero", function()
      assert.same({ gpu = { total = 0, by_type = { a = 0 } } }, gres.free("gpu:a:1", "gpu:a:2"))
    end)
  end)

  it("never raises on a malformed entry (found by make fuzz: \":\" raised 'table index is nil')", function()
    for _, s in ipairs({ ":", "::", ":4", ",:,", "(S:0)", "gres/:2", "gres/=2" }) do
      local ok, g = pcall(gres.parse, s)
      assert.is_true(ok, s)
      assert.is_table(g, s)
    end
    assert.same({}, gres.parse(":4"))
    assert.equal(2, gres.parse("gpu:2,:3").gpu.total)
  end)
end)
