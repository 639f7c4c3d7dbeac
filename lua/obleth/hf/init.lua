-- "From Hugging Face": read a repo on the Hub and list the engines that can
-- run it (vLLM and SGLang for safetensors, llama.cpp and Ollama for GGUF).
--
-- The pure parts (validation, detection, the GPU suggestion) live in
-- obleth.hf.repo_id, obleth.hf.detect and obleth.hf.gpus and run under plain
-- Lua 5.4; the Hub client (obleth.hf.client) needs the host. Requiring this
-- module has no side effects: the shared client behind hf.inspect is made on
-- first use.
local detect = require("obleth.hf.detect")
local gpus = require("obleth.hf.gpus")
local validate = require("obleth.hf.repo_id")

local M = {}

M.validate_repo_id = validate.repo_id
M.validate_revision = validate.revision
M.detect = detect.detect
M.parse_quant = detect.parse_quant
M.suggest_gpus = gpus.suggest

local shared

--- A Hub client with its own cache (see obleth.hf.client.new).
function M.client(opts)
  return require("obleth.hf.client").new(opts)
end

--- Inspect a repo through the shared client (its cache is shared by every
--- caller in the process). Must run inside a task.
---@param repo_id string namespace/name
---@param opts table|nil {revision=, token=, endpoint= (default HF_ENDPOINT, else https://huggingface.co),
---  timeout=seconds, gpu_type=GRES type of the target partition}
---@return table|nil result
---@return table|nil err {code, message, field?, retry_after?}
function M.inspect(repo_id, opts)
  shared = shared or M.client()
  return shared:inspect(repo_id, opts)
end

--- Forget every cached answer of the shared client.
function M.clear_cache()
  if shared then shared:clear() end
end

return M
