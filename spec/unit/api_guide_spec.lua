-- obleth.api.guide: the guide's markdown as blocks of plain strings (nothing the page parses as HTML),
-- headings with GitHub's anchors, links only to guide pages, anchors and http(s).
local docs = require "obleth.api.guide"

describe("obleth.api.guide.convert", function()
  it("gives headings their GitHub anchor ids, duplicates numbered", function()
    local d = docs.convert("# Replicas and failures\n\n## The job's last words\n\n### Out of memory\n\n## Out of memory\n")
    assert.equal("Replicas and failures", d.title)
    assert.same({ "replicas-and-failures", "the-jobs-last-words", "out-of-memory", "out-of-memory-1" },
      { d.blocks[1].id, d.blocks[2].id, d.blocks[3].id, d.blocks[4].id })
    assert.equal("crash-at-any-point-make-chaos", docs.slug("Crash at any point (make chaos)"))
  end)

  it("keeps HTML and script as the text they are", function()
    local d = docs.convert('Hi <img src=x onerror="alert(1)"> <script>x()</script>\n')
    assert.same({ { t = "text", v = 'Hi <img src=x onerror="alert(1)"> <script>x()</script>' } }, d.blocks[1].inlines)
  end)

  it("links to guide pages and anchors; other targets are text", function()
    local r = docs.inlines("[a](recipes.md#recipe-format) [b](../README.md) [c](javascript:alert) "
      .. "[d](https://slurm.schedmd.com/) [e](#x)")
    local links = {}
    for _, x in ipairs(r) do if x.t == "link" then links[#links + 1] = x.v .. "=" .. x.href end end
    assert.same({ "a=/docs/recipes#recipe-format", "d=https://slurm.schedmd.com/", "e=#x" }, links)
  end)

  it("reads code fences, tables, lists and inline code", function()
    local d = docs.convert("```lua\n# not a heading\n```\n\n| a | `b|c` |\n| --- | --- |\n| **x** | y |\n\n"
      .. "- one\n  more\n- two\n\n1. first\n")
    assert.same({ "code", "table", "list", "list" }, { d.blocks[1].type, d.blocks[2].type, d.blocks[3].type, d.blocks[4].type })
    assert.equal("# not a heading", d.blocks[1].text)
    assert.equal("b|c", d.blocks[2].header[2][1].v)
    assert.equal("strong", d.blocks[2].rows[1][1][1].t)
    assert.equal("one more", d.blocks[3].items[1][1].v)
    assert.is_true(d.blocks[4].ordered)
    assert.equal(1, d.blocks[4].start)
  end)

  it("a numbered list split by a heading goes on from its own first number (step 3 stays 3)", function()
    local d = docs.convert("1. Pick\n2. Fill\n\n## Review\n\n3. Review and launch\n")
    assert.same({ "list", "heading", "list" }, { d.blocks[1].type, d.blocks[2].type, d.blocks[3].type })
    assert.equal(1, d.blocks[1].start)
    assert.equal(3, d.blocks[3].start)
    assert.is_nil(docs.convert("- a\n").blocks[1].start)
  end)

  it("loads only the guide's pages", function()
    assert.equal("not_found", select(2, docs.load("docs", "../README")).code)
    assert.equal("not_found", select(2, docs.load("docs", "nosuch")).code)
    local d = assert(docs.load("docs", "replicas-and-failures"))
    local ids = {}
    for _, b in ipairs(d.blocks) do if b.id then ids[b.id] = true end end
    -- every anchor the failures policy links to is a section of the page
    for _, c in ipairs(require("obleth.policy.failures").CLASSES) do
      assert.is_true(ids[c.anchor] == true, c.class .. ": no section #" .. c.anchor)
    end
  end)

  it("has every docs/*.md page, autoscaling and access too, and no page that is not there", function()
    local listed, files = {}, {}
    for _, p in ipairs(docs.PAGES) do
      assert.is_nil(listed[p.page], "listed twice: " .. p.page)
      listed[p.page] = true
    end
    local ls = assert(io.popen("ls docs"))
    for f in ls:lines() do
      local page = f:match("^(.+)%.md$")
      if page then files[page] = true end
    end
    ls:close()
    assert.same(files, listed)
    for _, page in ipairs { "autoscaling", "access" } do
      local d = assert(docs.load("docs", page))
      assert.truthy(d.title)
    end
    local r = docs.inlines("[s](managed-spec.md#wake-ups)")
    assert.equal("/docs/managed-spec#wake-ups", r[1].href)
  end)
end)
