--- obleth.store.load_shares — each `obleth serve`'s router load window, published for the others on
-- the same database (obleth.serve.load_share; docs/autoscaling.md "Several obleth serve"): one row per
-- running instance, keyed by its id (random per start), replaced every few seconds. A row not replaced
-- for its expiry is an instance that stopped: readers leave it out, and any writer deletes it later.
-- Times are epoch seconds of the instances' clocks. Methods of the store object (obleth.store.base);
-- they raise the backend's error on failure (callers pcall: the window is never worth a failed request).
local base = require "obleth.store.base"

local Store = base.Store

--- Put this instance's row (insert or replace).
---@param instance string the instance's id
---@param doc string its window, JSON (obleth.router.load's export)
---@param now number epoch seconds: the row's updated_at
---@param meta {host: string|nil, pid: integer|nil, started_at: number} for an operator reading the table
function Store:load_share_put(instance, doc, now, meta)
  self:_x([[INSERT INTO load_shares (instance, host, pid, started_at, updated_at, doc) VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (instance) DO UPDATE SET updated_at = excluded.updated_at, doc = excluded.doc]],
    instance, meta.host, meta.pid, meta.started_at, now, doc)
end

--- The rows of the other instances replaced after `since`.
---@param since number epoch seconds
---@param except string this instance's id
---@return {instance: string, host: string|nil, pid: integer|nil, started_at: number, updated_at: number,
---  doc: string}[]
function Store:load_shares(since, except)
  return self:_q([[SELECT instance, host, pid, started_at, updated_at, doc FROM load_shares
    WHERE updated_at > ? AND instance <> ? ORDER BY instance]], since, except)
end

--- Delete the rows not replaced since `before` (instances that stopped without deleting theirs).
---@param before number epoch seconds
---@return integer rows deleted
function Store:load_shares_expire(before)
  return self:_x("DELETE FROM load_shares WHERE updated_at < ?", before)
end

--- Delete an instance's row (it stops: the others stop counting it at once).
---@param instance string
function Store:load_share_delete(instance)
  self:_x("DELETE FROM load_shares WHERE instance = ?", instance)
end
