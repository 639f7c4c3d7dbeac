#!/usr/bin/python3
"""Write a tiny random-weight llama-architecture GGUF that llama.cpp's llama-server loads and
answers with (the engine tier's model: no download). Needs python3-gguf and numpy (Debian sid,
inside the 26.05 harness root).

  write_tiny_gguf.py OUT.gguf [--seed N] [--embd 64] [--layers 2] [--ff 128]

The model (defaults): 2 layers, 64-dim embeddings, 4 heads (4 KV heads), a 128-wide feed-forward,
context 512;
a 405-token SentencePiece ("llama") vocabulary: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>
(byte fallback, so any text tokenizes) and 146 unique word pieces (llama.cpp asserts on a duplicate
token); a ChatML chat template. F32 weights, about 550 KB. The engine tier writes a 256-dim,
4-layer, 1024-wide one (17 MB): on an idle machine the tiniest model makes its tokens faster than a
streamed reply is read, so they would arrive together."""
import argparse
import sys

import numpy as np
from gguf import GGUFWriter
from gguf.constants import TokenType

N_HEAD, N_CTX = 4, 512
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vocab():
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [TokenType.UNKNOWN, TokenType.CONTROL,
                                                                         TokenType.CONTROL]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(TokenType.BYTE)
    words = ["\u2581" + w for w in (
        "the a an and or of to in on at is are was be it this that for with as by from hello world "
        "model answer question stream chunk token small tiny test slurm job node gpu engine server "
        "replica router health ready yes no one two three four five six seven eight nine ten").split()]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = []
    for p in words + letters + ["\u2581", ".", ",", "!", "?", "'", "-", ":"]:
        if p not in pieces:
            pieces.append(p)
    extra = 405 - len(tokens) - len(pieces)
    for i in range(extra):
        pieces.append("\u2581w%d" % i)
    for i, p in enumerate(pieces[:405 - len(tokens)]):
        tokens.append(p)
        scores.append(-float(i + 1))
        types.append(TokenType.NORMAL)
    assert len(tokens) == 405 and len(set(tokens)) == 405, "tokens must be unique"
    return tokens, scores, types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ff", type=int, default=128)
    args = ap.parse_args()
    N_EMBD, N_LAYER, N_FF = args.embd, args.layers, args.ff
    rng = np.random.default_rng(args.seed)
    tokens, scores, types = vocab()
    n_vocab = len(tokens)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    w = GGUFWriter(args.out, "llama")
    w.add_name("obleth tiny llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", rand(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + t + ".weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    out = rand(n_vocab, N_EMBD)
    out[2, :] = 0.0  # </s>: a flat logit, so a reply runs to max_tokens more often than not
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return 0


sys.exit(main())
