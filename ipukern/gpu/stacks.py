"""GPU software stacks: what a framework fuses and what it costs per op on the host.

The same network runs at very different speeds on one GPU depending on the software: eager
PyTorch launches every op as its own kernel from Python; CUDA graphs replay the launches
without the host; MLPerf submissions fuse the network into few, large kernels. Every GPU
estimate names its stack.

Fusions (``SoftwareStack.fusions``):

* ``conv_epilogue``: a conv's or linear's bias, batch norm (folded at inference; its
  statistics in the conv epilogue in training) and activation, and a residual add, run in the
  GEMM's epilogue: no separate pass over the output (cuDNN's fused conv-bias-activation and
  NVIDIA's MLPerf ResNet-50 "NHWC fused BN-add-ReLU" kernels);
* ``bias_act``: a linear layer's bias and GELU in the GEMM epilogue (cuBLASLt epilogues);
  without it the activation is its own pass (bias-less GEMM + a JIT-fused bias-GELU pass, as
  NVIDIA's MLPerf BERT ``LinearActivation`` does, costs the same one pass);
* ``attention``: scores, scale, mask, softmax, dropout and context in one fused multi-head
  attention kernel (FMHA in NVIDIA's MLPerf BERT); only Q, K, V and the context touch DRAM;
* ``norm_residual``: residual add, dropout and layer norm in one pass;
* ``dropout_add``: in training, a transformer sub-layer's hidden dropout and its residual add
  in one pass (``jit_dropout_add`` of NVIDIA's MLPerf v1.1 BERT); without it (and without
  ``norm_residual``) dropout and add are two passes (v1.0 ran ``fused_dropout_add=False``);
* ``optimizer``: the whole optimizer step as a few multi-tensor-apply launches;
* ``unpadded``: BERT sequences without padding tokens (NVIDIA's unpadded BERT; Graphcore's
  packing): the token count is ``token_fraction`` of the padded one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..ops import OPTIMIZER_WORDS
from .curves import get_efficiency_curve

__all__ = ["SoftwareStack", "STACKS", "FUSIONS", "get_stack"]

FUSIONS = ("conv_epilogue", "bias_act", "attention", "norm_residual", "dropout_add", "optimizer",
           "unpadded")


@dataclass(frozen=True)
class SoftwareStack:
    """One GPU software stack.

    Attributes
    ----------
    name : str
    description : str
    host_per_op_s : float
        Host time to issue one op (Python, dispatcher, launch). The GPU waits for the host
        when its kernels are shorter than this.
    fusions : frozenset of str
        Members of :data:`FUSIONS`.
    layout : str
        ``"NCHW"`` or ``"NHWC"``; NCHW convs on tensor cores pay a transpose of input and output.
    token_fraction : float
        With ``unpadded``: real tokens / padded tokens.
    tf32 : bool
        FP32 GEMMs and convs on TF32 tensor cores where the GPU has them (PyTorch's default
        for cuDNN convs since 1.7, off for matmuls since 1.12; NVIDIA's MLPerf runs use it).
    grouped_curve : str
        The efficiency curve of its grouped/depthwise conv kernels (``"cudnn"``, or
        ``"optimized"`` for hand-written ones; :mod:`ipukern.gpu.curves`).
    distributed_optimizers : frozenset of str
        Optimizers the stack runs as apex's distributed fused optimizer (DistributedFusedLAMB
        as NVIDIA's MLPerf BERT ran it): after the backward pass (``dwu_overlap_reductions=
        False``: nothing hidden) a reduce-scatter of the gradients, each of n GPUs updates 1/n
        of the parameters, an all-gather of the weights; the two collectives move what one
        all-reduce does. Other optimizers: DDP, the all-reduce under the backward pass.
    """

    name: str
    description: str
    host_per_op_s: float
    fusions: frozenset = field(default_factory=frozenset)
    layout: str = "NCHW"
    token_fraction: float = 1.0
    tf32: bool = False
    grouped_curve: str = "cudnn"
    distributed_optimizers: frozenset = field(default_factory=frozenset)
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        bad = set(self.fusions) - set(FUSIONS)
        if bad:
            raise ValueError(f"stack {self.name!r}: unknown fusions {sorted(bad)}; known: {list(FUSIONS)}")
        if self.layout not in ("NCHW", "NHWC"):
            raise ValueError(f"stack {self.name!r}: layout must be NCHW or NHWC, got {self.layout!r}")
        if not (self.host_per_op_s >= 0):
            raise ValueError(f"stack {self.name!r}: host_per_op_s must be >= 0")
        if not (0 < self.token_fraction <= 1):
            raise ValueError(f"stack {self.name!r}: token_fraction must be in (0, 1]")
        object.__setattr__(self, "fusions", frozenset(self.fusions))
        object.__setattr__(self, "distributed_optimizers", frozenset(self.distributed_optimizers))
        bad = self.distributed_optimizers - set(OPTIMIZER_WORDS)
        if bad:
            raise ValueError(f"stack {self.name!r}: unknown distributed_optimizers {sorted(bad)}; "
                             f"known: {sorted(OPTIMIZER_WORDS)}")
        get_efficiency_curve(self.grouped_curve)      # an unknown curve name fails here

    def fuses(self, what: str) -> bool:
        return what in self.fusions

    def distributes(self, optimizer: str) -> bool:
        """Whether ``optimizer`` runs sharded, after the backward pass (``distributed_optimizers``)."""
        return optimizer in self.distributed_optimizers

    def replace(self, **changes) -> "SoftwareStack":
        """A copy with fields changed, e.g. ``get_stack("mlperf").replace(grouped_curve="optimized")``."""
        return dataclasses.replace(self, **changes)


STACKS: dict[str, SoftwareStack] = {s.name: s for s in (
    SoftwareStack(
        "pytorch-eager",
        "eager PyTorch: one kernel per op, no fusion, NCHW, issued from Python",
        # GAP: no single public figure; peers-and-gpu.md section 4 gives "several to tens of
        # microseconds per op" for eager PyTorch. NeuSight's per-op traces time ops that
        # launch no kernel (size, getitem) at 6.4-7.3 us between CUDA events on H100
        # (label/NVIDIA_H100_80GB_HBM3/bert_large-train-512-8.csv); a launching op costs more.
        host_per_op_s=10e-6,
        sources=(("host per op", "GAP: 10 us, from the 7 us no-kernel ops in NeuSight's traces"),),
    ),
    SoftwareStack(
        "cuda-graphs",
        "eager PyTorch's kernels captured in a CUDA graph: no host cost per op, no fusion",
        # CUDA graphs replay launches back to back on the GPU; what remains per kernel is the
        # GPU-side launch gap already in each kernel's launch_s floor.
        host_per_op_s=0.0,
        sources=(("host per op", "CUDA graphs replay without host work (CUDA Programming Guide)"),),
    ),
    SoftwareStack(
        "mlperf",
        "NVIDIA's MLPerf Training submissions: NHWC, conv+BN+ReLU epilogues, fused attention "
        "and softmax, fused dropout+add, multi-tensor optimizer, unpadded BERT, distributed "
        "LAMB after the backward pass, no host cost per op",
        host_per_op_s=0.0, layout="NHWC", tf32=True,
        # BERT (training_results_v1.0 NVIDIA/results/dgxa100_ngc21.05_pytorch/bert/result_0.txt,
        # the parsed args; v1.1 config_DGXA100_1x8x56x1.sh and modeling.py): bias+GELU is a
        # JIT kernel after a bias-less GEMM (LinearActivation), not a GEMM epilogue, so no
        # bias_act; dropout+add is one JIT kernel in v1.1 (fused_dropout_add), layer norm its
        # own apex kernel (BertLayerNorm), so dropout_add and not norm_residual
        fusions=frozenset(FUSIONS) - {"bias_act", "norm_residual"},
        # Krell et al., "Efficient Sequence Packing without Cross-contamination" (2021,
        # arXiv 2107.02027): about half the tokens of Wikipedia at sequence length 512 are padding
        token_fraction=0.5,
        # the v1.0 BERT log: distributed_lamb=True, dwu_overlap_reductions=False,
        # allreduce_post_accumulation=True: reduce-scatter, 1/8 of LAMB, all-gather, after
        # the backward pass (ResNet-50's LARS: no such record, DDP-style)
        distributed_optimizers=frozenset({"lamb"}),
        sources=(("fusions", "NVIDIA MLPerf Training v1.0 ResNet-50 (MXNet, NHWC fused BN) and "
                             "BERT (PyTorch, FMHA, jit bias-GELU, v1.1 jit dropout-add) submissions"),
                 ("token fraction", "Krell et al. 2021: ~50% padding at 512 tokens"),
                 ("reductions", "v1.0 BERT log: distributed_lamb, dwu_overlap_reductions=False"),
                 ("host per op", "GAP: 0; the v1.0 BERT ran use_cuda_graph=False, but 10 us "
                                 "per op leaves its modelled step unchanged (the GPU never waits)")),
    ),
)}


def get_stack(stack: "SoftwareStack | str") -> SoftwareStack:
    """A stack by name (``"pytorch-eager"``, ``"cuda-graphs"``, ``"mlperf"``) or passed through."""
    if isinstance(stack, SoftwareStack):
        return stack
    if isinstance(stack, str) and stack.strip().lower() in STACKS:
        return STACKS[stack.strip().lower()]
    raise ValueError(f"unknown GPU software stack {stack!r}; stacks are {sorted(STACKS)}")
