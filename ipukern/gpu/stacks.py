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
* ``attention``: scores, scale, mask, softmax, dropout and context in one fused multi-head
  attention kernel (FMHA in NVIDIA's MLPerf BERT); only Q, K, V and the context touch DRAM;
* ``norm_residual``: residual add, dropout and layer norm in one pass (apex FusedLayerNorm);
* ``optimizer``: the whole optimizer step as a few multi-tensor-apply launches;
* ``unpadded``: BERT sequences without padding tokens (NVIDIA's unpadded BERT; Graphcore's
  packing): the token count is ``token_fraction`` of the padded one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .curves import get_efficiency_curve

__all__ = ["SoftwareStack", "STACKS", "FUSIONS", "get_stack"]

FUSIONS = ("conv_epilogue", "bias_act", "attention", "norm_residual", "optimizer", "unpadded")


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
    """

    name: str
    description: str
    host_per_op_s: float
    fusions: frozenset = field(default_factory=frozenset)
    layout: str = "NCHW"
    token_fraction: float = 1.0
    tf32: bool = False
    grouped_curve: str = "cudnn"
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
        get_efficiency_curve(self.grouped_curve)      # an unknown curve name fails here

    def fuses(self, what: str) -> bool:
        return what in self.fusions

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
        "and softmax, fused LayerNorm, multi-tensor optimizer, unpadded BERT, CUDA graphs",
        host_per_op_s=0.0, fusions=frozenset(FUSIONS), layout="NHWC", tf32=True,
        # Krell et al., "Efficient Sequence Packing without Cross-contamination" (2021,
        # arXiv 2107.02027): about half the tokens of Wikipedia at sequence length 512 are padding
        token_fraction=0.5,
        sources=(("fusions", "NVIDIA MLPerf Training v1.0 ResNet-50 (MXNet, NHWC fused BN) and "
                             "BERT (PyTorch, FMHA, apex fused LAMB) submissions"),
                 ("token fraction", "Krell et al. 2021: ~50% padding at 512 tokens")),
    ),
)}


def get_stack(stack: "SoftwareStack | str") -> SoftwareStack:
    """A stack by name (``"pytorch-eager"``, ``"cuda-graphs"``, ``"mlperf"``) or passed through."""
    if isinstance(stack, SoftwareStack):
        return stack
    if isinstance(stack, str) and stack.strip().lower() in STACKS:
        return STACKS[stack.strip().lower()]
    raise ValueError(f"unknown GPU software stack {stack!r}; stacks are {sorted(STACKS)}")
