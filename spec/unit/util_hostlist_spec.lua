-- luacheck: std lua54+busted
local hostlist = require "obleth.util.hostlist"

describe("obleth.util.hostlist", function()
  describe("expand", function()
    it("expands ranges and single names in order", function()
      assert.same({ "n0", "n1", "n2", "n5", "gpu01" }, hostlist.expand("n[0-2,5],gpu01"))
    end)

    it("keeps zero padding of ranges", function()
      assert.same({ "node01", "node02", "node03" }, hostlist.expand("node[01-03]"))
      assert.same({ "cn004", "cn005", "cn006" }, hostlist.expand("cn[004-006]"))
    end)

    it("multiplies several bracket groups", function()
      assert.same({ "r1n1", "r1n2", "r2n1", "r2n2" }, hostlist.expand("r[1-2]n[1-2]"))
    end)

    it("expands the 512-node partition of the 24.05 capture", function()
      local l = hostlist.expand("cn[001-080,101-532]")
      assert.equal(512, #l)
      assert.equal("cn001", l[1])
      assert.equal("cn080", l[80])
      assert.equal("cn101", l[81])
      assert.equal("cn532", l[512])
    end)

    it("treats empty, nil and Slurm's placeholders as no hosts", function()
      assert.same({}, hostlist.expand(nil))
      assert.same({}, hostlist.expand(""))
      assert.same({}, hostlist.expand("None assigned"))
      assert.same({}, hostlist.expand("(null)"))
    end)

    it("refuses malformed expressions with nil, err", function()
      local l, err = hostlist.expand("n[3-1]")
      assert.is_nil(l)
      assert.matches("descending", err)
      l, err = hostlist.expand("n[1-2")
      assert.is_nil(l)
      assert.is_string(err)
      l, err = hostlist.expand("n[a-b]")
      assert.is_nil(l)
      assert.is_string(err)
    end)

    it("refuses an expansion larger than MAX_HOSTS", function()
      local l, err = hostlist.expand("n[0-99999999]")
      assert.is_nil(l)
      assert.matches("too large", err)
    end)

    it("refuses a ] with no [ before it (found by make fuzz: 'n0],g[1-2]' expanded to names holding ] and ,)", function()
      for _, e in ipairs({ "n_000-01020],gpw[1-2]n[1-2]", "n1],n2", "]", "n[1-2]]" }) do
        local l, err = hostlist.expand(e)
        assert.is_nil(l, e)
        assert.matches("unbalanced", err)
      end
    end)

    it("shares one budget across the values of an answer", function()
      local budget = { left = 5 }
      assert.same({ "n0", "n1", "n2" }, hostlist.expand("n[0-2]", budget))
      assert.equal(2, budget.left)
      local l, err = hostlist.expand("m[0-2]", budget)
      assert.is_nil(l)
      assert.matches("too large", err)
      assert.same({ "a", "b" }, hostlist.expand("a,b", budget))
      assert.equal(0, budget.left)
    end)

    it("refuses a huge range times several bracket groups at once, without the count wrapping past 2^63", function()
      -- found by make fuzz: 2.1e17 names times 84 tails passed the budget check and expanded until memory ran out
      local t0 = os.clock()
      local l, err = hostlist.expand("[1-210666666666466666][1][1][1-2][1-2][0-20]", { left = 5000 })
      assert.is_nil(l)
      assert.matches("too large", err)
      l, err = hostlist.expand("n[1-999999999999999999][0-99]")
      assert.is_nil(l)
      assert.matches("too large", err)
      assert.is_true(os.clock() - t0 < 1)
      assert.equal(6, #hostlist.expand("n[1-3][1-2]"))
    end)

    it("refuses numbers too large for an integer instead of raising", function()
      local l, err = hostlist.expand("n[99999999999999999999-99999999999999999999]")
      assert.is_nil(l)
      assert.matches("too large", err)
      l, err = hostlist.expand("n99999999999999999999[1-2]")
      assert.same({ "n999999999999999999991", "n999999999999999999992" }, l, err)
    end)
  end)

  describe("compress", function()
    it("merges consecutive numbers of one prefix and width", function()
      assert.equal("n[0-2,5],gpu01", hostlist.compress({ "n0", "n1", "n2", "n5", "gpu01" }))
      assert.equal("node[01-03]", hostlist.compress({ "node03", "node01", "node02" }))
    end)

    it("keeps a lone host without brackets and plain names as they are", function()
      assert.equal("gpu01", hostlist.compress({ "gpu01" }))
      assert.equal("localhost", hostlist.compress({ "localhost" }))
      assert.equal("", hostlist.compress({}))
    end)

    it("does not merge different paddings", function()
      assert.equal("n[1-2],n[01-02]", hostlist.compress({ "n1", "n2", "n01", "n02" }))
    end)

    it("keeps a name whose number no integer holds as it is (found by make fuzz: it raised)", function()
      local long = "*" .. ("5"):rep(27)
      assert.equal(long, hostlist.compress({ long }))
      assert.equal("n1," .. long, hostlist.compress({ "n1", long }))
    end)

    it("round-trips with expand", function()
      local expr = "cn[001-080,101-532],gpu[1-2],login"
      assert.equal(expr, hostlist.compress(hostlist.expand(expr)))
    end)
  end)

  describe("split_top (the one comma rule of hostlists and GRES strings)", function()
    it("splits only at commas outside the pair it is given", function()
      assert.same({ "n[1,3]", "m", "" }, hostlist.split_top("n[1,3],m,", "[", "]"))
      assert.same({ "gpu:a100:2(IDX:0,1)", "mps:100" }, hostlist.split_top("gpu:a100:2(IDX:0,1),mps:100", "(", ")"))
      -- the other pair's characters are plain text
      assert.same({ "x[1", "2]y" }, hostlist.split_top("x[1,2]y", "(", ")"))
    end)

    it("answers nil when a close comes before its open", function()
      assert.is_nil(hostlist.split_top("n1],n[2", "[", "]"))
      assert.is_nil(hostlist.split_top("gpu:2),x", "(", ")"))
    end)

    it("is the splitter obleth.slurm.gres uses", function()
      local gres = require "obleth.slurm.gres"
      assert.same({ gpu = { total = 3, by_type = { a = 1, b = 2 } } }, gres.parse("gpu:a:1(IDX:0),gpu:b:2(IDX:1,2)"))
      local src = assert(io.open("lua/obleth/slurm/gres.lua")):read("a")
      assert.truthy(src:find("hostlist.split_top", 1, true))
      assert.is_nil(src:find('== ","', 1, true))
    end)
  end)
end)
