-- A database's schema as text, one line per column, index and trigger, sorted: what two databases
-- are compared by (spec/host/store_upgrade_spec.lua: a new store against the one an earlier obleth made,
-- kept in spec/fixtures/store/). Only what a migration decides: names, declared types, NOT NULL,
-- defaults, keys, indexes, triggers; not the text a statement was written in.
local M = {}

--- The schema of an open obleth.sqlite connection.
---@param db table obleth.sqlite connection
---@return string lines, sorted
function M.sqlite(db)
  local out = {}
  local function q(sql, ...) return assert(db:query(sql, ...)) end
  for _, t in ipairs(q("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")) do
    for _, c in ipairs(q("SELECT name, type, \"notnull\" AS nn, dflt_value AS d, pk FROM pragma_table_info(?)", t.name)) do
      out[#out + 1] = ("column %s.%s %s%s%s%s"):format(t.name, c.name, c.type == "" and "(none)" or c.type,
        c.nn == 1 and " NOT NULL" or "", c.d and (" DEFAULT " .. c.d) or "", c.pk > 0 and (" pk" .. c.pk) or "")
    end
    for _, f in ipairs(q("SELECT \"table\" AS t, \"from\" AS f, \"to\" AS o, on_delete AS d FROM pragma_foreign_key_list(?)",
        t.name)) do
      out[#out + 1] = ("foreign %s.%s -> %s.%s ON DELETE %s"):format(t.name, f.f, f.t, f.o or "?", f.d)
    end
  end
  for _, i in ipairs(q("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'")) do
    local cols = {}
    for _, c in ipairs(q("SELECT name FROM pragma_index_info(?) ORDER BY seqno", i.name)) do cols[#cols + 1] = c.name end
    out[#out + 1] = ("index %s ON %s(%s)"):format(i.name, i.tbl_name, table.concat(cols, ", "))
  end
  for _, t in ipairs(q("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'")) do
    out[#out + 1] = ("trigger %s ON %s"):format(t.name, t.tbl_name)
  end
  table.sort(out)
  return table.concat(out, "\n") .. "\n"
end

--- The schema of the current schema of a PostgreSQL database, through q (a function(sql) -> rows that raises).
---@return string lines, sorted
function M.pg(q)
  local out = {}
  for _, c in ipairs(q([[SELECT table_name AS t, column_name AS c, data_type AS ty, is_nullable AS n,
      column_default AS d, is_identity AS i, identity_generation AS g FROM information_schema.columns
      WHERE table_schema = current_schema()]])) do
    out[#out + 1] = ("column %s.%s %s%s%s%s"):format(c.t, c.c, c.ty, c.n == "NO" and " NOT NULL" or "",
      (c.d and c.d ~= require("cjson").null) and (" DEFAULT " .. c.d) or "",
      c.i == "YES" and (" IDENTITY " .. tostring(c.g)) or "")
  end
  for _, i in ipairs(q([[SELECT indexname AS n, indexdef AS d FROM pg_indexes WHERE schemaname = current_schema()]])) do
    out[#out + 1] = ("index %s %s"):format(i.n, i.d)
  end
  for _, c in ipairs(q([[SELECT conrelid::regclass::text AS t, conname AS n, pg_get_constraintdef(oid) AS d
      FROM pg_constraint WHERE connamespace = current_schema()::regnamespace]])) do
    out[#out + 1] = ("constraint %s %s %s"):format(c.t, c.n, c.d)
  end
  for _, t in ipairs(q([[SELECT tgrelid::regclass::text AS t, tgname AS n, pg_get_triggerdef(oid) AS d
      FROM pg_trigger WHERE NOT tgisinternal]])) do
    out[#out + 1] = ("trigger %s %s %s"):format(t.t, t.n, t.d)
  end
  for _, f in ipairs(q([[SELECT proname AS n, md5(btrim(regexp_replace(prosrc, '\s+', ' ', 'g'))) AS h FROM pg_proc
      WHERE pronamespace = current_schema()::regnamespace]])) do
    out[#out + 1] = ("function %s body md5 %s"):format(f.n, f.h)
  end
  table.sort(out)
  return table.concat(out, "\n") .. "\n"
end

return M
