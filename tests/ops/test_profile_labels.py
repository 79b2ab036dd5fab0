"""What a profile calls itself (issue 35's single-op leftovers): a matmul by its product, not
the 1x1 conv it is planned as; a program without a label without an empty gap; and no line
for a plan fact that is unset."""
import numpy as np

import ipukern as ik
from ipukern.core import Profile


def test_matmul_profiles_name_the_product_not_the_conv_mapping():
    est = ik.estimate_matmul((64, 128), (128, 32))
    assert est.label == "(64x128) @ (128x32) float16"
    assert est.summary().startswith("profile (64x128) @ (128x32) float16 on GC200")
    assert "C128->64" not in repr(est) and "(64x128) @ (128x32)" in repr(est)
    run = ik.matmul(np.ones((3, 8, 16), np.float32), np.ones((3, 16, 4), np.float32))
    assert run.profile.label == "3 x (8x16) @ (16x4) float32"
    names = [e["args"].get("name", "") for e in run.profile.to_trace()["traceEvents"] if e.get("ph") == "M"]
    assert any(n.startswith("3 x (8x16) @ (16x4) float32") for n in names), names
    assert "1x1 conv" in est.info["mapping"]          # the mapping stays, as a fact of the plan


def test_an_unlabelled_program_and_unset_facts_print_no_gaps():
    text = Profile(ik.GC200, [], info={"method": "AMP", "expand_dims": ""}).summary()
    assert text.startswith("profile on GC200 (")
    assert "  method: AMP" in text and "expand_dims" not in text

