"""An MCMC sampler step of the zoo: one Hamiltonian Monte Carlo proposal on a Bayesian
logistic regression, as TensorFlow Probability runs it.

Why this model. Graphcore's "15x faster time to train for MCMC using standard TensorFlow
Probability" (graphcore.ai/mk1-benchmarks, "MCMC Probabilistic Model: Training") names only
a "representative finance workload for alpha estimation"; that workload's model and data
are not public. The public stand-in used here is the canonical HMC benchmark posterior:
Bayesian logistic regression on the UCI Statlog German credit data (1000 rows, 24 numeric
features plus an intercept column: the data set of Hoffman & Gelman 2014, "The No-U-Turn
Sampler", sec. 4, and of TFP's inference_gym ``GermanCreditNumericLogisticRegression``), with
an isotropic normal prior ``theta ~ N(0, sigma^2 I)`` (``prior_scale`` sigma; the default 1 is
inference_gym's standard normal). Only the shapes matter to the cost; the tests feed random
data of those shapes.

What one step computes (``tfp.mcmc.HamiltonianMonteCarlo`` with TFP's
``SimpleLeapfrogIntegrator``, in its order): the momentum takes a half step on the gradient
carried from the previous step (TFP keeps ``grads_target_log_prob`` in its kernel results,
so a step evaluates the gradient L times, not L + 1); then L times ``theta += eps * p``,
``g = grad log p(theta)``, ``p += eps * g``; finally ``p -= eps/2 * g``. The gradient of the
log posterior is ``X^T (y - sigmoid(X theta)) - theta / sigma^2`` (what TF's autodiff of
``sum(y * z - softplus(z)) - |theta|^2 / (2 sigma^2)`` computes): two matmuls over the data
and element-wise ops. Chains are the columns of ``theta`` (TFP runs chains as a batch
dimension of the state); the network's batch axis is independent problems (batch 1 = one
data set), so the data matrix is one tensor read by all 2L matmuls rather than a per-layer
parameter copied 2L times. ``X^T`` is made once by a Permute (a costed rearrangement).

Stated scope (what the existing ops cannot express; the docs list it too): the Metropolis
accept is not in the network. It needs (1) the potential energy's data term
``sum(y * z - softplus(z))`` (TFP computes it beside every gradient): a softplus, i.e. a log,
which no layer computes (the UnaryOp cycle table prices exp, rsqrt and inverse only); (2)
an element-wise compare of ``log u`` with the energy change and a select between the
proposal and the current state.
The network computes everything else: the L leapfrog steps and the kinetic energies
``0.5 * |p|^2`` before and after (a reduction written as a matmul with a constant 0.5 row,
the input ``half``). Left out per leapfrog step: the log-probability value TFP evaluates
beside each gradient (a softplus, a product and a subtraction over the (n_data, chains)
logits, then a reduction), i.e. about four element-wise passes against the step's two
matmuls and five element-wise passes; and once per step the accept's compare and select
over the (n_features, chains) state. The model's time is therefore a lower bound of TFP's
step on the same machine.
"""
from __future__ import annotations

from . import layers as L
from .network import Network

__all__ = ["GERMAN_CREDIT_FEATURES", "GERMAN_CREDIT_ROWS", "hmc_logistic"]

#: UCI Statlog (German credit) numeric version: 1000 rows, 24 attributes (+1 intercept column)
GERMAN_CREDIT_ROWS = 1000
GERMAN_CREDIT_FEATURES = 24 + 1


#: the step is unrolled (about six layers per leapfrog step): a bound keeps a huge count
#: from building a network for ever
MAX_LEAPFROG_STEPS = 1000


def _positive_int(what: str, v, maximum: int = 2**31 - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= maximum:
        raise ValueError(f"hmc_logistic: {what} must be a positive int, got {v!r} (at most {maximum})")
    return v


def _positive_float(what: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise ValueError(f"hmc_logistic: {what} must be a positive finite number, got {v!r}")
    return float(v)


def _grad_log_posterior(net: Network, x: str, xt: str, y: str, theta: str, prior_var: float,
                        name: str) -> str:
    """``X^T (y - sigmoid(X theta)) - theta / sigma^2`` for every chain (D, chains)."""
    z = net.add(L.MatMul(), x, theta, name=f"{name}.logits")
    s = net.add(L.Sigmoid(), z, name=f"{name}.sigmoid")
    r = net.add(L.Add(alpha=-1.0), y, s, name=f"{name}.residual")
    g = net.add(L.MatMul(), xt, r, name=f"{name}.xt_residual")
    return net.add(L.Add(alpha=-1.0 / prior_var), g, theta, name=name)


def _kinetic(net: Network, half: str, p: str, name: str) -> str:
    """``0.5 * sum_d p_d^2`` per chain, (1, chains)."""
    sq = net.add(L.Mul(), p, p, name=f"{name}.p_sq")
    return net.add(L.MatMul(), half, sq, name=name)


def hmc_logistic(n_data: int = GERMAN_CREDIT_ROWS, n_features: int = GERMAN_CREDIT_FEATURES,
                 leapfrog_steps: int = 10, chains: int = 64, step_size: float = 0.01,
                 prior_scale: float = 1.0) -> Network:
    """One HMC proposal (``leapfrog_steps`` leapfrog steps, unrolled) for Bayesian logistic
    regression with a ``N(0, prior_scale^2)`` prior, ``chains`` chains at once.

    Inputs (per problem; batch first when run): ``x`` (n_data, n_features), ``y``
    (n_data, chains) the 0/1 labels repeated per chain, ``theta`` / ``momentum`` / ``grad``
    (n_features, chains) the current state, its momentum draw and the gradient carried from
    the previous step, ``half`` (1, n_features) filled with 0.5. Outputs: the proposed
    state ``leapfrog{L-1}.theta`` (first), ``momentum_new`` and ``leapfrog{L-1}.grad``
    (n_features, chains), and the kinetic energies ``kinetic0`` / ``kinetic1`` (1, chains).
    No parameters. Defaults: the German credit posterior's shape; 10 leapfrog steps and 64
    chains are this project's choice (the claim's configuration is not published).
    """
    n, d = _positive_int("n_data", n_data), _positive_int("n_features", n_features)
    steps = _positive_int("leapfrog_steps", leapfrog_steps, MAX_LEAPFROG_STEPS)
    c = _positive_int("chains", chains)
    eps = _positive_float("step_size", step_size)
    prior_var = _positive_float("prior_scale", prior_scale) ** 2
    net = Network("hmc_logistic")
    x = net.input("x", (n, d))
    y = net.input("y", (n, c))
    theta = net.input("theta", (d, c))
    p = net.input("momentum", (d, c))
    g = net.input("grad", (d, c))
    half = net.input("half", (1, d))
    xt = net.add(L.Permute((0, 2, 1)), x, name="x_t")
    k0 = _kinetic(net, half, p, "kinetic0")
    p = net.add(L.Add(alpha=0.5 * eps), p, g, name="momentum_half")
    for i in range(steps):
        theta = net.add(L.Add(alpha=eps), theta, p, name=f"leapfrog{i}.theta")
        g = _grad_log_posterior(net, x, xt, y, theta, prior_var, f"leapfrog{i}.grad")
        p = net.add(L.Add(alpha=eps), p, g, name=f"leapfrog{i}.momentum")
    p = net.add(L.Add(alpha=-0.5 * eps), p, g, name="momentum_new")
    k1 = _kinetic(net, half, p, "kinetic1")
    net.output(theta, p, g, k0, k1)
    return net
