"""``ipukern network``: a zoo network estimated on one IPU: per-layer table, totals, CSV,
JSON and two plots (time per layer by category; memory over the program)."""
from __future__ import annotations

import argparse

from ._common import (Progress, UsageError, add_document_views, add_machine_options, add_optimizer,
                      add_optimizer_state_dtype, add_partials, add_progress_options, out_dir,
                      progress_enabled, write_documents)


def _cmd_network(args: argparse.Namespace) -> int:
    from .. import nn, plots
    models = nn.models.MODELS
    if args.model not in models:
        raise UsageError(f"unknown model {args.model!r}; choose from {', '.join(models)}")
    kw = {}
    if args.model.startswith("bert"):
        if args.image_size is not None:
            raise ValueError("--image-size applies to the CNNs; BERT takes --seq-len")
        kw["seq_len"] = args.seq_len
    elif args.image_size is not None:
        kw["image_size"] = args.image_size
    net = models[args.model](**kw)
    out = out_dir(args)
    with Progress(f"network {args.model}", enabled=progress_enabled(args)):
        prof = nn.estimate_network(net, batch=args.batch, dtype=args.dtype, partials=args.partials,
                                   machine=args.machine, training=args.training,
                                   recompute="auto" if args.recompute == ["auto"] else args.recompute,
                                   optimizer=args.optimizer,
                                   optimizer_state_dtype=args.optimizer_state_dtype,
                                   allow_overflow=args.allow_overflow)
        stopped = None
        if args.max_batch:
            try:
                prof.memory  # noqa: B018 - computes max_batch (re-plans the network)
            except MemoryError as e:      # the host's memory, not the tiles': keep the estimate
                stopped = e
    print(prof.summary(max_rows=args.max_rows))
    if stopped is not None:
        raise stopped                     # after the estimate, one line, exit 1
    if args.gpu_system is not None:
        print(_gpu_line(args, net, prof))
    files = []
    if out is not None:
        stem = f"{args.model}_b{args.batch}{'_train' if args.training else ''}"
        files = [(out / f"{stem}.csv", prof.to_csv, False),
                 (out / f"{stem}.json", lambda p: p.write_text(prof.to_json(indent=1)), False),
                 (out / f"{stem}_layers.png", lambda p: plots.plot_network_layers(prof, p), True),
                 (out / f"{stem}_memory.png", lambda p: plots.plot_network_memory(prof, p), True)]
    write_documents(args, lambda: prof.to_json(indent=1), prof.to_trace, files)
    return 0


def _gpu_system(text: str) -> str | None:
    """``--gpu SYSTEM``: a GPU system preset whose GPU is compared with (``none``: no line)."""
    from ..gpu import GPU_SYSTEMS
    if text.lower() == "none":
        return None
    name = text.replace("-", "_").upper()
    if name not in GPU_SYSTEMS:
        raise argparse.ArgumentTypeError(f"unknown GPU system {text!r}; presets are {sorted(GPU_SYSTEMS)} "
                                         "or 'none'")
    return name


def _gpu_line(args: argparse.Namespace, net: object, prof: object) -> str:
    """The same network, batch, dtype and pass on one GPU of ``--gpu``'s system (the GPU model
    of ipukern.gpu, GPU time and its host cost per op as its software stack prices them)."""
    from ..gpu import GPU_SYSTEMS, estimate_network_gpu
    est = estimate_network_gpu(net, args.batch, args.gpu_system, n_gpus=1, dtype=args.dtype,
                               training=args.training, optimizer=args.optimizer)
    gpu = GPU_SYSTEMS[args.gpu_system].gpu.name
    return (f"GPU model (one {gpu} of {args.gpu_system}, {est.stack} stack): "
            f"{est.step_seconds * 1e3:.3f} ms per batch -> {est.samples_per_second:,.1f} samples/s; "
            f"IPU/GPU throughput ratio: {prof.samples_per_second / est.samples_per_second:.2f}x")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("network", help="estimate a zoo network on one IPU (per-layer table, "
                                       "memory, CSV/JSON/plots)",
                       epilog="examples:\n"
                              "  ipukern network resnet50 --batch 16\n"
                              "  ipukern network bert_base --seq-len 128 --out bert/\n"
                              "  ipukern network mobilenet_v2 --max-batch\n"
                              "  ipukern network resnet50 --batch 8 --json - --trace resnet50.trace.json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="zoo model: resnet50, resnext50_32x4d, resnext101_32x4d, "
                                 "efficientnet_b0..b4, efficientnet_b0_g16, efficientnet_b4_g16, "
                                 "mobilenet_v1, mobilenet_v2, bert_base, bert_large")
    p.add_argument("--batch", type=int, default=16, help="samples per step (default 16)")
    p.add_argument("--training", action="store_true", help="a training step instead of inference")
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16",
                   help="activation and weight dtype (default float16)")
    add_partials(p, "half")
    add_machine_options(p)
    p.add_argument("--recompute", nargs="*", default=None, metavar="LAYER",
                   help="training: checkpoints after which activations are recomputed, or 'auto' "
                        "(about sqrt(n) of the network's n block boundaries)")
    add_optimizer(p)
    add_optimizer_state_dtype(p)
    p.add_argument("--image-size", type=int, default=None, help="CNN input resolution")
    p.add_argument("--seq-len", type=int, default=128, help="BERT sequence length (default 128)")
    p.add_argument("--allow-overflow", action="store_true",
                   help="report a network that does not fit instead of failing")
    p.add_argument("--max-batch", action="store_true",
                   help="also search the largest batch that fits (re-plans the network)")
    p.add_argument("--max-rows", type=int, default=None, help="print at most this many layers")
    p.add_argument("--gpu", dest="gpu_system", type=_gpu_system, default="DGX_A100_40GB", metavar="SYSTEM",
                   help="also price the network on one GPU of this GPU system (default DGX_A100_40GB: "
                        "an A100 40GB, as the single-op commands' default GPU) and print the IPU/GPU "
                        "throughput ratio; 'none' to skip")
    add_document_views(p, out_files="the per-layer CSV, the JSON and the time-per-layer and memory PNGs")
    add_progress_options(p)
    p.set_defaults(func=_cmd_network)
