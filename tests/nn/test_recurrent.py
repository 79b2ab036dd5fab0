"""LSTM / GRU layers and the stacked-LSTM zoo model executed on the tiles equal torch.nn.LSTM /
nn.GRU with the same weights (fp32, the zoo bound: max error <= 1e-4 of the largest output),
and report the estimate's cycles."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.nn import GRU, LSTM

torch = pytest.importorskip("torch")
tnn = torch.nn
SMALL = ik.GC200.replace(n_tiles=92)


def close(got, want):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6)


def one_layer(cls, i, h, t):
    net = ik.Network("rnn")
    net.output(net.add(cls(i, h), net.input("x", (t, i)), name="rnn"))
    return net


@pytest.mark.parametrize("cls,ref", [(LSTM, tnn.LSTM), (GRU, tnn.GRU)])
@pytest.mark.parametrize("batch,t,i,h", [(3, 5, 6, 7), (1, 1, 4, 3), (4, 9, 2, 16)])
def test_recurrent_layer_matches_torch(cls, ref, batch, t, i, h):
    net = one_layer(cls, i, h, t)
    params = net.init_params(seed=1)
    mod = ref(i, h, batch_first=True)
    mod.load_state_dict({k.split(".", 1)[1]: torch.tensor(v) for k, v in params.items()}, strict=True)
    x = np.random.default_rng(2).standard_normal((batch, t, i)).astype(np.float32)
    run = ik.run_network(net, x, params, machine=SMALL)
    with torch.no_grad():
        close(run.output, mod(torch.tensor(x))[0].numpy())
    est = ik.estimate_network(net, batch=batch, dtype="float32", partials="float", machine=SMALL)
    assert run.profile.total_cycles == est.total_cycles > 0


def test_recurrent_cycles_grow_with_the_sequence():
    """The loop body repeats: T steps cost T recurrent matmuls and cells."""
    c = [ik.estimate_network(one_layer(LSTM, 8, 16, t), batch=4, machine=SMALL).total_cycles
         for t in (2, 4, 8)]
    assert c[0] < c[1] < c[2]
    assert c[2] - c[1] > c[1] - c[0] > 0


class RNNModel(tnn.Module):
    """pytorch/examples word_language_model/model.py (LSTM, untied, eval), logits out."""

    def __init__(self, ntoken, nhid, nlayers):
        super().__init__()
        self.encoder = tnn.Embedding(ntoken, nhid)
        self.rnn = tnn.LSTM(nhid, nhid, nlayers, batch_first=True)
        self.decoder = tnn.Linear(nhid, ntoken)

    def forward(self, ids):
        return self.decoder(self.rnn(self.encoder(ids))[0])


def test_lstm_stack_matches_torch():
    net = ik.models.lstm_stack(seq_len=6, hidden=12, layers=2, vocab=50)
    params = net.init_params(seed=0)
    ref = RNNModel(50, 12, 2).eval()

    def rename(k):
        if k.startswith("rnn.l"):
            layer, p = k[len("rnn.l"):].split(".")
            return f"rnn.{p[:-1]}{layer}"
        return k
    ref.load_state_dict({rename(k): torch.tensor(v) for k, v in params.items()}, strict=True)
    ids = np.random.default_rng(0).integers(0, 50, (3, 6))
    run = ik.run_network(net, ids, params, machine=SMALL)
    with torch.no_grad():
        close(run.output, ref(torch.tensor(ids)).numpy())


def test_lstm_stack_estimates_the_medium_model_on_one_ipu():
    net = ik.models.lstm_stack()
    assert net.shape(net.outputs[0], batch=2) == (2, 35, 10000)
    prof = ik.estimate_network(net, batch=16)
    assert prof.fits and prof.samples_per_second > 0
    lstm_rows = [r for r in prof.layers if r["op"] == "lstm"]
    assert len(lstm_rows) == 2 and all(r["cycles"] > 0 for r in lstm_rows)


def test_recurrent_training_is_refused_naming_the_layer():
    with pytest.raises(NotImplementedError, match="'rnn'.*lstm"):
        ik.estimate_network(one_layer(LSTM, 4, 4, 3), batch=2, training=True, machine=SMALL)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_recurrent_layer_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="hidden_size"):
        LSTM(4, bad)
    with pytest.raises(ValueError, match="seq_len"):
        ik.models.lstm_stack(seq_len=bad)


def test_recurrent_layer_rejects_a_wrong_input_shape():
    net = ik.Network("bad")
    with pytest.raises(ValueError, match=r"expects \(batch, time, 4\)"):
        net.add(GRU(4, 3), net.input("x", (5, 6)), name="rnn")
