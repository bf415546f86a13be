"""A tiny random-weight Llama model in GGUF, written deterministically for llama.cpp tests.

No model ships in any package we may install, so the integration tests write their own: a
2-layer Llama with grouped-query attention and weights drawn from a seeded generator. Same
seed and vocabulary, same bytes. Three vocabularies (`VOCABULARIES`):

- `ascii`: byte-fallback tokens for ASCII only plus whole words, so every token is complete
  UTF-8 on its own (the first model; llama-server then reports every position).
- `sentencepiece`: shaped like Llama 2's: the 256 byte-fallback tokens `<0x00>`..`<0xFF>`
  plus `▁`-prefixed words and whole CJK characters. About half the vocabulary is byte tokens,
  so random sampling often stops mid-character (a lead byte such as `<0xE4>`).
- `byte_level`: shaped like GPT-2's byte-level BPE: the 256 byte characters plus merged
  pieces, many of them a multi-byte character cut short (E4 B8: the first two bytes of 中).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class Vocabulary:
    """What goes into the `tokenizer.ggml.*` keys."""

    model: str  # tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
    tokens: tuple[str, ...]
    types: tuple[gguf.TokenType, ...]
    merges: tuple[str, ...] = ()
    unk: int | None = None
    bos: int = 1
    eos: int = 2

    def __len__(self) -> int:
        return len(self.tokens)


def ascii_vocabulary() -> Vocabulary:
    specials = ("<unk>", "<s>", "</s>")
    bytes_ = tuple(f"<0x{value:02X}>" for value in range(128))
    words = tuple(f"\u2581w{index}" for index in range(128))
    return _sentencepiece(specials, bytes_, words)


# Whole characters of 3 and 4 bytes, as real vocabularies hold the frequent ones.
CJK = tuple(chr(0x4E00 + index) for index in range(96))
EMOJI = tuple(chr(0x1F600 + index) for index in range(32))


def sentencepiece_vocabulary() -> Vocabulary:
    specials = ("<unk>", "<s>", "</s>")
    bytes_ = tuple(f"<0x{value:02X}>" for value in range(256))
    words = tuple(f"\u2581w{index}" for index in range(128)) + CJK + EMOJI
    return _sentencepiece(specials, bytes_, words)


def _sentencepiece(
    specials: tuple[str, ...], bytes_: tuple[str, ...], words: tuple[str, ...]
) -> Vocabulary:
    types: tuple[gguf.TokenType, ...] = (
        gguf.TokenType.UNKNOWN,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
    )
    types += (gguf.TokenType.BYTE,) * len(bytes_) + (gguf.TokenType.NORMAL,) * len(words)
    return Vocabulary("llama", (*specials, *bytes_, *words), types, unk=0)


def byte_level_vocabulary() -> Vocabulary:
    alphabet = _byte_characters()
    merged: list[str] = []
    merges: list[str] = []

    def merge(left: bytes, right: bytes) -> None:
        pieces = ("".join(alphabet[b] for b in left), "".join(alphabet[b] for b in right))
        if pieces[0] + pieces[1] not in merged:
            merged.append(pieces[0] + pieces[1])
            merges.append(f"{pieces[0]} {pieces[1]}")

    for word in (f" w{index}" for index in range(64)):  # "Ġw0": space + word, complete
        encoded = word.encode()
        for end in range(2, len(encoded) + 1):
            merge(encoded[: end - 1], encoded[end - 1 : end])
    for character in CJK + EMOJI:  # every prefix of each character: most are cut short
        encoded = character.encode()
        for end in range(2, len(encoded) + 1):
            merge(encoded[: end - 1], encoded[end - 1 : end])
    tokens = ("<|endoftext|>", *alphabet, *merged)
    types = (gguf.TokenType.CONTROL,) + (gguf.TokenType.NORMAL,) * (len(tokens) - 1)
    return Vocabulary("gpt2", tokens, types, tuple(merges), bos=0, eos=0)


def _byte_characters() -> list[str]:
    """GPT-2's map from each byte to one printable character: printable Latin-1 bytes stand
    for themselves, the others (space, controls, ...) take the code points from 256 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    characters, extra = {}, 0
    for value in range(256):
        if value in printable:
            characters[value] = chr(value)
        else:
            characters[value] = chr(256 + extra)
            extra += 1
    return [characters[value] for value in range(256)]


VOCABULARIES: dict[str, Callable[[], Vocabulary]] = {
    "ascii": ascii_vocabulary,
    "sentencepiece": sentencepiece_vocabulary,
    "byte_level": byte_level_vocabulary,
}


@dataclass(frozen=True)
class TinyLlamaShape:
    embedding: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    feed_forward: int = 128
    context: int = 1024


