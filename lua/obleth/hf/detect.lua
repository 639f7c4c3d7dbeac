-- Which engines can run a Hugging Face repo, from its model-info JSON alone.
-- Pure Lua (no host modules): facts in, a decision out, with notes saying why.
--
-- Input: the body of GET /api/models/{repo_id}[/revision/{rev}]?blobs=true as
-- decoded JSON: `id`, `sha`, `siblings` [{rfilename, size?, lfs?{size}}],
-- `safetensors` {parameters={DTYPE=n}, total}, `gguf` {total, architecture,
-- context_length}, `config`, `tags`, `cardData`, `gated`. Any of them may be
-- absent, or JSON null (cjson.null, a light userdata): anything of the wrong
-- type counts as absent.
local gpus = require("obleth.hf.gpus")
local validate = require("obleth.hf.repo_id")

local M = {}

local function tbl(v) return type(v) == "table" and v or nil end
local function str(v) return type(v) == "string" and v or nil end
local function num(v) return type(v) == "number" and v == v and v >= 0 and v or nil end

local function basename(p) return p:match("([^/]*)$") end
local function dirname(p) return p:match("^(.*)/[^/]*$") end

-- Bytes per element of each safetensors dtype (safetensors.parameters counts
-- elements per dtype, so packed int4 in I32 tensors is counted right).
local DTYPE_BYTES = {
  F64 = 8, I64 = 8, U64 = 8, F32 = 4, I32 = 4, U32 = 4, F16 = 2, BF16 = 2, I16 = 2, U16 = 2,
  F8_E4M3 = 1, F8_E5M2 = 1, F8_E8M0 = 1, I8 = 1, U8 = 1, BOOL = 1,
}

-- Bits per weight of the GGUF quantizations (approximate), to order choices.
local QUANT_BITS = {
  IQ1_S = 1.56, IQ1_M = 1.75, TQ1_0 = 1.69, TQ2_0 = 2.06, IQ2_XXS = 2.06, IQ2_XS = 2.31, IQ2_S = 2.5,
  IQ2_M = 2.7, Q2_K = 2.63, Q2_K_S = 2.6, Q2_K_L = 2.9, Q2_K_XL = 2.9, IQ3_XXS = 3.06, IQ3_XS = 3.3,
  IQ3_S = 3.44, IQ3_M = 3.66, Q3_K_S = 3.5, Q3_K_M = 3.9, Q3_K_L = 4.27, Q3_K_XL = 4.3, IQ4_XS = 4.25,
  IQ4_NL = 4.5, Q4_0 = 4.5, Q4_1 = 5.0, Q4_K_S = 4.58, Q4_K_M = 4.85, Q4_K_L = 5.0, Q4_K_XL = 5.0,
  MXFP4 = 4.25, MXFP4_MOE = 4.25, Q5_0 = 5.5, Q5_1 = 6.0, Q5_K_S = 5.54, Q5_K_M = 5.69, Q5_K_L = 5.9,
  Q5_K_XL = 5.9, Q6_K = 6.56, Q6_K_L = 6.8, Q6_K_XL = 6.8, Q8_0 = 8.5, Q8_K_XL = 8.7, F16 = 16,
  BF16 = 16, F32 = 32,
}

--- The quantization named by one dash/dot-separated token, or nil.
local function quant_of_token(tok)
  local u = tok:upper()
  if u == "FP16" then return "F16" end
  if u == "FP32" then return "F32" end
  if QUANT_BITS[u] then return u end
  -- names outside the table but shaped like one: Q4_K_XXL, IQ3_KS, Q8_K_P ...
  if u:find("^I?Q%d_[A-Z0-9_]+$") or u:find("^TQ%d_%d$") then return u end
  -- an underscore-joined name: llama_3_8b_q4_k_m
  local tail = u:match("_(I?Q%d_[A-Z0-9_]+)$")
  if tail then return tail end
  tail = u:match("_(B?F16)$") or u:match("_(F32)$")
  return tail
end

