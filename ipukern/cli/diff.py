"""``ipukern diff``: compare two profiles (``--json`` outputs) per superstep and category."""
from __future__ import annotations

import argparse
import json


def _cmd_diff(args: argparse.Namespace) -> int:
    from ..core.views import diff_profiles, format_diff, load_profile_dict

    diff = diff_profiles(load_profile_dict(args.a), load_profile_dict(args.b))
    print(format_diff(diff, only_changed=args.only_changed))
    if args.json == "-":
        args.json_stream.write(json.dumps(diff, indent=1) + "\n")
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(diff, f, indent=1)
        print(f"wrote {args.json}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "diff", help="compare two profiles (JSON from --json) per superstep and per category",
        description="Compare profile B with profile A: total, compute, sync and exchange "
                    "cycles, bytes exchanged, cycles per category and per superstep, and the "
                    "busiest tile's bytes per memory category, each with B - A and B / A.",
        epilog="examples:\n"
               "  ipukern conv --shape 8,128,56,56 --cpg 4 --json a.json\n"
               "  ipukern conv --shape 8,128,56,56 --cpg 4 --exchange-bandwidth 8e12 --json b.json\n"
               "  ipukern diff a.json b.json\n"
               "  ipukern diff a.json b.json --json - | python -m json.tool",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("a", metavar="A.json", help="the baseline profile (from --json)")
    d.add_argument("b", metavar="B.json", help="the profile to compare with A")
    d.add_argument("--only-changed", action="store_true",
                   help="list only the rows whose value changed")
    d.add_argument("--json", metavar="PATH",
                   help="also write the comparison as JSON ('-': the JSON to stdout, the table to stderr)")
    d.set_defaults(func=_cmd_diff)
