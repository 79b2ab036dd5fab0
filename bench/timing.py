"""Wall-time helpers shared by the benchmarks: a same-run baseline timer and the
benchmark's own best round."""
import time



def best_seconds(fn, *, repeat: int = 5, min_time: float = 0.05) -> float:
    """Best wall time of ``fn()`` over ``repeat`` rounds (each round loops until
    ``min_time`` so short calls are measured above timer resolution)."""
    fn()  # warm-up: page faults, JIT, caches
    best = float("inf")
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = min(best, dt / n)
    return best


def measured_seconds(benchmark) -> float | None:
    """The benchmark's best round in seconds, or None when benchmarks are disabled."""
    stats = getattr(benchmark, "stats", None)
    if not stats:
        return None
    return stats.stats.min
