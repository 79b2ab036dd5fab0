"""``ipukern diff``: compare two profiles (``--json`` outputs) of the same kind: two programs
(conv, matmul) per superstep and category, two networks per layer pass, two training steps
per part and per IPU."""
from __future__ import annotations

import argparse
import json


def _load(path: str) -> tuple[str, dict]:
    from .._files import read_input_text
    from ..core.views import profile_kind
    try:
        d = json.loads(read_input_text(path, "profile"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    kind = profile_kind(d) if isinstance(d, dict) else "unknown"
    if kind not in ("profile", "network", "training"):
        raise ValueError(f"{path}: not an ipukern profile, network or training JSON (expected the "
                         "output of --json of conv, matmul, network or train)")
    return kind, d


def _cmd_diff(args: argparse.Namespace) -> int:
    from ..core.views import diff_profiles, format_diff
    from ..nn import diff_networks, format_network_diff
    from ..systems import diff_trainings, format_training_diff

    (ka, a), (kb, b) = _load(args.a), _load(args.b)
    if ka != kb:
        raise ValueError(f"{args.a} is a {ka} and {args.b} a {kb}: diff compares two of the same kind")
    compare, fmt = {"profile": (diff_profiles, format_diff),
                    "network": (diff_networks, format_network_diff),
                    "training": (diff_trainings, format_training_diff)}[ka]
    diff = compare(a, b)
    print(fmt(diff, only_changed=args.only_changed))
    if args.json == "-":
        args.json_stream.write(json.dumps(diff, indent=1) + "\n")
    elif args.json:
        from ._common import write_output
        write_output(args.json, json.dumps(diff, indent=1).encode())   # atomic; devices kept
        print(f"wrote {args.json}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "diff", help="compare two profiles of the same kind (JSON from --json of conv, matmul, "
                     "network or train)",
        description="Compare profile B with profile A, each value with B - A and B / A. Two "
                    "programs (conv, matmul): total, compute, sync and exchange cycles, bytes "
                    "exchanged, cycles per category and per superstep, the busiest tile's bytes "
                    "per memory category. Two networks: totals, cycles per category and per "
                    "layer pass, peak tile bytes. Two training steps: step time, throughput, "
                    "the parts of the step and each IPU's breakdown.",
        epilog="examples:\n"
               "  ipukern conv --shape 8,128,56,56 --cpg 4 --json a.json\n"
               "  ipukern conv --shape 8,128,56,56 --cpg 4 --exchange-bandwidth 8e12 --json b.json\n"
               "  ipukern diff a.json b.json\n"
               "  ipukern diff a.json b.json --json - | python -m json.tool\n"
               "  ipukern network resnet50 --batch 4 --json n4.json\n"
               "  ipukern network resnet50 --batch 8 --json n8.json\n"
               "  ipukern diff n4.json n8.json --only-changed",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("a", metavar="A.json", help="the baseline profile (from --json)")
    d.add_argument("b", metavar="B.json", help="the profile to compare with A")
    d.add_argument("--only-changed", action="store_true",
                   help="list only the rows whose value changed")
    d.add_argument("--json", metavar="PATH",
                   help="also write the comparison as JSON ('-': the JSON to stdout, the table to stderr)")
    d.set_defaults(func=_cmd_diff)
