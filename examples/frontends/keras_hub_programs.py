"""Keras 3 on the JAX backend: keras_hub backbones and task models with tiny configurations.

Runs in an interpreter with keras, keras-hub and jax (examples/frontends/
requirements-jax-science.txt); see examples/generate_frontends_corpus.py. Models are built from
constructor arguments (no preset download, random initialisation). Inference is
``jax.jit(model.stateless_call)``; a train step is ``stateless_call`` in training mode + a Keras
loss + ``jax.value_and_grad`` + the Keras optimizer's ``stateless_apply``, all in one jit. Variables
(trainable, non-trainable, optimizer) are jit arguments, so the HLO has them as parameters.
"""
from __future__ import annotations

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Registry, main, make_program_decorator  # noqa: E402

PROGRAMS: Registry = {}
program = make_program_decorator(PROGRAMS)
SEED = 0


def _keras():
    import keras
    assert keras.backend.backend() == "jax", keras.backend.backend()
    keras.utils.set_random_seed(SEED)
    return keras


def _lower(fn, *args, name: str) -> str:
    import jax
    fn.__name__ = fn.__qualname__ = name
    return jax.jit(fn).lower(*args).as_text(dialect="hlo")


def _values(variables):
    return [v.value for v in variables]


def infer_hlo(model, inputs, name: str) -> str:
    tv, ntv = _values(model.trainable_variables), _values(model.non_trainable_variables)

    def infer(tv, ntv, inputs):
        out, _ = model.stateless_call(tv, ntv, inputs, training=False)
        return out
    return _lower(infer, tv, ntv, inputs, name=name)


def train_hlo(model, optimizer, loss, inputs, targets, name: str) -> str:
    import jax
    optimizer.build(model.trainable_variables)
    tv, ntv = _values(model.trainable_variables), _values(model.non_trainable_variables)
    ov = _values(optimizer.variables)

    def loss_fn(tv, ntv, inputs, targets):
        out, ntv = model.stateless_call(tv, ntv, inputs, training=True)
        return loss(targets, out), ntv

    def train_step(tv, ntv, ov, inputs, targets):
        (value, ntv), grads = jax.value_and_grad(loss_fn, has_aux=True)(tv, ntv, inputs, targets)
        tv, ov = optimizer.stateless_apply(ov, grads, tv)
        return tv, ntv, ov, value
    return _lower(train_step, tv, ntv, ov, inputs, targets, name=name)


def _tokens(b=2, t=16, vocab=128, i=0):
    import numpy as np
    return np.random.default_rng(SEED + i).integers(0, vocab, (b, t)).astype("int32")


def _mask(b=2, t=16):
    import numpy as np
    m = np.ones((b, t), bool)
    m[1, t - 4:] = False
    return m


def _images(b=2, h=32, w=32, c=3):
    import numpy as np
    return np.random.default_rng(SEED + 1).standard_normal((b, h, w, c)).astype("float32")


def _versions_note(**kw):
    return dict(kw)


# --------------------------------------------------------------------------------- text backbones

def _bert(dropout=0.1):
    import keras_hub
    return keras_hub.models.BertBackbone(vocabulary_size=128, num_layers=2, num_heads=4, hidden_dim=32,
                                         intermediate_dim=64, dropout=dropout, max_sequence_length=32)


@program("kerashub_bert_backbone_infer", "keras_hub", "infer")
def kerashub_bert_backbone_infer():
    _keras()
    import numpy as np
    inputs = {"token_ids": _tokens(), "segment_ids": np.zeros((2, 16), "int32"), "padding_mask": _mask()}
    return infer_hlo(_bert(), inputs, "kerashub_bert_backbone"), {"model": "BertBackbone 2x32"}


