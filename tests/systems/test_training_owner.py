"""Profile rows are attributed to the longest layer name they start with."""
import pytest

from ipukern.systems.training import _owner


def test_owner_is_the_longest_layer_prefix():
    layers = {"conv1", "conv10", "layer1", "layer1.0", "layer1.0.conv1"}
    assert _owner("conv1", layers) == "conv1"
    assert _owner("conv1 (recompute)", layers) == "conv1"
    assert _owner("conv10.grad_weight", layers) == "conv10"
    assert _owner("layer1.0.conv1.grad_input", layers) == "layer1.0.conv1"
    assert _owner("layer1.0.bn: rearrange", layers) == "layer1.0"
    with pytest.raises(NotImplementedError, match="names no layer"):
        _owner("fc.grad", layers)
