"""The conv layers the planner bench times and ``plan_identity.py`` checks: the scaling
sweep's layers (x shape, w shape, padding, groups)."""

LAYERS = {
    # ResNeXt-50 conv2-stage 3x3 at batch 8: dense, ResNeXt's 32 groups, depthwise
    "resnext_g1": ((8, 128, 56, 56), (128, 128, 3, 3), 1, 1),
    "resnext_g32": ((8, 128, 56, 56), (128, 4, 3, 3), 1, 32),
    "resnext_g128": ((8, 128, 56, 56), (128, 1, 3, 3), 1, 128),
    # EfficientNet-B0 stage-3 depthwise 5x5
    "effnet_dw5": ((8, 240, 28, 28), (240, 1, 5, 5), 2, 240),
    # ResNet-50 conv2 3x3 at batch 8, the layer timed against SCALE-Sim
    "resnet50_3x3": ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
}
