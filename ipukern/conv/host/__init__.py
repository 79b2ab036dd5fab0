"""Host-speed machinery of the conv pipeline, apart from the model: the forked worker that
plans (and builds) a network's conv passes on a spare core (:mod:`.prefetch`). Plans and
cycles are the same with or without it; a reader of the model can skip this package."""
from .prefetch import BuiltPass, MIN_PLANS, PlanKey, plan_worker, spare_core, take, take_built, worker_enabled

__all__ = ["BuiltPass", "MIN_PLANS", "PlanKey", "plan_worker", "spare_core", "take", "take_built",
           "worker_enabled"]
