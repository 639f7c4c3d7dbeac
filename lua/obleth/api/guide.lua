--- obleth.api.guide — the guide pages (docs/*.md) as data the dashboard renders as text
-- (GET /api/v1/docs/{page}, docs/dashboard.md "Guide pages").
--
-- The markdown is converted here, on the server, into blocks and inline runs of plain strings:
-- the page builds elements from them and never parses HTML, so nothing in a document can become
-- markup or script. Supported: ATX headings (each with the GitHub-style anchor id), paragraphs,
-- bullet and numbered lists (one level; continuation lines join the item), fenced code blocks,
-- pipe tables, block quotes (as paragraphs); inline `code`, **strong**, *emphasis* / _emphasis_ and
-- [links](target). A link to another guide page becomes `/docs/<page>#anchor`; to any other .md
-- file, plain text; to http(s), kept as it is; anything else (javascript:, data:) is plain text.
local M = {}

--- The guide pages, in the header's order: {page, title}. The one list of them: every docs/*.md is
--- here (spec/unit/api_guide_spec.lua checks the folder against it), the dashboard's guide first,
--- then the operator's and the reference pages.
M.PAGES = {
  { page = "launch-on-slurm", title = "Launch on Slurm" },
  { page = "deployments", title = "Deployments" },
  { page = "replicas-and-failures", title = "Replicas and failures" },
  { page = "autoscaling", title = "Autoscaling" },
  { page = "recipes", title = "Recipes" },
  { page = "huggingface", title = "From Hugging Face" },
  { page = "policy", title = "Policy" },
  { page = "access", title = "Access" },
  { page = "operations", title = "Operations" },
  { page = "repl", title = "REPL" },
  { page = "router", title = "Router" },
  { page = "api", title = "Management API" },
  { page = "launch", title = "Launch flow" },
  { page = "managed-spec", title = "Managed specs" },
  { page = "errors", title = "Errors" },
  { page = "dashboard", title = "Dashboard" },
  { page = "slurm-versions", title = "Slurm versions" },
  { page = "architecture", title = "Architecture" },
  { page = "performance", title = "Performance" },
}
local KNOWN = {}
for _, p in ipairs(M.PAGES) do KNOWN[p.page] = p end

--- The largest document read (bytes).
M.MAX_BYTES = 512 * 1024

--- The anchor id GitHub gives a heading: lower case, punctuation removed (but - and _), spaces to -.
---@param text string the heading's text (inline markup already removed)
---@return string
function M.slug(text)
  local s = text:lower():gsub("[^%w%s%-_]", ""):gsub("%s", "-")
  return s
end

-- A link target as the page may use it, or nil (shown as text).
local function _href(target)
  if target:match("^https?://") then return target end
  local page, anchor = target:match("^([%w%-_]+)%.md(#?[%w%-_]*)$")
  if page and KNOWN[page] then return "/docs/" .. page .. anchor end
  local own = target:match("^#([%w%-_]+)$")
  if own then return "#" .. own end
  return nil
end

--- Inline runs of a line of text: {t = "text"|"code"|"strong"|"em"|"link", v = string, href = string?}.
---@param s string
---@return table[]
function M.inlines(s)
  local out = {}
  local buf = {}
  local function flush()
    if #buf > 0 then out[#out + 1] = { t = "text", v = table.concat(buf) } buf = {} end
  end
  local i, n = 1, #s
  while i <= n do
    local c = s:sub(i, i)
    if c == "`" then
      local ticks = s:match("^`+", i)
      local close = s:find(ticks, i + #ticks, true)
      if close then
        flush()
        local v = s:sub(i + #ticks, close - 1):gsub("^ (.*) $", "%1")
        out[#out + 1] = { t = "code", v = v }
        i = close + #ticks
      else
        buf[#buf + 1] = ticks
        i = i + #ticks
      end
    elseif s:sub(i, i + 1) == "**" and s:find("**", i + 2, true) then
      local close = s:find("**", i + 2, true)
      flush()
      out[#out + 1] = { t = "strong", v = (s:sub(i + 2, close - 1):gsub("`", "")) }
      i = close + 2
    elseif (c == "*" or c == "_") and s:sub(i + 1, i + 1):match("%S") and (i == 1 or s:sub(i - 1, i - 1):match("[%s%(%[\"']"))
      and s:find(c, i + 1, true) then
      local close = s:find(c, i + 1, true)
      flush()
      out[#out + 1] = { t = "em", v = s:sub(i + 1, close - 1) }
      i = close + 1
    elseif c == "[" then
      local text, target, stop = s:match("^%[([^%]]*)%]%(([^%)%s]*)%)()", i)
      if text then
        flush()
        local href = _href(target)
        local label = text:gsub("`", "")
        if href then out[#out + 1] = { t = "link", v = label, href = href }
        else out[#out + 1] = { t = "text", v = label } end
        i = stop
      else
        buf[#buf + 1] = c
        i = i + 1
      end
    elseif c == "\\" and s:sub(i + 1, i + 1):match("[%p]") then
      buf[#buf + 1] = s:sub(i + 1, i + 1)
      i = i + 2
    else
      buf[#buf + 1] = c
      i = i + 1
    end
  end
  flush()
  return out
end

local function _plain(runs)
  local t = {}
  for _, r in ipairs(runs) do t[#t + 1] = r.v end
  return table.concat(t)
end

local function _cells(line)
  local body = line:gsub("^%s*|", ""):gsub("|%s*$", "")
  local cells = {}
  -- split on | not inside backticks and not escaped
  local cur, in_code, i = {}, false, 1
  while i <= #body do
    local c = body:sub(i, i)
    if c == "\\" and body:sub(i + 1, i + 1) == "|" then cur[#cur + 1] = "\\|" i = i + 2
    else
      if c == "`" then in_code = not in_code end
      if c == "|" and not in_code then cells[#cells + 1] = table.concat(cur) cur = {}
      else cur[#cur + 1] = c end
      i = i + 1
    end
  end
  cells[#cells + 1] = table.concat(cur)
  for k, v in ipairs(cells) do cells[k] = M.inlines((v:gsub("^%s+", ""):gsub("%s+$", ""))) end
  return cells
end

--- Convert a markdown text into {title, blocks}. Blocks: {type = "heading", level, id, inlines},
--- {type = "paragraph", inlines}, {type = "list", ordered, start (the first number, ordered lists), items = {inlines...}},
--- {type = "code", text}, {type = "table", header = {cells}, rows = {{cells}}}; a cell is inlines.
---@param text string
---@return {title: string|nil, blocks: table[]}
function M.convert(text)
  local lines = {}
  for l in (text:gsub("\r\n", "\n") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local blocks, title, used = {}, nil, {}
  local i = 1
  local para = nil
  local function end_para()
    if para then blocks[#blocks + 1] = { type = "paragraph", inlines = M.inlines(table.concat(para, " ")) } para = nil end
  end
  while i <= #lines do
    local l = lines[i]
    local fence = l:match("^%s*(```+)") or l:match("^%s*(~~~+)")
    if fence then
      end_para()
      local code = {}
      i = i + 1
      while i <= #lines and not lines[i]:match("^%s*" .. fence:gsub("%p", "%%%0")) do code[#code + 1] = lines[i] i = i + 1 end
      blocks[#blocks + 1] = { type = "code", text = table.concat(code, "\n") }
      i = i + 1
    elseif l:match("^#+%s") then
      end_para()
      local hashes, rest = l:match("^(#+)%s+(.-)%s*#*%s*$")
      local runs = M.inlines(rest)
      local plain = _plain(runs)
      local id = M.slug(plain)
      if used[id] then
        local k = used[id]
        used[id] = k + 1
        id = id .. "-" .. k
      else
        used[id] = 1
      end
      if #hashes == 1 and not title then title = plain end
      blocks[#blocks + 1] = { type = "heading", level = math.min(#hashes, 6), id = id, inlines = runs }
      i = i + 1
    elseif l:match("^%s*|") and lines[i + 1] and lines[i + 1]:match("^%s*|[%s:|-]+|?%s*$") then
      end_para()
      local t = { type = "table", header = _cells(l), rows = {} }
      i = i + 2
      while i <= #lines and lines[i]:match("^%s*|") do t.rows[#t.rows + 1] = _cells(lines[i]) i = i + 1 end
      blocks[#blocks + 1] = t
    elseif l:match("^%s*[-*+]%s+") or l:match("^%s*%d+[.)]%s+") then
      end_para()
      local first = l:match("^%s*(%d+)[.)]%s+")
      local ordered = first ~= nil
      local items = {}
      while i <= #lines do
        local cur = lines[i]
        local item = cur:match("^%s*[-*+]%s+(.*)$") or cur:match("^%s*%d+[.)]%s+(.*)$")
        if item then
          items[#items + 1] = { item }
        elseif cur:match("^%s+%S") and #items > 0 then
          local last = items[#items]
          last[#last + 1] = (cur:gsub("^%s+", ""))
        else
          break
        end
        i = i + 1
      end
      local out = {}
      for k, parts in ipairs(items) do out[k] = M.inlines(table.concat(parts, " ")) end
      -- a numbered list goes on from its first number ("3. Review" after a heading is step 3)
      blocks[#blocks + 1] = { type = "list", ordered = ordered, start = first and tonumber(first) or nil, items = out }
    elseif l:match("^%s*$") then
      end_para()
      i = i + 1
    else
      para = para or {}
      para[#para + 1] = (l:gsub("^%s*>%s?", ""):gsub("^%s+", ""))
      i = i + 1
    end
  end
  end_para()
  return { title = title, blocks = blocks }
end

--- The guide page `page` read from dir (docs/<page>.md), converted.
---@param dir string the docs directory
---@param page string
---@return table|nil doc {page, title, blocks, pages}, table|nil err {code, message}
function M.load(dir, page)
  local meta = KNOWN[page]
  if not meta then
    return nil, { code = "not_found", message = ("no guide page %q"):format(tostring(page)) }
  end
  local fh = io.open(dir .. "/" .. page .. ".md", "rb")
  if not fh then return nil, { code = "not_found", message = ("the guide page %s is not installed in %s"):format(page, dir) } end
  local text = fh:read(M.MAX_BYTES) or ""
  fh:close()
  local doc = M.convert(text)
  doc.page = page
  doc.title = doc.title or meta.title
  doc.pages = M.PAGES
  return doc
end

return M
