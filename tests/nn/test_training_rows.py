"""Training-estimate rows the systems estimator relies on: a parameter add's gradient (BERT's
position embeddings: BERT-Large stages need it) and a step without the optimizer row (a
pipeline stage costs the update itself)."""
import ipukern as ik
from ipukern.nn import layers as L


def pos_net(T=8, D=16):
    net = ik.Network("pos")
    ids = net.input("ids", (T,), kind="int")
    lab = net.input("labels", (), kind="int")
    e = net.add(L.Embedding(50, D), ids, name="emb")
    e = net.add(L.AddParam((T, D)), e, name="pos")
    e = net.add(L.Reshape((-1, T * D)), e)
    c = net.add(L.Linear(T * D, 3), e, name="cls")
    net.output(net.add(L.SoftmaxCrossEntropy(), c, lab, name="loss"))
    return net


def test_add_param_weight_gradient_row():
    prof = ik.estimate_network(pos_net(), 4, "float16", "half", training=True, optimizer="sgd")
    (row,) = [r for r in prof.layers if r["name"].startswith("pos.")]
    assert row["pass"] == "wu" and row["cycles"] > 0
    assert row["flops"] == 4 * 8 * 16          # one add per element of the batch's gradient


def test_no_optimizer_row():
    net = pos_net()
    with_opt = ik.estimate_network(net, 4, "float16", "half", training=True, optimizer="adam")
    without = ik.estimate_network(net, 4, "float16", "half", training=True, optimizer=None)
    assert [r["pass"] for r in with_opt.layers][-1] == "update"
    assert "update" not in {r["pass"] for r in without.layers}
    keys = ("name", "pass", "method", "cycles", "exchange", "flops")   # share/memory differ
    assert [tuple(r[k] for k in keys) for r in with_opt.layers if r["pass"] != "update"] == \
        [tuple(r[k] for k in keys) for r in without.layers]
    # no optimizer state either: the peak can only go down
    assert without.memory["peak_bytes"] <= with_opt.memory["peak_bytes"]
    assert without.info["optimizer"] is None