--- Parse the quantization from a GGUF file name (split suffix already
--- removed), looking at the file name first, then at its folder names.
--- Unsloth's dynamic quants ("UD-Q4_K_XL") keep their prefix.
---@param path string
---@return string|nil
function M.parse_quant(path)
  local parts = {}
  for seg in path:gmatch("[^/]+") do parts[#parts + 1] = seg end
  for i = #parts, 1, -1 do
    local name = parts[i]
    if i == #parts then name = name:gsub("%.[Gg][Gg][Uu][Ff]$", "") end
    local toks = {}
    for tok in name:gmatch("[^%-%.]+") do toks[#toks + 1] = tok end
    for j = #toks, 1, -1 do
      local q = quant_of_token(toks[j])
      if q then
        if j > 1 and toks[j - 1]:upper() == "UD" then q = "UD-" .. q end
        return q
      end
    end
  end
  return nil
end

local function quant_bits(q)
  if not q then return 99 end
  return QUANT_BITS[q:gsub("^UD%-", "")] or 50
end

-- Files from `siblings`: {path, size|nil}, in the order listed.
local function collect_files(info)
  local files, by_path = {}, {}
  for _, s in ipairs(tbl(info.siblings) or {}) do
    local path = tbl(s) and str(s.rfilename)
    if path and not by_path[path] then
      local lfs = tbl(s.lfs)
      local f = { path = path, size = (lfs and num(lfs.size)) or num(s.size) }
      files[#files + 1] = f
      by_path[path] = f
    end
  end
  return files, by_path
end

-- Sum of sizes; nil when any is unknown (a partial sum would mislead).
local function total_size(list)
  local sum = 0
  for _, f in ipairs(list) do
    if not f.size then return nil end
    sum = sum + f.size
  end
  return sum
end

local function paths(list)
  local out = {}
  for _, f in ipairs(list) do out[#out + 1] = f.path end
  return out
end

local function by_path_order(a, b) return a.path < b.path end

-- Bytes of the weights from safetensors.parameters (elements per dtype).
local function size_from_parameters(st)
  local params = st and tbl(st.parameters)
  if not params then return nil end
  local sum, any = 0, false
  for dtype, n in pairs(params) do
    local b = DTYPE_BYTES[tostring(dtype):upper()]
    if not b or not num(n) then return nil end
    sum = sum + n * b
    any = true
  end
  return any and sum or nil
end

-- The repo's base model: cardData.base_model (string or list), else a
-- "base_model:adapter:<id>" / "base_model:<id>" tag.
local function base_models(info)
  local out, seen = {}, {}
  local function add(v)
    if type(v) == "string" and v ~= "" and not seen[v] then seen[v] = true; out[#out + 1] = v end
  end
  local card = tbl(info.cardData)
  local bm = card and card.base_model
  if type(bm) == "string" then add(bm)
  elseif tbl(bm) then for _, v in ipairs(bm) do add(v) end end
  if #out == 0 then
    for _, t in ipairs(tbl(info.tags) or {}) do
      if type(t) == "string" then add(t:match("^base_model:adapter:(.+)$")) end
    end
  end
  return out
end

-- A LoRA module name vLLM accepts: the repo name, reduced to [A-Za-z0-9._-].
local function lora_name(repo_id)
  local name = (repo_id:match("([^/]+)$") or repo_id):gsub("[^A-Za-z0-9._-]", "-")
  return name ~= "" and name or "adapter"
end

---------------------------------------------------------------------------
-- Layout analysis
---------------------------------------------------------------------------

local SHARD = "^(.-)%-(%d+)%-of%-(%d+)%.safetensors$"

-- Root-level weights in the Hugging Face layout: with an index, exactly the
-- shards it names by prefix (so a stray duplicate is never counted twice).
local function hf_weights(root_st, by_path, notes)
  local index
  for _, f in ipairs(root_st) do
    local prefix = f.path:match("^(.-)%-%d+%-of%-%d+%.safetensors$")
    if prefix and by_path[prefix .. ".safetensors.index.json"] then index = prefix; break end
  end
  if not index then
    for path in pairs(by_path) do
      local prefix = path:match("^([^/]+)%.safetensors%.index%.json$")
      if prefix then index = prefix; break end
    end
  end
  if not index then return root_st, nil end
  local shards, want = {}, nil
  for _, f in ipairs(root_st) do
    local prefix, _, of = f.path:match(SHARD)
    if prefix == index then
      shards[#shards + 1] = f
      want = tonumber(of)
    end
  end
  table.sort(shards, by_path_order)
  if #shards == 0 then
    notes[#notes + 1] = index .. ".safetensors.index.json lists shards that are not in the repo"
    return {}, index
  end
  if want and #shards ~= want then
    notes[#notes + 1] = ("%d of %d safetensors shards are in the repo: the model is incomplete"):format(#shards, want)
  end
  return shards, index
end

-- GGUF files grouped into models: split files (-00001-of-00003.gguf) become
-- one group named by its first shard, whatever order they were listed in.
local function gguf_groups(gguf_files, notes)
  local groups, order = {}, {}
  for _, f in ipairs(gguf_files) do
    local stem, part, of = f.path:match("^(.-)%-(%d%d%d%d%d)%-of%-(%d%d%d%d%d)%.[Gg][Gg][Uu][Ff]$")
    local key = stem and (stem .. "#" .. of) or f.path
    local g = groups[key]
    if not g then
      g = { key = key, stem = stem or f.path:gsub("%.[Gg][Gg][Uu][Ff]$", ""), files = {},
            split = stem ~= nil, of = tonumber(of) or 1, parts = {} }
      groups[key] = g
      order[#order + 1] = g
    end
    g.files[#g.files + 1] = f
    if part then g.parts[tonumber(part)] = f end
  end
  for _, g in ipairs(order) do
    table.sort(g.files, by_path_order)
    g.first = g.split and g.parts[1] or g.files[1]
    g.complete = not g.split or #g.files == g.of
    if g.split and not g.parts[1] then
      notes[#notes + 1] = ("the first part of %s is missing"):format(g.stem)
      g.first = g.files[1]
      g.complete = false
    elseif not g.complete then
      notes[#notes + 1] = ("%s has %d of its %d parts in the repo"):format(basename(g.stem), #g.files, g.of)
    end
    g.quant = M.parse_quant(g.stem)
  end
  for _, g in ipairs(order) do g.size = total_size(g.files) end
  -- smallest first: by bytes when the Hub sent sizes, else by bits per weight
  table.sort(order, function(a, b)
    if a.size and b.size and a.size ~= b.size then return a.size < b.size end
    local ba, bb = quant_bits(a.quant), quant_bits(b.quant)
    if ba ~= bb then return ba < bb end
    return a.first.path < b.first.path
  end)
  return order
end

---------------------------------------------------------------------------
-- Choices and engines
---------------------------------------------------------------------------

local function join_args(args)
  return table.concat(args, " ")
end

local function prefill(recipe, inputs, size, gpu_type, tp)
  local s = gpus.suggest(size, gpu_type, { power_of_two = tp })
  return {
    recipe_id = recipe,
    inputs = inputs,
    gpus_per_node = s.gpus,
    gpu_type = gpu_type,
    gpu_estimate = s,
  }
end

local function engine_entry(engine, recipe, family, choices, default)
  local d = choices[default or 1]
  return {
    engine = engine, recipe = recipe, family = family,
    files = d and d.files or {}, size_bytes = d and d.size_bytes,
    default = default or 1, choices = choices,
  }
end

--- Detect the formats of a repo and the engines that can run it.
---@param info table the model-info JSON as decoded
---@param opts table|nil {gpu_type=string (GRES type of the target partition), repo_id=string, revision=string}
---@return table {repo_id, revision, formats={string}, engines={engine entry}, notes={string}, base_model=string?,
---  parameters=number?, architecture=string?, context_length=number?}
---  An engine entry: {engine="vllm"|"sglang"|"llama.cpp"|"ollama", recipe, family, files={path}, size_bytes,
---  default=index, choices={ {id, label, quant?, files={path}, first_file?, size_bytes?, size_source, complete,
---  args={string}?, supported=true|false, notes={string}, prefill={recipe_id, inputs, gpus_per_node, gpu_type}} }}
function M.detect(info, opts)
  opts = opts or {}
  info = tbl(info) or {}
  local repo_id = str(info.id) or str(info.modelId) or opts.repo_id or "?"
  local revision = str(info.sha) or opts.revision
  local gpu_type = opts.gpu_type
  local notes = {}
  local out = { repo_id = repo_id, revision = revision, formats = {}, engines = {}, notes = notes }

  local files, by_path = collect_files(info)
  if tbl(info.siblings) == nil then
    notes[#notes + 1] = "the Hub sent no file list (siblings): nothing can be detected"
  elseif #files == 0 then
    notes[#notes + 1] = "the repo has no files"
  end

  local st = tbl(info.safetensors)
  local gg = tbl(info.gguf)
  out.parameters = (st and num(st.total)) or (gg and num(gg.total))
  out.architecture = gg and str(gg.architecture)
  out.context_length = gg and num(gg.context_length)
  local config = tbl(info.config)
  if not out.architecture and config then
    local arch = tbl(config.architectures)
    out.architecture = (arch and str(arch[1])) or str(config.model_type)
  end

  -- sort the files into the layouts they belong to
  local root_st, consolidated, adapter_w, root_bin, gguf_files, sub_st, mmproj = {}, {}, {}, {}, {}, {}, {}
  for _, f in ipairs(files) do
    local p, lower = f.path, f.path:lower()
    local root = not p:find("/", 1, true)
    if lower:find("%.gguf$") then
      if basename(lower):find("mmproj", 1, true) then mmproj[#mmproj + 1] = f
      else gguf_files[#gguf_files + 1] = f end
    elseif root and lower:find("^adapter_model.*%.safetensors$") or root and lower:find("^adapter_model.*%.bin$") then
      adapter_w[#adapter_w + 1] = f
    elseif root and lower:find("^consolidated.*%.safetensors$") then
      consolidated[#consolidated + 1] = f
    elseif root and lower:find("%.safetensors$") then
      root_st[#root_st + 1] = f
    elseif root and lower:find("^pytorch_model.*%.bin$") then
      root_bin[#root_bin + 1] = f
    elseif lower:find("%.safetensors$") then
      sub_st[#sub_st + 1] = f
    elseif lower:find("%.gguf%-split%-%a$") or lower:find("%.gguf%.part%d") then
      notes[#notes + 1] = p .. " is a GGUF cut in pieces that must be joined (cat) before any engine can load it"
    end
  end
  table.sort(consolidated, by_path_order)
  table.sort(root_bin, by_path_order)

  local has_config = by_path["config.json"] ~= nil
  local has_params = by_path["params.json"] ~= nil
  local has_adapter_config = by_path["adapter_config.json"] ~= nil
  local hf_st, index = hf_weights(root_st, by_path, notes)

  -- size of the safetensors weights: from file sizes, else from parameter counts
  local function st_size(list)
    local s = total_size(list)
    if s then return s, "files" end
    s = size_from_parameters(st)
    if s then return s, "safetensors.parameters" end
    return nil, nil
  end

  ---------------------------------------------------------------- vLLM / SGLang
  local vllm, sglang = {}, {}
  local main_choice -- {files, size, source, kind, args, notes}
  if has_config and #hf_st > 0 then
    local list = { by_path["config.json"] }
    if index then list[#list + 1] = by_path[index .. ".safetensors.index.json"] end
    for _, f in ipairs(hf_st) do list[#list + 1] = f end
    local size, source = st_size(hf_st)
    main_choice = { id = "safetensors", label = "safetensors (" .. #hf_st .. " file" .. (#hf_st == 1 and "" or "s") .. ")",
                    files = paths(list), size = size, source = source, notes = {} }
    out.formats[#out.formats + 1] = "safetensors"
  elseif has_config and #root_bin > 0 then
    local weights = {}
    for _, f in ipairs(root_bin) do weights[#weights + 1] = f end
    local list = { by_path["config.json"] }
    if by_path["pytorch_model.bin.index.json"] then list[#list + 1] = by_path["pytorch_model.bin.index.json"] end
    for _, f in ipairs(weights) do list[#list + 1] = f end
    main_choice = { id = "pytorch", label = "PyTorch .bin (" .. #weights .. " file" .. (#weights == 1 and "" or "s") .. ")",
                    files = paths(list), size = total_size(weights), source = total_size(weights) and "files",
                    notes = { "only pickled PyTorch weights (pytorch_model*.bin): vLLM and SGLang load them, more slowly"
                      .. " than safetensors, and loading a pickle runs code from the repo: use it only for repos you trust" } }
    out.formats[#out.formats + 1] = "pytorch"
  elseif #hf_st > 0 and not has_config and not (has_params and #consolidated > 0) then
    notes[#notes + 1] = "safetensors weights without config.json: vLLM and SGLang cannot load this repo"
  elseif #root_bin > 0 and not has_config then
    notes[#notes + 1] = "PyTorch .bin weights without config.json: vLLM and SGLang cannot load this repo"
  end

  if main_choice then
    for _, eng in ipairs({ { "vllm", "vllm", vllm }, { "sglang", "sglang", sglang } }) do
      local c = {
        id = main_choice.id, label = main_choice.label, files = main_choice.files,
        size_bytes = main_choice.size, size_source = main_choice.source, complete = true, supported = true,
        notes = { table.unpack(main_choice.notes) },
      }
      c.prefill = prefill(eng[2], { model = repo_id, revision = revision }, c.size_bytes, gpu_type, true)
      eng[3][#eng[3] + 1] = c
    end
  end

  -- Mistral's native layout: params.json + consolidated*.safetensors
  if has_params and #consolidated > 0 then
    local list = { by_path["params.json"] }
    for _, t in ipairs({ "tekken.json", "tokenizer.model.v3", "tokenizer.model.v7", "tokenizer.model" }) do
      if by_path[t] then list[#list + 1] = by_path[t]; break end
    end
    for _, f in ipairs(consolidated) do list[#list + 1] = f end
    local size, source = st_size(consolidated)
    local args = { "--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral" }
    local c = {
      id = "mistral", label = "Mistral native format (params.json + consolidated)", files = paths(list),
      size_bytes = size, size_source = source, complete = true, supported = true, args = args,
      notes = { "loads Mistral's own checkpoint: vLLM needs " .. join_args(args) },
    }
    c.prefill = prefill("vllm", { model = repo_id, revision = revision, mistral_format = true },
      size, gpu_type, true)
    vllm[#vllm + 1] = c
    if not main_choice then
      out.formats[#out.formats + 1] = "safetensors"
      notes[#notes + 1] = "Mistral native layout only (no config.json): vLLM serves it with the mistral formats;"
        .. " SGLang needs the Hugging Face layout"
    end
  end

  ---------------------------------------------------------------- adapter only
  local full_weights = main_choice or #consolidated > 0 or #gguf_files > 0
  if has_adapter_config and not full_weights then
    out.formats[#out.formats + 1] = "adapter"
    local bases = base_models(info)
    local base = bases[1]
    local list = { by_path["adapter_config.json"] }
    for _, f in ipairs(adapter_w) do list[#list + 1] = f end
    local name = lora_name(repo_id)
    local module = name .. "=" .. repo_id
    local args = { "--enable-lora", "--lora-modules", module }
    local c = {
      id = "lora", label = "LoRA adapter on its base model", files = paths(list),
      size_bytes = total_size(adapter_w), size_source = total_size(adapter_w) and "files",
      complete = #adapter_w > 0, supported = true, args = args, lora_name = name, notes = {},
    }
    if #adapter_w == 0 then c.notes[#c.notes + 1] = "adapter_config.json without adapter weights" end
    local base_ok = base and validate.repo_id(base)
    if base_ok then
      out.base_model = base
      c.base_model = base
      c.notes[#c.notes + 1] = ("an adapter: serve the base model %s with vLLM %s; clients ask for the model %q."
        .. " Size the GPUs for the base model (inspect %s)"):format(base, join_args(args), name, base)
      if #bases > 1 then
        c.notes[#c.notes + 1] = "the model card names several base models: " .. table.concat(bases, ", ")
      end
    else
      if base then c.notes[#c.notes + 1] = ("the model card's base_model %q is not a repo id"):format(base) end
      c.notes[#c.notes + 1] = "an adapter whose base model the Hub does not name: read base_model_name_or_path"
        .. " in adapter_config.json, then serve that model with vLLM " .. join_args(args)
    end
    c.prefill = prefill("vllm", { model = base_ok and base or nil, revision = nil, lora_modules = module },
      nil, gpu_type, true)
    c.prefill.gpu_estimate.notes = { "size the GPUs for the base model, not for the adapter" }
    vllm[#vllm + 1] = c
    notes[#notes + 1] = "an adapter-only repo: it runs on top of its base model"
  elseif has_adapter_config then
    notes[#notes + 1] = "the repo also has a LoRA adapter (adapter_config.json); the full weights are offered"
  end

  if #sub_st > 0 and #vllm == 0 and #gguf_files == 0 then
    local dir = dirname(sub_st[1].path)
    if by_path["model_index.json"] then
      notes[#notes + 1] = "a diffusers pipeline (model_index.json): no LLM engine here serves it"
    else
      notes[#notes + 1] = ("safetensors only in subfolders (e.g. %s/): the engines load the repo root"):format(dir)
    end
  end

  ---------------------------------------------------------------- GGUF
  local groups = gguf_groups(gguf_files, notes)
  local llama, ollama = {}, {}
  local mm
  if #mmproj > 0 then
    table.sort(mmproj, function(a, b)
      -- prefer the F16 projector (not BF16: older llama.cpp builds cannot load it)
      local fa = ("-" .. basename(a.path):upper()):find("[^B]F16") ~= nil
      local fb = ("-" .. basename(b.path):upper()):find("[^B]F16") ~= nil
      if fa ~= fb then return fa end
      return a.path < b.path
    end)
    mm = mmproj[1]
  end
  if #groups > 0 then
    out.formats[#out.formats + 1] = "gguf"
    if #vllm == 0 then
      notes[#notes + 1] = "GGUF only (no config.json): llama.cpp and Ollama can run it, vLLM and SGLang cannot"
    end
  end
  for _, g in ipairs(groups) do
    local size = total_size(g.files)
    local label = g.quant or basename(g.stem)
    if g.split then label = label .. (" (%d parts)"):format(g.of) end
    local list = paths(g.files)
    local base = {
      id = g.first.path, label = label, quant = g.quant, first_file = g.first.path, files = list,
      size_bytes = size, size_source = size and "files", complete = g.complete, split = g.split,
      parts = g.of, mmproj = mm and mm.path,
    }
    local function copy(extra)
      local c = {}
      for k, v in pairs(base) do c[k] = v end
      c.files = { table.unpack(list) }
      c.notes = {}
      for k, v in pairs(extra) do c[k] = v end
      return c
    end
    local lc = copy({ supported = g.complete })
    if g.split then lc.notes[#lc.notes + 1] = "split GGUF: llama.cpp is given the first part and loads the others" end
    if not g.complete then lc.notes[#lc.notes + 1] = "some parts are missing from the repo" end
    if mm then lc.notes[#lc.notes + 1] = "vision projector " .. mm.path .. " (--mmproj)" end
    -- llama-server downloads the file itself (--hf-repo / --hf-file) into LLAMA_CACHE
    lc.prefill = prefill("llamacpp", { hf_repo = repo_id, hf_file = g.first.path }, size, gpu_type, false)
    llama[#llama + 1] = lc

    local tag = g.quant or "latest"
    local oc = copy({ supported = g.complete and not g.split })
    if g.split then
      oc.notes[#oc.notes + 1] = "Ollama cannot pull a split GGUF from the Hub: merge the parts"
        .. " (llama-gguf-split --merge) and `ollama create`, or use llama.cpp"
    end
    if not g.quant then
      oc.notes[#oc.notes + 1] = "no quantization in the file name: Ollama picks the repo's default file"
    end
    oc.prefill = prefill("ollama", { pull = "hf.co/" .. repo_id .. ":" .. tag }, size, gpu_type, false)
    ollama[#ollama + 1] = oc
  end

  local function default_of(choices)
    for i, c in ipairs(choices) do if c.quant == "Q4_K_M" and c.supported then return i end end
    for i, c in ipairs(choices) do if c.supported and quant_bits(c.quant) >= 4 then return i end end
    for i, c in ipairs(choices) do if c.supported then return i end end
    return 1
  end

  if #vllm > 0 then out.engines[#out.engines + 1] = engine_entry("vllm", "vllm", "transformers", vllm) end
  if #sglang > 0 then out.engines[#out.engines + 1] = engine_entry("sglang", "sglang", "transformers", sglang) end
  if #llama > 0 then
    out.engines[#out.engines + 1] = engine_entry("llama.cpp", "llama-cpp", "gguf", llama, default_of(llama))
  end
  if #ollama > 0 then
    out.engines[#out.engines + 1] = engine_entry("ollama", "ollama", "gguf", ollama, default_of(ollama))
  end
  if #out.engines == 0 and #files > 0 then
    notes[#notes + 1] = "no weights that vLLM, SGLang, llama.cpp or Ollama can load were found"
  end
  if gpu_type == nil then
    notes[#notes + 1] = "GPU counts assume nothing about the GPU type: pick a partition to size them"
  end
  return out
end

return M
