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

The Metropolis accept (``tfp.mcmc.MetropolisHastings`` around the leapfrog proposal) is in
the network: beside every gradient the log posterior's value, as TFP's ``value_and_gradient``
computes it, ``sum_n (y z - softplus(z)) - |theta|^2 / (2 sigma^2)`` (a softplus of the
logits the gradient uses, a product and a subtraction, then two reductions written as
matmuls with constant rows, the inputs ``ones`` and ``half``); then the log accept ratio
``(lp1 - lp0) + (k0 - k1)`` (TFP's order: the target log-probabilities, then its
``log_acceptance_correction`` of the kinetic energies ``0.5 * |p|^2``), and ``log u < ratio``
choosing, per chain, the proposal or the current state, its gradient and its log-probability
(TFP carries both in its kernel results). A chain's accept is one value per column; it is
broadcast over the state's rows by an outer product with the column of ones ``ones_state``
(exact: one product by 1 per element). ``log u`` is an input (TFP draws ``u ~ U(0, 1)`` per
chain), as the momentum is. Left out: TFP's NaN guard on the ratio (a NaN ratio rejects) and
the random draws themselves.
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
                        name: str) -> tuple[str, str]:
    """``X^T (y - sigmoid(X theta)) - theta / sigma^2`` for every chain (D, chains), and the
    logits ``X theta`` it used (n_data, chains)."""
    z = net.add(L.MatMul(), x, theta, name=f"{name}.logits")
    s = net.add(L.Sigmoid(), z, name=f"{name}.sigmoid")
    r = net.add(L.Add(alpha=-1.0), y, s, name=f"{name}.residual")
    g = net.add(L.MatMul(), xt, r, name=f"{name}.xt_residual")
    return net.add(L.Add(alpha=-1.0 / prior_var), g, theta, name=name), z


def _log_posterior(net: Network, z: str, y: str, theta: str, ones: str, half: str,
                   prior_var: float, name: str) -> str:
    """``sum_n (y z - softplus(z)) - |theta|^2 / (2 sigma^2)`` per chain (1, chains): the
    Bernoulli(logits=z) log-likelihood and the normal prior, from the gradient's logits."""
    sp = net.add(L.Softplus(), z, name=f"{name}.softplus")
    yz = net.add(L.Mul(), y, z, name=f"{name}.yz")
    ll = net.add(L.Add(alpha=-1.0), yz, sp, name=f"{name}.loglik")
    data = net.add(L.MatMul(), ones, ll, name=f"{name}.data")
    sq = net.add(L.Mul(), theta, theta, name=f"{name}.theta_sq")
    prior = net.add(L.MatMul(), half, sq, name=f"{name}.prior")
    return net.add(L.Add(alpha=-1.0 / prior_var), data, prior, name=name)


def _kinetic(net: Network, half: str, p: str, name: str) -> str:
    """``0.5 * sum_d p_d^2`` per chain, (1, chains)."""
    sq = net.add(L.Mul(), p, p, name=f"{name}.p_sq")
    return net.add(L.MatMul(), half, sq, name=name)


def _accept(net: Network, log_u: str, ratio: str, ones_state: str) -> tuple[str, str]:
    """``log u`` and the log accept ratio (1, chains) broadcast over the state's rows
    (D, chains): an outer product with a column of ones."""
    return (net.add(L.MatMul(), ones_state, log_u, name="accept.log_u"),
            net.add(L.MatMul(), ones_state, ratio, name="accept.ratio"))


def hmc_logistic(n_data: int = GERMAN_CREDIT_ROWS, n_features: int = GERMAN_CREDIT_FEATURES,
                 leapfrog_steps: int = 10, chains: int = 64, step_size: float = 0.01,
                 prior_scale: float = 1.0) -> Network:
    """One HMC step (``leapfrog_steps`` leapfrog steps, unrolled, then the Metropolis accept)
    for Bayesian logistic regression with a ``N(0, prior_scale^2)`` prior, ``chains`` chains
    at once.

    Inputs (per problem; batch first when run): ``x`` (n_data, n_features), ``y``
    (n_data, chains) the 0/1 labels repeated per chain, ``theta`` / ``momentum`` / ``grad``
    (n_features, chains) the current state, its momentum draw and the gradient carried from
    the previous step, ``log_prob`` (1, chains) the current state's log posterior (carried
    too), ``log_u`` (1, chains) the log of each chain's uniform draw, and the constants
    ``half`` (1, n_features) filled with 0.5, ``ones`` (1, n_data) and ``ones_state``
    (n_features, 1) filled with 1. Outputs: the proposal ``leapfrog{L-1}.theta`` (first),
    ``momentum_new``, its gradient ``leapfrog{L-1}.grad`` (n_features, chains), the kinetic
    energies ``kinetic0`` / ``kinetic1`` and ``log_accept_ratio`` (1, chains), and the next
    state after the accept: ``next_theta``, ``next_grad`` (n_features, chains) and
    ``next_log_prob`` (1, chains). No parameters. Defaults: the German credit posterior's
    shape; 10 leapfrog steps and 64 chains are this project's choice (the claim's
    configuration is not published).
    """
    n, d = _positive_int("n_data", n_data), _positive_int("n_features", n_features)
    steps = _positive_int("leapfrog_steps", leapfrog_steps, MAX_LEAPFROG_STEPS)
    c = _positive_int("chains", chains)
    eps = _positive_float("step_size", step_size)
    prior_var = _positive_float("prior_scale", prior_scale) ** 2
    net = Network("hmc_logistic")
    x = net.input("x", (n, d))
    y = net.input("y", (n, c))
    theta0 = net.input("theta", (d, c))
    p = net.input("momentum", (d, c))
    g0 = net.input("grad", (d, c))
    lp0 = net.input("log_prob", (1, c))
    log_u = net.input("log_u", (1, c))
    half = net.input("half", (1, d))
    ones = net.input("ones", (1, n))
    ones_state = net.input("ones_state", (d, 1))
    xt = net.add(L.Permute((0, 2, 1)), x, name="x_t")
    k0 = _kinetic(net, half, p, "kinetic0")
    theta, g = theta0, g0
    p = net.add(L.Add(alpha=0.5 * eps), p, g, name="momentum_half")
    for i in range(steps):
        theta = net.add(L.Add(alpha=eps), theta, p, name=f"leapfrog{i}.theta")
        g, z = _grad_log_posterior(net, x, xt, y, theta, prior_var, f"leapfrog{i}.grad")
        lp = _log_posterior(net, z, y, theta, ones, half, prior_var, f"leapfrog{i}.log_prob")
        p = net.add(L.Add(alpha=eps), p, g, name=f"leapfrog{i}.momentum")
    p = net.add(L.Add(alpha=-0.5 * eps), p, g, name="momentum_new")
    k1 = _kinetic(net, half, p, "kinetic1")
    target = net.add(L.Add(alpha=-1.0), lp, lp0, name="accept.target")
    correction = net.add(L.Add(alpha=-1.0), k0, k1, name="accept.correction")
    ratio = net.add(L.Add(), target, correction, name="log_accept_ratio")
    u_rows, ratio_rows = _accept(net, log_u, ratio, ones_state)
    nxt = net.add(L.Select(), u_rows, ratio_rows, theta, theta0, name="next_theta")
    g_nxt = net.add(L.Select(), u_rows, ratio_rows, g, g0, name="next_grad")
    lp_nxt = net.add(L.Select(), log_u, ratio, lp, lp0, name="next_log_prob")
    net.output(theta, p, g, k0, k1, ratio, nxt, g_nxt, lp_nxt)
    return net
