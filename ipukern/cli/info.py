"""``ipukern info``: the machine presets, GPU models and market figures with their sources."""
from __future__ import annotations

import argparse

from .. import _settings, market
from .._format import MISSING, format_table
from ._common import DATASHEET_EXCHANGE, PRESETS


def _cmd_info(args: argparse.Namespace) -> int:
    from .._kernels import _exchange
    from ..gpu import GPU_PRESETS, GPU_SYSTEMS
    for spec in PRESETS.values():
        print(spec.describe())
        print()
    print(f"datasheet exchange variant: GC200 with --exchange-bandwidth datasheet "
          f"({DATASHEET_EXCHANGE / 1e12:.0f} TB/s instead of the default "
          f"{PRESETS['GC200'].exchange_bandwidth / 1e12:.1f} TB/s)")
    print()
    if args.gpus:
        for g in GPU_PRESETS.values():
            print(g.describe())
            print()
    else:
        print("GPU models: " + ", ".join(GPU_PRESETS) + " (ipukern info --gpus for details)")
    if args.systems:
        from ..systems import SYSTEM_PRESETS
        for s in dict.fromkeys(SYSTEM_PRESETS.values()):
            print(s.describe())
            print()
        for g in GPU_SYSTEMS.values():
            print(g.describe())
            print()
    else:
        print("systems: IPU_M2000, IPU_POD16, IPU_POD64, BOW_2000, BOW_POD16, BOW_POD64, "
              f"{', '.join(GPU_SYSTEMS)} (ipukern info --systems for details)")
    if args.market:
        print(market_text())
        print()
    else:
        print("prices and power: " + ", ".join(market.keys()) + " (ipukern info --market for sources)")
    print(f"host: {_exchange.max_threads()} threads, OpenMP {'on' if _exchange.has_openmp() else 'off'}")
    print()
    print("settings (environment; value or (default)):")
    print(_settings.describe())
    return 0


def market_text() -> str:
    """ipukern.market's figures, then the price and power ``ipukern compare`` uses per preset."""
    from ..gpu import GPU_SYSTEMS
    from ..systems import SYSTEM_PRESETS

    rows = [[s.name, p.label() if p else MISSING, p.key if p else "no public figure",
             w.label() if w else MISSING, w.key if w else "no public figure"]
            for s in (*dict.fromkeys(SYSTEM_PRESETS.values()), *GPU_SYSTEMS.values())
            for p, w in [market.for_system(s)]]
    table = format_table(["system", "price", "price from", "power", "power from"], rows, align="lrlrl")
    return "\n".join([market.describe(), "", "what ipukern compare divides by (market.for_system):", table])


def register(sub: argparse._SubParsersAction) -> None:
    # info
    info = sub.add_parser("info", help="print the machine presets and their sources",
                          description="Print every IPU preset's constants with their public "
                                      "sources, and the host's threads and OpenMP.",
                          epilog="examples:\n  ipukern info\n  ipukern info --gpus\n  ipukern info --market",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    info.add_argument("--gpus", action="store_true", help="also describe the GPU models")
    info.add_argument("--systems", action="store_true",
                      help="also describe the multi-IPU systems and GPU systems")
    info.add_argument("--market", action="store_true",
                      help="also list the sourced list prices and power figures (ipukern.market)")
    info.set_defaults(func=_cmd_info)
