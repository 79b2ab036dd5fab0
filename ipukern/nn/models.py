"""The model zoo (``ik.models``): CNNs following torchvision, BERT encoders following the
paper / Hugging Face, dense and generative networks (:mod:`ipukern.nn.zoo_dense`) and a stacked-LSTM
language model (:mod:`ipukern.nn.zoo_seq`) and an HMC sampler step
(:mod:`ipukern.nn.zoo_mcmc`), each after a cited public definition. Every function returns a
fresh :class:`~ipukern.nn.Network`."""
from .zoo_bert import bert_base, bert_large
from .zoo_dense import deeprec_autoencoder, mlp_sales, vae_conv, vae_dense
from .zoo_seq import lstm_stack
from .zoo_mcmc import hmc_logistic
from .zoo_cnn import (efficientnet_b0, efficientnet_b0_g16, efficientnet_b1, efficientnet_b2,
                      efficientnet_b3, efficientnet_b4, efficientnet_b4_g16, mobilenet_v1,
                      mobilenet_v2, resnet8, resnet20, resnet50, resnext50_32x4d, resnext101_32x4d)

__all__ = ["bert_base", "bert_large", "efficientnet_b0", "efficientnet_b0_g16", "efficientnet_b1",
           "efficientnet_b2", "efficientnet_b3", "efficientnet_b4", "efficientnet_b4_g16",
           "mobilenet_v1", "mobilenet_v2", "resnet8", "resnet20", "resnet50", "resnext50_32x4d",
           "resnext101_32x4d", "mlp_sales", "deeprec_autoencoder", "vae_dense", "vae_conv",
           "lstm_stack", "hmc_logistic", "MODELS"]

MODELS = {name: globals()[name] for name in __all__ if name != "MODELS"}
