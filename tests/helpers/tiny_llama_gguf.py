"""A tiny random-weight Llama model in GGUF, written deterministically for llama.cpp tests.

No model ships in any package we may install, so the integration test writes its own: a
2-layer Llama with grouped-query attention, a byte-level SentencePiece-style vocabulary and
weights drawn from a seeded generator. Same seed, same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# Byte-fallback tokens for ASCII only, plus whole-word tokens: every token is a complete UTF-8
# piece, so the server never holds a token back waiting for the rest of a multibyte character.
BYTE_TOKENS = tuple(f"<0x{value:02X}>" for value in range(128))
WORD_TOKENS = tuple(f"\u2581w{index}" for index in range(128))


@dataclass(frozen=True)
class TinyLlamaShape:
    embedding: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    feed_forward: int = 128
    context: int = 1024
    vocab: int = len(SPECIAL_TOKENS) + len(BYTE_TOKENS) + len(WORD_TOKENS)


def write_tiny_llama(path: Path, *, seed: int = 0, shape: TinyLlamaShape | None = None) -> Path:
    """Write the model to `path` (a few hundred KB) and return the path."""
    shape = shape or TinyLlamaShape()
    writer = gguf.GGUFWriter(str(path), arch="llama")
    _add_hyperparameters(writer, shape)
    _add_vocabulary(writer)
    for name, weights in _random_tensors(shape, np.random.default_rng(seed)):
        writer.add_tensor(name, weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_hyperparameters(writer: gguf.GGUFWriter, shape: TinyLlamaShape) -> None:
    writer.add_name("kl-bitexact tiny random llama")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.embedding)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.embedding // shape.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def _add_vocabulary(writer: gguf.GGUFWriter) -> None:
    tokens = [*SPECIAL_TOKENS, *BYTE_TOKENS, *WORD_TOKENS]
    token_types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    token_types += [gguf.TokenType.BYTE] * len(BYTE_TOKENS)
    token_types += [gguf.TokenType.NORMAL] * len(WORD_TOKENS)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(token_types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    # Prompts are token ids chosen by the test; a BOS inserted by the server would shift them.
    writer.add_add_bos_token(False)


def _random_tensors(
    shape: TinyLlamaShape, rng: np.random.Generator
) -> list[tuple[str, np.ndarray]]:
    head_dim = shape.embedding // shape.heads
    kv_width = shape.kv_heads * head_dim

    def matrix(rows: int, columns: int) -> np.ndarray:
        # numpy shape (rows, columns) is a GGUF tensor of columns x rows: rows = output width.
        return (rng.standard_normal((rows, columns)) / np.sqrt(columns)).astype(np.float32)

    def norm() -> np.ndarray:
        return np.ones(shape.embedding, dtype=np.float32)

    tensors = [("token_embd.weight", matrix(shape.vocab, shape.embedding))]
    for layer in range(shape.layers):
        prefix = f"blk.{layer}"
        tensors += [
            (f"{prefix}.attn_norm.weight", norm()),
            (f"{prefix}.attn_q.weight", matrix(shape.embedding, shape.embedding)),
            (f"{prefix}.attn_k.weight", matrix(kv_width, shape.embedding)),
            (f"{prefix}.attn_v.weight", matrix(kv_width, shape.embedding)),
            (f"{prefix}.attn_output.weight", matrix(shape.embedding, shape.embedding)),
            (f"{prefix}.ffn_norm.weight", norm()),
            (f"{prefix}.ffn_gate.weight", matrix(shape.feed_forward, shape.embedding)),
            (f"{prefix}.ffn_up.weight", matrix(shape.feed_forward, shape.embedding)),
            (f"{prefix}.ffn_down.weight", matrix(shape.embedding, shape.feed_forward)),
        ]
    tensors += [
        ("output_norm.weight", norm()),
        ("output.weight", 4 * matrix(shape.vocab, shape.embedding)),
    ]
    return tensors