@program("kerashub_bert_classifier_train_adamw", "keras_hub", "train")
def kerashub_bert_classifier_train_adamw():
    keras = _keras()
    import keras_hub
    import numpy as np
    model = keras_hub.models.BertTextClassifier(backbone=_bert(), num_classes=3, preprocessor=None)
    inputs = {"token_ids": _tokens(), "segment_ids": np.zeros((2, 16), "int32"), "padding_mask": _mask()}
    labels = np.array([0, 2], "int32")
    opt = keras.optimizers.AdamW(1e-3, weight_decay=0.01, global_clipnorm=1.0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return train_hlo(model, opt, loss, inputs, labels, "kerashub_bert_classifier_train"), \
        {"optimizer": "AdamW global_clipnorm", "dropout": 0.1}


def _gpt2():
    import keras_hub
    return keras_hub.models.GPT2Backbone(vocabulary_size=128, num_layers=2, num_heads=4, hidden_dim=32,
                                         intermediate_dim=64, dropout=0.0, max_sequence_length=32)


@program("kerashub_gpt2_causallm_infer", "keras_hub", "infer")
def kerashub_gpt2_causallm_infer():
    _keras()
    import keras_hub
    model = keras_hub.models.GPT2CausalLM(backbone=_gpt2(), preprocessor=None)
    return infer_hlo(model, {"token_ids": _tokens(), "padding_mask": _mask()}, "kerashub_gpt2_causallm"), \
        {"model": "GPT2CausalLM 2x32 (tied embeddings)"}


@program("kerashub_gpt2_causallm_train_adam", "keras_hub", "train")
def kerashub_gpt2_causallm_train_adam():
    keras = _keras()
    import keras_hub
    import numpy as np
    model = keras_hub.models.GPT2CausalLM(backbone=_gpt2(), preprocessor=None)
    tok = _tokens(t=17)
    inputs = {"token_ids": tok[:, :-1], "padding_mask": np.ones((2, 16), bool)}
    opt = keras.optimizers.Adam(1e-3)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return train_hlo(model, opt, loss, inputs, tok[:, 1:], "kerashub_gpt2_causallm_train"), \
        {"optimizer": "Adam"}


@program("kerashub_llama_backbone_infer", "keras_hub", "infer")
def kerashub_llama_backbone_infer():
    _keras()
    import keras_hub
    model = keras_hub.models.LlamaBackbone(vocabulary_size=128, num_layers=2, num_query_heads=4,
                                           num_key_value_heads=2, hidden_dim=32, intermediate_dim=64)
    return infer_hlo(model, {"token_ids": _tokens(), "padding_mask": _mask()}, "kerashub_llama_backbone"), \
        {"model": "LlamaBackbone GQA 4q/2kv heads, RoPE, RMSNorm, SwiGLU"}


@program("kerashub_gemma_causallm_train_sgd", "keras_hub", "train")
def kerashub_gemma_causallm_train_sgd():
    keras = _keras()
    import keras_hub
    import numpy as np
    backbone = keras_hub.models.GemmaBackbone(vocabulary_size=128, num_layers=2, num_query_heads=4,
                                              num_key_value_heads=1, hidden_dim=32, intermediate_dim=64,
                                              head_dim=8)
    model = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    tok = _tokens(t=17, i=2)
    inputs = {"token_ids": tok[:, :-1], "padding_mask": np.ones((2, 16), bool)}
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return train_hlo(model, opt, loss, inputs, tok[:, 1:], "kerashub_gemma_causallm_train"), \
        {"optimizer": "SGD momentum", "model": "GemmaBackbone MQA, GeGLU"}


# --------------------------------------------------------------------------------- image backbones

def _resnet():
    import keras_hub
    return keras_hub.models.ResNetBackbone(
        # keras_hub requires 64 filters in the stem and the first stage
        input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64, 128],
        stackwise_num_blocks=[1, 1], stackwise_num_strides=[1, 2], block_type="basic_block",
        use_pre_activation=False, image_shape=(32, 32, 3))


@program("kerashub_resnet_backbone_infer", "keras_hub", "infer")
def kerashub_resnet_backbone_infer():
    _keras()
    return infer_hlo(_resnet(), _images(), "kerashub_resnet_backbone"), {"model": "ResNetBackbone basic blocks"}


@program("kerashub_resnet_classifier_train_rmsprop", "keras_hub", "train")
def kerashub_resnet_classifier_train_rmsprop():
    keras = _keras()
    import keras_hub
    import numpy as np
    model = keras_hub.models.ImageClassifier(backbone=_resnet(), num_classes=10, preprocessor=None)
    opt = keras.optimizers.RMSprop(1e-3)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return train_hlo(model, opt, loss, _images(), np.array([1, 7], "int32"),
                     "kerashub_resnet_classifier_train"), {"optimizer": "RMSprop", "batch_norm": "train mode"}


@program("kerashub_vit_backbone_infer", "keras_hub", "infer")
def kerashub_vit_backbone_infer():
    _keras()
    import keras_hub
    model = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=4,
                                         hidden_dim=32, mlp_dim=64)
    return infer_hlo(model, _images(), "kerashub_vit_backbone"), {"model": "ViTBackbone patch 8"}


if __name__ == "__main__":
    sys.exit(main(PROGRAMS, "keras_jax", ("keras", "keras-hub", "jax", "jaxlib")))
