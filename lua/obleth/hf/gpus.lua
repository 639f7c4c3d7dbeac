-- GPU count suggestion from a model's weight size and the GPU type. Pure Lua.
local M = {}

local GIB = 1024 ^ 3

--- Weights are multiplied by this to leave room for activations and KV cache.
M.OVERHEAD = 1.2

--- Memory per GPU in GiB, by the GRES type names clusters commonly use.
--- Where one name covers several sizes, the larger is taken and a note says so.
M.MEMORY_GIB = {
  a100 = 80, h100 = 80, h200 = 141, gh200 = 96, b200 = 180,
  l40s = 48, l40 = 48, a40 = 48, a6000 = 48, rtx6000 = 48,
  a10 = 24, a10g = 24, l4 = 24, a30 = 24,
  v100 = 32, t4 = 16, p100 = 16,
  mi300x = 192, mi250x = 64, mi250 = 64, mi210 = 64,
}

M.AMBIGUOUS = {
  a100 = "A100 comes with 40 or 80 GiB; 80 GiB was assumed (name the type e.g. a100_40g if yours are 40 GiB)",
  v100 = "V100 comes with 16 or 32 GiB; 32 GiB was assumed",
  h100 = "H100 NVL has 94 GiB; 80 GiB was assumed",
  p100 = "P100 comes with 12 or 16 GiB; 16 GiB was assumed",
}

local function normalize(t)
  t = t:lower():gsub("^nvidia[_-]?", ""):gsub("^tesla[_-]?", ""):gsub("^amd[_-]?", "")
  return t
end

--- Memory of one GPU of type `gpu_type`.
---@param gpu_type string|nil GRES type, e.g. "a100", "h100", "a100_40g"
---@return number|nil gib
---@return string|table|nil note_or_err with gib: why the value is uncertain (string) or nil; without:
---  {code = "unknown_gpu_type"|"unknown_gpu_memory", field = "gpu_type", message}
function M.memory_gib(gpu_type)
  if type(gpu_type) ~= "string" or gpu_type == "" then
    return nil, { code = "unknown_gpu_type", field = "gpu_type", message = "the partition's GPU type is not known" }
  end
  local t = normalize(gpu_type)
  -- an explicit size in the name wins: a100_40g, a100-sxm4-80gb, h100-94gb
  local explicit = t:match("[_%-](%d+)gb?$") or t:match("[_%-](%d+)gb?[_%-]")
  if explicit and tonumber(explicit) >= 4 and tonumber(explicit) <= 1024 then
    return tonumber(explicit)
  end
  local best
  for name in pairs(M.MEMORY_GIB) do
    if t:sub(1, #name) == name and (not best or #name > #best) then best = name end
  end
  if not best then
    return nil, { code = "unknown_gpu_memory", field = "gpu_type",
      message = ("the memory of GPU type %q is not known"):format(gpu_type) }
  end
  return M.MEMORY_GIB[best], M.AMBIGUOUS[best]
end

local function next_pow2(n)
  local p = 1
  while p < n do p = p * 2 end
  return p
end

--- Suggest how many GPUs hold the weights: ceil(bytes * OVERHEAD / per-GPU
--- memory), rounded up to a power of two when the engine splits the model by
--- tensor parallelism (vLLM, SGLang need the head count divisible by it).
---@param size_bytes number|nil total weight bytes
---@param gpu_type string|nil
---@param opts table|nil {power_of_two=true}
---@return table {gpus=integer, gpu_type=, gpu_memory_gib=, need_gib=, notes={string}}
function M.suggest(size_bytes, gpu_type, opts)
  opts = opts or {}
  local pow2 = opts.power_of_two ~= false
  local out = { gpus = 1, gpu_type = gpu_type, notes = {} }
  local mem, why = M.memory_gib(gpu_type)
  out.gpu_memory_gib = mem
  if type(size_bytes) ~= "number" or size_bytes <= 0 then
    out.notes[#out.notes + 1] = "the weights' size is not known: 1 GPU suggested"
    return out
  end
  out.need_gib = math.floor(size_bytes * M.OVERHEAD / GIB * 10 + 0.5) / 10
  if not mem then
    out.notes[#out.notes + 1] = why.message .. ": 1 GPU suggested; about " .. out.need_gib
      .. " GiB of GPU memory are needed"
    return out
  end
  if why then out.notes[#out.notes + 1] = why end
  local n = math.max(1, math.ceil(size_bytes * M.OVERHEAD / (mem * GIB)))
  if pow2 then n = next_pow2(n) end
  out.gpus = n
  if n > 8 then
    out.notes[#out.notes + 1] = ("%d GPUs are more than one node usually has: spread over nodes or pick a smaller"
      .. " quantization"):format(n)
  end
  return out
end

return M
