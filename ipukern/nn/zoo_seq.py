"""Sequence models of the zoo: a stacked-LSTM language model.

``lstm_stack`` is the word-level LSTM language model of Zaremba, Sutskever & Vinyals 2014
("Recurrent Neural Network Regularization", the *medium* model: 2 layers of 650 units, 35
unrolled steps, the Penn Treebank's 10,000-word vocabulary) in the structure of
pytorch/examples ``word_language_model/model.py`` (``RNNModel``: ``encoder`` embedding,
``rnn`` LSTM, ``decoder`` linear; untied weights). Layer ``rnn.l<k>`` holds torch's
``rnn.weight_ih_l<k>`` ... as ``weight_ih_l0`` ... (one :class:`~ipukern.nn.recurrent.LSTM`
per layer). Dropout is an identity at inference; the final ``log_softmax`` is left out (the
output is the decoder's logits, one row per position).
"""
from __future__ import annotations

from . import layers as L
from .network import Network
from .recurrent import LSTM

__all__ = ["lstm_stack"]

PTB_VOCAB = 10000


def lstm_stack(seq_len: int = 35, hidden: int = 650, layers: int = 2, vocab: int = PTB_VOCAB) -> Network:
    """Embedding (vocab x hidden) -> ``layers`` x LSTM(hidden) -> Linear(hidden, vocab) over
    token ids (batch, seq_len); output logits (batch, seq_len, vocab)."""
    for what, v in (("seq_len", seq_len), ("hidden", hidden), ("layers", layers), ("vocab", vocab)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"lstm_stack: {what} must be a positive int, got {v!r}")
    net = Network("lstm_stack")
    ids = net.input("input_ids", (seq_len,), kind="int")
    h = net.add(L.Embedding(vocab, hidden), ids, name="encoder")
    for k in range(layers):
        h = net.add(LSTM(hidden, hidden), h, name=f"rnn.l{k}")
    net.output(net.add(L.Linear(hidden, vocab), h, name="decoder"))
    return net
