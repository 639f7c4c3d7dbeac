--- The guide pages for the dashboard (docs/dashboard.md, "Guide pages"): GET /api/v1/docs lists them,
--- GET /api/v1/docs/{page} answers one converted to blocks of plain text (obleth.api.guide).
local errors = require "obleth.api.errors"
local json = require "obleth.util.json"
local docs = require "obleth.api.guide"

local M = {}

--- Where the guide's markdown is: `<share>/docs` (the source tree's docs/, or the installed
--- share/obleth/docs), or OBLETH_DOCS_DIR.
function M.dir()
  local env = os.getenv("OBLETH_DOCS_DIR")
  if env and env ~= "" then return env end
  return (require("obleth.sys").paths.share or ".") .. "/docs"
end

-- Mark every list of the converted document as a JSON array (an empty one too).
local function _arrays(doc)
  local function arr(t) return json.array(t or {}) end
  local function runs(t) return arr(t) end
  for _, b in ipairs(doc.blocks) do
    if b.inlines then b.inlines = runs(b.inlines) end
    if b.items then for k, it in ipairs(b.items) do b.items[k] = runs(it) end b.items = arr(b.items) end
    if b.header then
      for k, c in ipairs(b.header) do b.header[k] = runs(c) end
      b.header = arr(b.header)
      for r, row in ipairs(b.rows) do
        for k, c in ipairs(row) do row[k] = runs(c) end
        b.rows[r] = arr(row)
      end
      b.rows = arr(b.rows)
    end
  end
  doc.blocks = arr(doc.blocks)
  doc.pages = arr(doc.pages)
  return doc
end

local function list()
  return 200, { pages = json.array(docs.PAGES) }
end

local function get_page(ctx)
  local doc, err = docs.load(M.dir(), ctx.params.page)
  if not doc then return errors.fail(404, err.code, err.message, "page") end
  return 200, _arrays(doc), { ["Cache-Control"] = "no-cache" }
end

M.routes = {
  { "GET", "/api/v1/docs", list, summary = "The guide pages the dashboard shows: [{page, title}]" },
  { "GET", "/api/v1/docs/{page}", get_page,
    summary = "One guide page as blocks of plain text (headings with anchor ids, paragraphs, lists, code, "
      .. "tables; inline code, strong, emphasis, links): rendered as text, never as HTML" },
}

return M
