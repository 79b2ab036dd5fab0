"""Random small torch modules for the from_torch fuzz (tests/nn/test_torch_fuzz.py).

``module_source(seed)`` writes the Python source of one module: a chain of 1-6 steps drawn
from the operations the importer's table covers (and some it refuses), each with random
arguments: add/sub/mul with ``alpha`` and Python scalars, in-place variants, flatten /
reshape / view / permute / transpose, max and average pools with every argument, adaptive
pools, dropout in both modes, concatenation, slicing, convs, batch norms, linears and
activations. Each candidate step is run eagerly on a random tensor while the source is
written, so only modules torch itself accepts are kept; the source is the reproducer a
failure prints. ``check(source, shape, seed)`` runs in the fuzz worker: the module through
``ik.from_torch`` + ``ik.run_network`` must equal torch (max error within 1e-4 of the
largest output, as the README's zoo bound) or be refused with a clear error.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable

#: what a refused module may raise (UnsupportedTorchNode is a ValueError)
ALLOWED = (ValueError, TypeError, NotImplementedError)
#: a refusal names the node, then the argument and its value, or the target the table lacks
NAMED = re.compile(r"node '[^']+' \(.*\) is not supported: (argument [#\w]+=|(function|method|module type) "
                   r"\S+ is not in the table|the layer |a second forward argument|output |get_attr |module )")

HEADER = """import torch
import torch.nn as nn
import torch.nn.functional as F


