"""A micro GGUF model for the mechanics tests: SmolLM2's tokenizer and chat template, a
two-layer llama with random weights, about 13 MB.

The workflow's mechanics (prompts, grammar, parsing, checkpoints, policies, tables) do not
depend on the answers being good, and a call to this model costs milliseconds instead of
the 135M model's seconds. The real model still runs in the main job and in the tests
marked ``real_model``.

Random weights alone would fill every grammar string with tokens up to ``max_tokens``.
The weights are shaped so outputs stay short and still vary: the residual stream is
dominated by the token embedding (the blocks' weights are small), about 30% of the
tokens carry a common direction ``u`` in their embedding, and the output row of the
``"`` token points along ``u``. So after such a token the model closes the JSON string
it is in (where the grammar allows), and strings end after a few tokens on average.

Deterministic: the same source GGUF and seed give the same bytes (the tests pin its
sha256 in ``tests/config/tiny.yaml``). Run as a script to build one by hand:
``python tests/micro_model.py SOURCE.gguf TARGET.gguf``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

# Shapes: 4 heads of 16, grouped-query attention with 2 KV heads as in SmolLM2.
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
CONTEXT_LENGTH = 8192
QUOTE_SHARE = 0.3
# Byte-level BPE spells space, newline, tab and carriage return with these characters.
BLANK_CHARS = set("\u0120\u010a\u0109\u010d")
# Attention strong enough that the context changes the output (answers differ between
# questions and conditions); the feed-forward blocks stay small.
ATTENTION_SCALE = 0.3  # tokens whose successor is a closing quote, where the grammar allows


def _field(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        raise ValueError(f"{key} missing from the source GGUF: not a SmolLM2-style model")
    return field.contents()


def build_micro_gguf(
    source: Path, target: Path, seed: int = 0, chat_template: str | None = None
) -> Path:
    """Write the micro model to ``target`` (atomically) from ``source``'s tokenizer;
    ``chat_template`` replaces SmolLM2's (the weights stay the same)."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = len(tokens)
    rng = np.random.default_rng(seed)
    u = np.zeros(N_EMBD, dtype=np.float32)
    u[0] = 1.0
    bias = np.zeros(N_EMBD, dtype=np.float32)  # a component every token carries
    bias[1] = 1.0
    embedding = rng.standard_normal((vocab, N_EMBD), dtype=np.float32) + 3.0 * bias
    closing = rng.random(vocab) < QUOTE_SHARE
    embedding[closing] += 8.0 * u
    output = 0.1 * rng.standard_normal((vocab, N_EMBD), dtype=np.float32)
    quote = tokens.index('"')
    output[quote] = 3.0 * u
    # The decision: "abstain" and "answer" tokens read opposite signs of one component
    # that only attention to the prompt sets, so both decisions occur.
    choice = 2
    embedding[quote, choice] = 0.0
    for word, sign in (("abstain", 1.0), ("answer", -1.0)):
        for i, token in enumerate(tokens):
            if len(token) >= 3 and word.startswith(token):
                output[i] = 4.0 * sign * np.eye(N_EMBD, dtype=np.float32)[choice]
    # Whitespace-only tokens lose wherever anything else is allowed, so the grammar's
    # optional whitespace does not fill the output.
    blank = [i for i, t in enumerate(tokens) if t and set(t) <= BLANK_CHARS]
    output[blank] = -10.0 * bias

    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=".micro-", suffix=".gguf", dir=target.parent)
    os.close(handle)
    writer = gguf.GGUFWriter(tmp_name, "llama")
    writer.add_name("grabrag micro test model (random weights)")
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model(_field(reader, "tokenizer.ggml.model"))
    writer.add_tokenizer_pre(_field(reader, "tokenizer.ggml.pre"))
    writer.add_token_list(tokens)
    writer.add_token_types(_field(reader, "tokenizer.ggml.token_type"))
    writer.add_token_merges(_field(reader, "tokenizer.ggml.merges"))
    writer.add_bos_token_id(_field(reader, "tokenizer.ggml.bos_token_id"))
    writer.add_eos_token_id(_field(reader, "tokenizer.ggml.eos_token_id"))
    writer.add_unk_token_id(_field(reader, "tokenizer.ggml.unknown_token_id"))
    writer.add_pad_token_id(_field(reader, "tokenizer.ggml.padding_token_id"))
    writer.add_add_bos_token(_field(reader, "tokenizer.ggml.add_bos_token"))
    writer.add_add_space_prefix(_field(reader, "tokenizer.ggml.add_space_prefix"))
    writer.add_chat_template(chat_template or _field(reader, "tokenizer.chat_template"))

    def small(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (scale * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)

    head_dim = N_EMBD // N_HEAD
    writer.add_tensor("token_embd.weight", embedding.astype(np.float16))
    for layer in range(N_LAYER):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_q.weight", small(N_EMBD, N_EMBD, scale=ATTENTION_SCALE))
        writer.add_tensor(
            f"{block}.attn_k.weight", small(N_HEAD_KV * head_dim, N_EMBD, scale=ATTENTION_SCALE)
        )
        writer.add_tensor(
            f"{block}.attn_v.weight", small(N_HEAD_KV * head_dim, N_EMBD, scale=ATTENTION_SCALE)
        )
        writer.add_tensor(
            f"{block}.attn_output.weight", small(N_EMBD, N_EMBD, scale=ATTENTION_SCALE)
        )
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", small(N_FF, N_EMBD))
        writer.add_tensor(f"{block}.ffn_up.weight", small(N_FF, N_EMBD))
        writer.add_tensor(f"{block}.ffn_down.weight", small(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", output.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.chmod(tmp_name, 0o644)
    os.replace(tmp_name, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="SmolLM2 GGUF whose tokenizer is reused")
    parser.add_argument("target", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build_micro_gguf(args.source, args.target, args.seed))


if __name__ == "__main__":
    main()