def write_tiny_llama(
    path: Path,
    *,
    seed: int = 0,
    shape: TinyLlamaShape | None = None,
    vocabulary: str = "ascii",
    chain: tuple[int, ...] = (),
    perturb: float = 0.0,
) -> Path:
    """Write the model to `path` (a few hundred KB) and return the path.

    `perturb`: the seed's model with attn_k and attn_v of every layer moved by `perturb` x
    their scale x N(0, 1) (another generator): KV that differs from the seed's by about
    `perturb` relative, a cache fault as small as one likes (tests/helpers/poison_proxy.py).

    `chain`: token ids the model cycles through whatever the context (after chain[i] it
    samples chain[i + 1], after the last or any other token chain[0], every other token
    about e^-24 as likely): a way to make llama-server sample a chosen sequence."""
    shape = shape or TinyLlamaShape()
    vocab = VOCABULARIES[vocabulary]()
    writer = gguf.GGUFWriter(str(path), arch="llama")
    _add_hyperparameters(writer, shape, len(vocab))
    _add_vocabulary(writer, vocab)
    tensors = _random_tensors(shape, len(vocab), np.random.default_rng(seed))
    if chain:
        tensors = _chained(tensors, shape, len(vocab), chain)
    if perturb:
        tensors = _perturbed(tensors, perturb, np.random.default_rng(seed + 7919))
    for name, weights in tensors:
        writer.add_tensor(name, weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_hyperparameters(writer: gguf.GGUFWriter, shape: TinyLlamaShape, vocab: int) -> None:
    writer.add_name("kl-bitexact tiny random llama")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.embedding)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.embedding // shape.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def _add_vocabulary(writer: gguf.GGUFWriter, vocab: Vocabulary) -> None:
    writer.add_tokenizer_model(vocab.model)
    if vocab.merges:
        writer.add_tokenizer_pre("default")
        writer.add_token_merges(list(vocab.merges))
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_scores([0.0] * len(vocab))
    writer.add_token_types(list(vocab.types))
    if vocab.unk is not None:
        writer.add_unk_token_id(vocab.unk)
    writer.add_bos_token_id(vocab.bos)
    writer.add_eos_token_id(vocab.eos)
    # Prompts are token ids chosen by the test; a BOS inserted by the server would shift them.
    writer.add_add_bos_token(False)


def _random_tensors(
    shape: TinyLlamaShape, vocab: int, rng: np.random.Generator
) -> list[tuple[str, np.ndarray]]:
    head_dim = shape.embedding // shape.heads
    kv_width = shape.kv_heads * head_dim

    def matrix(rows: int, columns: int) -> np.ndarray:
        # numpy shape (rows, columns) is a GGUF tensor of columns x rows: rows = output width.
        values: np.ndarray = rng.standard_normal((rows, columns)) / np.sqrt(columns)
        return values.astype(np.float32)

    def norm() -> np.ndarray:
        return np.ones(shape.embedding, dtype=np.float32)

    tensors = [("token_embd.weight", matrix(vocab, shape.embedding))]
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
        ("output.weight", 4 * matrix(vocab, shape.embedding)),
    ]
    return tensors


def _perturbed(
    tensors: list[tuple[str, np.ndarray]], scale: float, rng: np.random.Generator
) -> list[tuple[str, np.ndarray]]:
    def moved(weights: np.ndarray) -> np.ndarray:
        noise = rng.standard_normal(weights.shape) * scale * float(weights.std())
        return (weights + noise).astype(np.float32)

    kv = (".attn_k.weight", ".attn_v.weight")
    return [(name, moved(w) if name.endswith(kv) else w) for name, w in tensors]


def _chained(
    tensors: list[tuple[str, np.ndarray]], shape: TinyLlamaShape, vocab: int, chain: tuple[int, ...]
) -> list[tuple[str, np.ndarray]]:
    """The random tensors turned into a bigram model over `chain`: attention and
    feed-forward write nothing (their output projections are zero), so the last hidden
    state is the token's embedding, one axis per chain position (axis 0: any other token)."""
    if len(chain) >= shape.embedding:
        raise ValueError(f"a chain of {len(chain)} tokens needs more than {shape.embedding} axes")
    embedding = np.zeros((vocab, shape.embedding), dtype=np.float32)
    embedding[:, 0] = 1.0
    output = np.zeros((vocab, shape.embedding), dtype=np.float32)
    # RMS norm scales a one-hot row to sqrt(width) (8 at 64): logit 3 x 8 = 24 for the next one.
    output[chain[0], 0] = 3.0
    for position, token in enumerate(chain):
        embedding[token] = 0.0
        embedding[token, position + 1] = 1.0
        output[chain[(position + 1) % len(chain)], position + 1] = 3.0
    replaced = {"token_embd.weight": embedding, "output.weight": output}
    silent = (".attn_output.weight", ".ffn_down.weight")
    return [
        (name, replaced.get(name, np.zeros_like(weights) if name.endswith(silent) else weights))
        for name, weights in tensors
    ]