class M(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed({seed})
"""


class _Draft:
    """The module being written: __init__ lines, forward lines, and the eager tensors."""

    def __init__(self, rng: random.Random, torch, x):
        self.rng, self.torch = rng, torch
        self.init: list[str] = []
        self.fwd: list[str] = []
        self.env = {"t0": x}
        self.mods: dict = {}
        self.n = 0

    def tensors(self, pred: Callable[[tuple], bool] = lambda s: True) -> list[str]:
        return [k for k, v in self.env.items() if self.torch.is_tensor(v) and pred(tuple(v.shape))]

    def shape(self, name: str) -> tuple:
        return tuple(self.env[name].shape)

    def try_step(self, init: list[str], expr: str) -> bool:
        """Add ``t{n+1} = expr`` (after ``init`` lines) if torch runs it; False if it refuses."""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        name = f"t{self.n + 1}"
        ns = {"torch": torch, "nn": nn, "F": F}
        holder = _Holder(self.mods)
        try:
            exec("\n".join(init), ns, {"self": holder})        # noqa: S102 - our own lines
            snap = {k: v.clone() for k, v in self.env.items()}
            local = dict(snap, self=holder)
            with torch.no_grad():
                val = eval(expr, ns, local)
        except (RuntimeError, ValueError, TypeError, IndexError):
            return False
        if not torch.is_tensor(val) or val.numel() == 0 or val.dim() == 0:
            return False
        self.mods = holder.__dict__
        for k, v in snap.items():           # in-place steps changed their operands
            self.env[k] = v
        self.env[name] = val
        self.init += init
        self.fwd.append(f"{name} = {expr}")
        self.n += 1
        return True

    def source(self, seed: int) -> str:
        body = "".join(f"        {line}\n" for line in self.init)
        fwd = "".join(f"        {line}\n" for line in self.fwd)
        return (HEADER.format(seed=seed) + body + "\n    def forward(self, t0):\n" + fwd +
                f"        return t{self.n}\n")


class _Holder:
    """Stands for ``self`` while a step is probed: the modules made so far."""

    def __init__(self, mods: dict):
        self.__dict__.update(mods)
        self.training = False


def _num(rng: random.Random) -> str:
    return rng.choice(["1", "2", "-1", "0.5", "2.0", "-0.25", "3", "0"])


def _pair_or_int(rng: random.Random, lo: int, hi: int) -> str:
    if rng.random() < 0.6:
        return str(rng.randint(lo, hi))
    return f"({rng.randint(lo, hi)}, {rng.randint(lo, hi)})"


def _pick(d: _Draft, forms: list[str], module: str) -> tuple[list[str], str]:
    """One of ``forms``; the form calling ``self.m{k}`` comes with ``module`` as its constructor."""
    f = d.rng.choice(forms)
    return ([f"self.m{d.n + 1} = {module}"] if f.startswith("self.") else []), f


def _binary(d: _Draft, a: str) -> tuple[list[str], str]:
    rng = d.rng
    same = d.tensors(lambda s: s == d.shape(a))
    b = rng.choice(same)
    if b == a and rng.random() < 0.7:
        return [], f"{a} + torch.{rng.choice(['relu', 'tanh', 'sigmoid'])}({a})"
    al = _num(rng)
    forms = [f"{a} + {b}", f"{a} - {b}", f"torch.add({a}, {b}, alpha={al})",
             f"torch.sub({a}, {b}, alpha={al})", f"{a}.add({b}, alpha={al})", f"{a}.sub({b})",
             f"{a}.add_({b})", f"{a}.add_({b}, alpha={al})", f"{a}.sub_({b}, alpha={al})",
             f"{a} + {al}", f"{al} * {a}", f"{a} * {b}", f"torch.mul({a}, {b})",
             f"torch.add({a}, {al}, alpha={_num(rng)})", f"{a}.mul({al})"]
    s = d.shape(a)
    if len(s) == 4:
        se = f"F.adaptive_avg_pool2d({b}, 1)"
        forms += [f"{a} * {se}", f"torch.sigmoid({se}) * {a}", f"{a}.mul_({se})"]
    return [], rng.choice(forms)


def _unary(d: _Draft, a: str) -> tuple[list[str], str]:
    rng, k = d.rng, d.n + 1
    forms = [f"torch.relu({a})", f"{a}.relu()", f"torch.relu_({a})", f"{a}.sigmoid_()",
             f"torch.tanh({a})", f"F.relu({a}, inplace=True)", f"F.relu6({a})", f"F.silu({a})",
             f"F.gelu({a}, approximate='tanh')", f"F.gelu({a})", f"torch.sigmoid({a})",
             f"self.m{k}({a})"]
    return _pick(d, forms, rng.choice(["nn.ReLU(inplace=True)", "nn.ReLU()", "nn.ReLU6()", "nn.SiLU()",
                                       "nn.Tanh()", "nn.GELU(approximate='tanh')", "nn.Identity()",
                                       "nn.Hardswish()"]))


def _dropout(d: _Draft, a: str) -> tuple[list[str], str]:
    rng, k = d.rng, d.n + 1
    p = rng.choice(["0.0", "0.5", "0.25"])
    forms = [f"F.dropout({a}, {p}, training={rng.choice(['True', 'False'])})", f"F.dropout({a}, {p})",
             f"F.dropout({a}, p={p}, training=self.training)", f"self.m{k}({a})",
             f"F.dropout({a}, {p}, False, {rng.choice(['True', 'False'])})"]
    return _pick(d, forms, f"nn.Dropout({p})")


def _shape_op(d: _Draft, a: str) -> tuple[list[str], str]:
    rng, k = d.rng, d.n + 1
    r = len(d.shape(a))
    dim = lambda: rng.randint(-r, r - 1)  # noqa: E731 - a draw
    perm = list(range(1, r))
    rng.shuffle(perm)
    if rng.random() < 0.15 and perm:
        perm = [perm[0], 0] + perm[1:]
    else:
        perm = [0] + perm
    forms = [f"torch.flatten({a}, {dim()}, {dim()})", f"{a}.flatten({dim()})",
             f"{a}.flatten({dim()}, {dim()})", f"torch.flatten({a})", f"self.m{k}({a})",
             f"{a}.reshape({a}.size(0), -1)", f"{a}.view({a}.size(0), {rng.choice([-1, 1, 2, 3, 4])}, -1)",
             f"{a}.permute({', '.join(map(str, perm))})",
             f"{a}.permute({tuple(perm)})", f"{a}.transpose({dim()}, {dim()})",
             f"torch.transpose({a}, {dim()}, {dim()}).contiguous()", f"torch.reshape({a}, ({a}.size(0), -1))",
             f"{a}.reshape(-1)"]
    return _pick(d, forms, f"nn.Flatten({dim()}, {dim()})")


def _pool(d: _Draft, a: str) -> tuple[list[str], str]:
    rng, k = d.rng, d.n + 1
    ks = _pair_or_int(rng, 1, 3)
    args = [ks]
    kw = []
    if rng.random() < 0.6:
        kw.append(f"stride={_pair_or_int(rng, 1, 3)}")
    if rng.random() < 0.4:
        kw.append(f"padding={rng.randint(0, 1)}")
    if rng.random() < 0.3:
        kw.append(f"ceil_mode={rng.choice(['True', 'False'])}")
    kind = rng.choice(["max", "avg", "adaptive_avg", "adaptive_max"])
    if kind == "max":
        if rng.random() < 0.2:
            kw.append(f"dilation={rng.randint(1, 2)}")
        if rng.random() < 0.1:
            kw.append("return_indices=False")
    elif kind == "avg":
        if rng.random() < 0.3:
            kw.append(f"count_include_pad={rng.choice(['True', 'False'])}")
        if rng.random() < 0.3:
            kw.append(f"divisor_override={rng.choice([1, 2, 3, 4, 9])}")
    else:
        h, w = d.shape(a)[2:]
        o = rng.choice([1, 2, h, (1, w), (h // 2 or 1, None), 3, (None, 1)])
        if rng.random() < 0.5:
            cls = "AdaptiveAvgPool2d" if kind == "adaptive_avg" else "AdaptiveMaxPool2d"
            return [f"self.m{k} = nn.{cls}({o!r})"], f"self.m{k}({a})"
        return [], f"F.{kind}_pool2d({a}, {o!r})"
    call = ", ".join(args + kw)
    if rng.random() < 0.5:
        return [f"self.m{k} = nn.{'MaxPool2d' if kind == 'max' else 'AvgPool2d'}({call})"], f"self.m{k}({a})"
    return [], f"F.{kind}_pool2d({a}, {call})"


def _layer(d: _Draft, a: str) -> tuple[list[str], str]:
    rng, k = d.rng, d.n + 1
    s = d.shape(a)
    if len(s) == 4 and rng.random() < 0.75:
        c = s[1]
        if rng.random() < 0.3:
            return [f"self.m{k} = nn.BatchNorm2d({c}, affine={rng.choice(['True', 'False'])})",
                    f"self.m{k}.running_mean.uniform_(-1, 1)", f"self.m{k}.running_var.uniform_(0.5, 2)"], \
                f"self.m{k}({a})"
        g = rng.choice([1, 1, c])
        co = g * rng.randint(1, 3) if g > 1 else rng.randint(1, 5)
        ks = rng.randint(1, 4)
        extra = rng.choice(["", ", stride=2", f", padding={rng.randint(0, 2)}", ", padding='same'",
                            ", dilation=2, padding=2", ", bias=False", ", padding_mode='reflect', padding=1"])
        return [f"self.m{k} = nn.Conv2d({c}, {co}, {ks}, groups={g}{extra})"], f"self.m{k}({a})"
    if len(s) == 2:
        bias = rng.choice(["True", "False"])
        return [f"self.m{k} = nn.Linear({s[1]}, {rng.randint(1, 6)}, bias={bias})"], f"self.m{k}({a})"
    forms = [f"F.softmax({a}, dim={rng.randint(-1, len(s) - 1)})", f"self.m{k}({a})"]
    return _pick(d, forms, f"nn.LayerNorm({s[-1]})")


def _refused_shape(d: _Draft, a: str) -> tuple[list[str], str]:
    rng = d.rng
    forms = [f"torch.cat([{a}, {a}], {rng.randint(0, len(d.shape(a)) - 1)})", f"{a}[:, 1:]",
             f"{a}[:, :, ::2]" if len(d.shape(a)) > 2 else f"{a}[:, ::2]", f"{a}.mean(1)",
             f"{a}.sum(dim=-1, keepdim=True)", f"torch.stack([{a}, {a}], 1)", f"{a}.abs()"]
    return [], rng.choice(forms)


STEPS = [(_binary, 5), (_unary, 4), (_shape_op, 4), (_pool, 4), (_layer, 3), (_dropout, 2),
         (_refused_shape, 1)]


def module_source(seed: int) -> tuple[str, tuple[int, ...]]:
    """(source of class ``M``, input shape) for fuzz case ``seed``; deterministic."""
    import torch
    rng = random.Random(seed)
    shape = (rng.randint(1, 2), rng.randint(1, 4), rng.randint(2, 8), rng.randint(2, 8))
    gen = torch.Generator().manual_seed(seed)
    d = _Draft(rng, torch, torch.randn(shape, generator=gen))
    want = rng.randint(1, 6)
    kinds, weights = zip(*STEPS)
    for _ in range(want * 8):
        if d.n >= want:
            break
        a = rng.choice(d.tensors()[-3:])
        step = rng.choices(kinds, weights)[0]
        if step in (_pool,) and len(d.shape(a)) != 4:
            continue
        d.try_step(*step(d, a))
    if d.n == 0:
        d.try_step([], "torch.relu(t0)")
    return d.source(seed), shape


def check(source: str, shape: tuple, seed: int) -> None:
    """Import the module of ``source`` and run it: torch's values, or an allowed refusal."""
    import numpy as np
    import torch

    import ipukern as ik
    ns: dict = {}
    exec(compile(source, "<fuzz module>", "exec"), ns)      # noqa: S102 - the fuzz's own source
    m = ns["M"]().eval()
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        ref = m(torch.from_numpy(x.copy())).numpy()
    try:
        net = ik.from_torch(m, x)
    except ik.nn.UnsupportedTorchNode as e:
        assert NAMED.search(str(e)), f"refusal names no node and argument (or target): {e}"
        raise
    out = ik.run_network(net, x, machine=ik.GC200.replace(n_tiles=16, name="GC200-16")).output
    assert out.shape == ref.shape, f"shape {out.shape}, torch {ref.shape}"
    err = float(np.abs(out.astype(np.float64) - ref).max())
    bound = 1e-4 * max(1.0, float(np.abs(ref).max()))
    assert err <= bound, f"max error {err:.3g} over the bound {bound:.3g} (torch max {np.abs(ref).max():.3g})"
