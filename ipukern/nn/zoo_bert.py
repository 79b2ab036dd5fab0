"""BERT encoder stacks (Devlin et al. 2019), ipukern's own definition.

Names follow the Hugging Face ``BertModel`` module paths (``encoder.layer.3.attention.self.
query``). Scope, stated: word and position embeddings (the position table holds the
``seq_len`` rows used), no token-type embedding (single-segment input) and no attention
mask (every position attends to every position); GELU is the tanh form popnn computes.
The output is the last layer's hidden states (batch, seq_len, hidden).
"""
from __future__ import annotations

from . import layers as L
from .network import Network

__all__ = ["bert_base", "bert_large", "bert", "multi_head_attention"]

VOCAB = 30522


def multi_head_attention(net: Network, x: str, p: str, seq: int, dim: int, heads: int) -> str:
    """Self-attention from batched matmuls: Q, K, V projections, per-head scores
    ``Q K^T / sqrt(d)``, softmax, context ``P V``, heads merged, output projection."""
    dh = dim // heads
    if dh * heads != dim:
        raise ValueError(f"hidden size {dim} is not divisible by {heads} heads")

    def split(name, perm, shape):
        t = net.add(L.Linear(dim, dim), x, name=f"{p}.self.{name}")
        t = net.add(L.Reshape((-1, seq, heads, dh)), t, name=f"{p}.self.{name}_heads")
        t = net.add(L.Permute(perm), t, name=f"{p}.self.{name}_t")
        return net.add(L.Reshape(shape), t, name=f"{p}.self.{name}_bh")

    q = split("query", (0, 2, 1, 3), (-1, seq, dh))
    k = split("key", (0, 2, 3, 1), (-1, dh, seq))
    v = split("value", (0, 2, 1, 3), (-1, seq, dh))
    s = net.add(L.MatMul(), q, k, name=f"{p}.self.scores")
    s = net.add(L.Softmax(scale=dh ** -0.5), s, name=f"{p}.self.softmax")
    c = net.add(L.MatMul(), s, v, name=f"{p}.self.context")
    c = net.add(L.Reshape((-1, heads, seq, dh)), c, name=f"{p}.self.context_heads")
    c = net.add(L.Permute((0, 2, 1, 3)), c, name=f"{p}.self.context_t")
    c = net.add(L.Reshape((-1, seq, dim)), c, name=f"{p}.self.context_merged")
    return net.add(L.Linear(dim, dim), c, name=f"{p}.output.dense")


def bert(name: str, layers: int, hidden: int, heads: int, seq_len: int = 128,
         vocab: int = VOCAB) -> Network:
    """A BERT encoder: embeddings, then ``layers`` x (attention + add & norm, feed-forward
    of 4 x hidden with GELU + add & norm)."""
    if seq_len < 1 or seq_len > 512:
        raise ValueError(f"seq_len must be in 1..512 (BERT's position table), got {seq_len}")
    net = Network(name)
    ids = net.input("input_ids", (seq_len,), kind="int")
    h = net.add(L.Embedding(vocab, hidden), ids, name="embeddings.word_embeddings")
    h = net.add(L.AddParam((seq_len, hidden)), h, name="embeddings.position_embeddings")
    h = net.add(L.LayerNorm(hidden, eps=1e-12), h, name="embeddings.LayerNorm")
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = multi_head_attention(net, h, f"{p}.attention", seq_len, hidden, heads)
        a = net.add(L.Add(), a, h, name=f"{p}.attention.output.add")
        h = net.add(L.LayerNorm(hidden, eps=1e-12), a, name=f"{p}.attention.output.LayerNorm")
        f = net.add(L.Linear(hidden, 4 * hidden), h, name=f"{p}.intermediate.dense")
        f = net.add(L.GELU(), f, name=f"{p}.intermediate.gelu")
        f = net.add(L.Linear(4 * hidden, hidden), f, name=f"{p}.output.dense")
        f = net.add(L.Add(), f, h, name=f"{p}.output.add")
        h = net.add(L.LayerNorm(hidden, eps=1e-12), f, name=f"{p}.output.LayerNorm")
    net.output(h)
    return net


def bert_base(seq_len: int = 128) -> Network:
    """BERT-Base: 12 layers, hidden 768, 12 heads."""
    return bert("bert_base", 12, 768, 12, seq_len)


def bert_large(seq_len: int = 128) -> Network:
    """BERT-Large: 24 layers, hidden 1024, 16 heads."""
    return bert("bert_large", 24, 1024, 16, seq_len)
