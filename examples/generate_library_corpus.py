#!/usr/bin/env python3
"""Generate the library corpus: programs written with the model libraries JAX users use.

    pip install -e ".[models]"       # flax, dm-haiku, equinox, optax, jmp, transformers<5 (Flax models)
    python examples/generate_library_corpus.py [--out examples/hlo_library] [--only NAME ...] [--list]

Every model comes from the libraries' own code (flax linen and nnx layers, haiku's ``hk.nets``,
equinox's ``eqx.nn``, HF transformers' Flax models with tiny configurations), not from this
project: inference steps and train steps with optax optimizers (adam, adamw, sgd with nesterov and
a cosine schedule, lamb, rmsprop, adafactor, lion, gradient clipping), dropout in train mode (a
PRNG key argument: threefry in the HLO), jmp bf16 policies, batch norm state, ``lax.scan`` /
``nn.scan`` / ``nn.RNN``. Parameters, optimizer state, keys and inputs are jit *arguments*, so the
text holds ``parameter`` instructions, not large constants.

Each program is written as <out>/<name>.hlo (``jax.jit(fn).lower(*args).as_text(dialect="hlo")``),
re-parsed by XLA's parser, compiled and run once through jax (its outputs must be finite);
<out>/manifest.json lists them with the library versions that produced them. The split of these
programs between validation and test for learned models is docs/evaluation.md's business; this
script only writes them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from hlo_count import count_hlo, read_manifest, write_manifest  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hlo_library")
SEED = 0
PROGRAMS: dict[str, tuple[str, Callable]] = {}   # name -> (library, builder() -> (fn, args))


def program(name: str, library: str):
    def register(builder):
        PROGRAMS[name] = (library, builder)
        return builder
    return register


def _key(i: int = 0):
    return jax.random.PRNGKey(SEED + i)


def _images(b=4, h=16, w=16, c=3):
    return jax.random.normal(_key(1), (b, h, w, c), jnp.float32)


def _labels(b=4, n=10):
    return jax.random.randint(_key(2), (b,), 0, n)


def _tokens(b=2, t=16, vocab=128):
    return jax.random.randint(_key(3), (b, t), 0, vocab)


def _xent(logits, labels):
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()


def _optax_step(loss_fn, tx, has_aux=False):
    """A train step (params, opt_state, *batch) -> (params, opt_state, loss[, aux])."""
    import optax

    def step(params, opt_state, *batch):
        if has_aux:
            (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *batch)
        else:
            loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state, loss, aux) if has_aux else (params, opt_state, loss)
    return step


# ---------------------------------------------------------------------------------------- flax linen

def _linen_cnn():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            for feat in (16, 32):
                x = nn.Conv(feat, (3, 3))(x)
                x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
                x = nn.relu(x)
                x = nn.avg_pool(x, (2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.Dense(64)(x)
            x = nn.Dropout(0.2, deterministic=not train)(x)
            return nn.Dense(10)(nn.relu(x))
    return CNN()


@program("flax_cnn_bn_train_sgd", "flax.linen")
def flax_cnn_bn_train_sgd():
    import optax
    model = _linen_cnn()
    x, y = _images(), _labels()
    variables = model.init({"params": _key(), "dropout": _key(9)}, x, train=False)
    tx = optax.sgd(optax.cosine_decay_schedule(0.1, 1000), momentum=0.9, nesterov=True)

    def loss_fn(params, stats, x, y, key):
        logits, upd = model.apply({"params": params, "batch_stats": stats}, x, train=True,
                                  mutable=["batch_stats"], rngs={"dropout": key})
        return _xent(logits, y), upd["batch_stats"]

    def step(params, opt_state, stats, x, y, key):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, x, y, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, stats, loss
    params = variables["params"]
    return step, (params, tx.init(params), variables["batch_stats"], x, y, _key(5))


@program("flax_cnn_bn_infer", "flax.linen")
def flax_cnn_bn_infer():
    model = _linen_cnn()
    x = _images()
    variables = model.init({"params": _key(), "dropout": _key(9)}, x, train=False)
    return (lambda v, x: model.apply(v, x, train=False)), (variables, x)


class _Seq2Seq:
    """A flax encoder-decoder of nn.MultiHeadDotProductAttention blocks with dropout."""

    @staticmethod
    def make(dtype=jnp.float32):
        import flax.linen as nn

        class Block(nn.Module):
            cross: bool = False

            @nn.compact
            def __call__(self, x, mem, mask, train):
                drop = nn.Dropout(0.1, deterministic=not train)
                h = nn.LayerNorm(dtype=dtype)(x)
                h = nn.MultiHeadDotProductAttention(num_heads=4, dtype=dtype, dropout_rate=0.1,
                                                    deterministic=not train)(h, h, mask=mask)
                x = x + drop(h)
                if self.cross:
                    h = nn.LayerNorm(dtype=dtype)(x)
                    h = nn.MultiHeadDotProductAttention(num_heads=4, dtype=dtype)(h, mem)
                    x = x + drop(h)
                h = nn.LayerNorm(dtype=dtype)(x)
                h = nn.Dense(64, dtype=dtype)(h)
                h = nn.Dense(x.shape[-1], dtype=dtype)(nn.gelu(h))
                return x + drop(h)

        class Seq2Seq(nn.Module):
            @nn.compact
            def __call__(self, src, tgt, train):
                emb = nn.Embed(128, 32, dtype=dtype)
                mem = emb(src)
                for _ in range(2):
                    mem = Block()(mem, None, None, train)
                x = emb(tgt)
                causal = nn.make_causal_mask(tgt)
                for _ in range(2):
                    x = Block(cross=True)(x, mem, causal, train)
                return emb.attend(nn.LayerNorm(dtype=dtype)(x))
        return Seq2Seq()


@program("flax_seq2seq_train_adamw", "flax.linen")
def flax_seq2seq_train_adamw():
    import optax
    model = _Seq2Seq.make()
    src, tgt = _tokens(), _tokens(t=12)
    params = model.init({"params": _key(), "dropout": _key(9)}, src, tgt, train=False)["params"]
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.01))

    def loss_fn(params, src, tgt, key):
        logits = model.apply({"params": params}, src, tgt[:, :-1], train=True, rngs={"dropout": key})
        return _xent(logits, tgt[:, 1:])
    return _optax_step(loss_fn, tx), (params, tx.init(params), src, tgt, _key(5))


@program("flax_seq2seq_bf16_infer", "flax.linen")
def flax_seq2seq_bf16_infer():
    model = _Seq2Seq.make(jnp.bfloat16)
    src, tgt = _tokens(), _tokens(t=12)
    params = model.init({"params": _key(), "dropout": _key(9)}, src, tgt, train=False)["params"]
    return (lambda p, s, t: model.apply({"params": p}, s, t, train=False)), (params, src, tgt)


@program("flax_lstm_train_rmsprop", "flax.linen")
def flax_lstm_train_rmsprop():
    import flax.linen as nn
    import optax

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens, train):
            x = nn.Embed(128, 32)(tokens)
            x = nn.RNN(nn.LSTMCell(48))(x)
            x = nn.Dropout(0.3, deterministic=not train)(x)
            x = nn.RNN(nn.LSTMCell(48))(x)
            return nn.Dense(128)(x)
    model = LM()
    tok = _tokens()
    params = model.init({"params": _key(), "dropout": _key(9)}, tok, train=False)["params"]
    tx = optax.rmsprop(1e-3)

    def loss_fn(params, tok, key):
        logits = model.apply({"params": params}, tok[:, :-1], train=True, rngs={"dropout": key})
        return _xent(logits, tok[:, 1:])
    return _optax_step(loss_fn, tx), (params, tx.init(params), tok, _key(5))


@program("flax_scan_mlp_train_lamb", "flax.linen")
def flax_scan_mlp_train_lamb():
    import flax.linen as nn
    import optax

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.Dense(64)(nn.LayerNorm()(x))
            return x + nn.Dense(x.shape[-1])(nn.swish(h)), None

    class Deep(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(32)(x)
            x, _ = nn.scan(Layer, variable_axes={"params": 0}, split_rngs={"params": True},
                           length=4)()(x, None)
            return nn.Dense(10)(x)
    model = Deep()
    x, y = jax.random.normal(_key(1), (8, 20)), _labels(8)
    params = model.init(_key(), x)["params"]
    tx = optax.lamb(1e-3)
    return _optax_step(lambda p, x, y: _xent(model.apply({"params": p}, x), y), tx), \
        (params, tx.init(params), x, y)


# ---------------------------------------------------------------------------------------- flax nnx

@program("nnx_mlp_dropout_train_adam", "flax.nnx")
def nnx_mlp_dropout_train_adam():
    from flax import nnx
    import optax

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(20, 64, rngs=rngs)
            self.bn = nnx.BatchNorm(64, rngs=rngs)
            self.drop = nnx.Dropout(0.25, rngs=rngs)
            self.l2 = nnx.Linear(64, 10, rngs=rngs)

        def __call__(self, x):
            return self.l2(self.drop(nnx.relu(self.bn(self.l1(x)))))
    model = MLP(nnx.Rngs(params=0, dropout=1))
    model.train()
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    graphdef, state = nnx.split((model, opt))
    x, y = jax.random.normal(_key(1), (16, 20)), _labels(16)

    def step(state, x, y):
        model, opt = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: _xent(m(x), y))(model)
        opt.update(model, grads)
        return nnx.state((model, opt)), loss
    return step, (state, x, y)


@program("nnx_attention_infer", "flax.nnx")
def nnx_attention_infer():
    from flax import nnx

    class Enc(nnx.Module):
        def __init__(self, rngs):
            self.attn = nnx.MultiHeadAttention(num_heads=4, in_features=32, decode=False, rngs=rngs)
            self.ln1 = nnx.LayerNorm(32, rngs=rngs)
            self.ln2 = nnx.LayerNorm(32, rngs=rngs)
            self.ff1 = nnx.Linear(32, 64, rngs=rngs)
            self.ff2 = nnx.Linear(64, 32, rngs=rngs)

        def __call__(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.ff2(nnx.gelu(self.ff1(self.ln2(x))))
    graphdef, state = nnx.split(Enc(nnx.Rngs(0)))
    x = jax.random.normal(_key(1), (2, 16, 32))
    return (lambda s, x: nnx.merge(graphdef, s)(x)), (state, x)


# ---------------------------------------------------------------------------------------- haiku

_BF16_POLICY = "params=float32,compute=bfloat16,output=float32"


def _haiku_resnet():
    """hk.nets.ResNet under a jmp policy (f32 params, bf16 compute, f32 output; batch norm in f32).
    Policies are global per module class and apply while tracing: set here, kept for the lowering."""
    import haiku as hk
    import jmp
    hk.mixed_precision.set_policy(hk.nets.ResNet, jmp.get_policy(_BF16_POLICY))
    hk.mixed_precision.set_policy(hk.BatchNorm, jmp.get_policy("params=float32,compute=float32,output=bfloat16"))

    def forward(x, is_training):
        net = hk.nets.ResNet(blocks_per_group=(1, 1, 1, 1), num_classes=10,
                             channels_per_group=(16, 32, 32, 64), use_projection=(True, True, True, True),
                             bottleneck=False, name="resnet")
        return net(x, is_training=is_training)
    return hk.transform_with_state(forward)


@program("haiku_resnet_bf16_train_sgd", "haiku")
def haiku_resnet_bf16_train_sgd():
    import optax
    f = _haiku_resnet()
    x, y = _images(h=32, w=32), _labels()
    params, state = f.init(_key(), x, is_training=True)
    tx = optax.sgd(optax.cosine_decay_schedule(0.1, 1000), momentum=0.9, nesterov=True)

    def loss_fn(params, state, x, y):
        logits, state = f.apply(params, state, None, x, is_training=True)
        return _xent(logits, y), state

    def step(params, opt_state, state, x, y):
        (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, state, loss
    return step, (params, tx.init(params), state, x, y)


@program("haiku_resnet_bf16_infer", "haiku")
def haiku_resnet_bf16_infer():
    f = _haiku_resnet()
    x = _images(h=32, w=32)
    params, state = f.init(_key(), x, is_training=True)
    return (lambda p, s, x: f.apply(p, s, None, x, is_training=False)[0]), (params, state, x)


@program("haiku_mobilenet_infer", "haiku")
def haiku_mobilenet_infer():
    import haiku as hk
    f = hk.transform_with_state(lambda x, is_training: hk.nets.MobileNetV1(
        strides=(1, 2, 1, 2, 1, 2, 1), channels=(16, 32, 32, 64, 64, 128, 128), num_classes=10)(
        x, is_training=is_training))
    x = _images(h=32, w=32)
    params, state = f.init(_key(), x, is_training=True)
    return (lambda p, s, x: f.apply(p, s, None, x, is_training=False)[0]), (params, state, x)


@program("haiku_mlp_dropout_train_adafactor", "haiku")
def haiku_mlp_dropout_train_adafactor():
    import haiku as hk
    import optax

    def forward(x, key):
        x = hk.nets.MLP([64, 64], activation=jax.nn.gelu)(x, dropout_rate=0.2, rng=key)
        return hk.Linear(10)(x)
    f = hk.without_apply_rng(hk.transform(forward))
    x, y = jax.random.normal(_key(1), (16, 20)), _labels(16)
    params = f.init(_key(), x, _key(7))
    tx = optax.adafactor(1e-3)
    return _optax_step(lambda p, x, y, k: _xent(f.apply(p, x, k), y), tx), (params, tx.init(params), x, y, _key(5))


@program("haiku_transformer_infer", "haiku")
def haiku_transformer_infer():
    import haiku as hk

    def forward(tokens):
        x = hk.Embed(128, 32)(tokens)
        t = tokens.shape[1]
        mask = jnp.tril(jnp.ones((1, 1, t, t)))
        for _ in range(2):
            h = hk.LayerNorm(-1, True, True)(x)
            x = x + hk.MultiHeadAttention(4, 8, w_init=hk.initializers.VarianceScaling(1.0))(h, h, h, mask=mask)
            h = hk.LayerNorm(-1, True, True)(x)
            x = x + hk.nets.MLP([64, 32], activation=jax.nn.gelu)(h)
        return hk.Linear(128)(x)
    f = hk.without_apply_rng(hk.transform(forward))
    tok = _tokens()
    return f.apply, (f.init(_key(), tok), tok)


# ---------------------------------------------------------------------------------------- equinox

@program("equinox_gru_train_adam", "equinox")
def equinox_gru_train_adam():
    import equinox as eqx
    import optax

    class Model(eqx.Module):
        cell: eqx.nn.GRUCell
        head: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.cell = eqx.nn.GRUCell(8, 32, key=k1)
            self.head = eqx.nn.Linear(32, 1, key=k2)

        def __call__(self, xs):
            def f(h, x):
                return self.cell(x, h), None
            h, _ = jax.lax.scan(f, jnp.zeros(32), xs)
            return self.head(h)
    model = Model(_key())
    params, static = eqx.partition(model, eqx.is_array)
    xs, ys = jax.random.normal(_key(1), (8, 12, 8)), jax.random.normal(_key(2), (8, 1))
    tx = optax.adam(1e-3)

    def loss_fn(params, xs, ys):
        m = eqx.combine(params, static)
        return jnp.mean((jax.vmap(m)(xs) - ys) ** 2)
    return _optax_step(loss_fn, tx), (params, tx.init(params), xs, ys)


@program("equinox_cnn_infer", "equinox")
def equinox_cnn_infer():
    import equinox as eqx
    k = jax.random.split(_key(), 4)
    model = eqx.nn.Sequential([
        eqx.nn.Conv2d(3, 16, 3, padding=1, key=k[0]), eqx.nn.Lambda(jax.nn.relu),
        eqx.nn.MaxPool2d(2, 2), eqx.nn.Conv2d(16, 32, 3, padding=1, key=k[1]), eqx.nn.Lambda(jax.nn.relu),
        eqx.nn.AvgPool2d(2, 2), eqx.nn.Lambda(jnp.ravel), eqx.nn.Linear(32 * 4 * 4, 10, key=k[2])])
    params, static = eqx.partition(model, eqx.is_array)
    x = jax.random.normal(_key(1), (4, 3, 16, 16))
    return (lambda p, x: jax.vmap(eqx.combine(p, static))(x)), (params, x)


@program("equinox_mlp_dropout_train_lion", "equinox")
def equinox_mlp_dropout_train_lion():
    import equinox as eqx
    import optax

    class Net(eqx.Module):
        mlp: eqx.nn.MLP
        drop: eqx.nn.Dropout
        norm: eqx.nn.LayerNorm

        def __init__(self, key):
            self.mlp = eqx.nn.MLP(20, 10, 64, 2, key=key)
            self.drop = eqx.nn.Dropout(0.1)
            self.norm = eqx.nn.LayerNorm(20)

        def __call__(self, x, key):
            return self.mlp(self.drop(self.norm(x), key=key))
    params, static = eqx.partition(Net(_key()), eqx.is_array)
    x, y = jax.random.normal(_key(1), (16, 20)), _labels(16)
    tx = optax.lion(1e-4)

    def loss_fn(params, x, y, key):
        m = eqx.combine(params, static)
        return _xent(jax.vmap(m)(x, jax.random.split(key, x.shape[0])), y)
    return _optax_step(loss_fn, tx), (params, tx.init(params), x, y, _key(5))


# ---------------------------------------------------------------------------------------- HF transformers

def _hf(model_cls, config):
    return model_cls(config, seed=SEED, _do_init=True)


@program("hf_gpt2_train_adamw", "transformers")
def hf_gpt2_train_adamw():
    import optax
    from transformers import FlaxGPT2LMHeadModel, GPT2Config
    cfg = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    model = _hf(FlaxGPT2LMHeadModel, cfg)
    tok = _tokens()
    tx = optax.adamw(1e-3)

    def loss_fn(params, tok, key):
        logits = model(tok, params=params, dropout_rng=key, train=True).logits
        return _xent(logits[:, :-1], tok[:, 1:])
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), tok, _key(5))


@program("hf_gpt2_infer", "transformers")
def hf_gpt2_infer():
    from transformers import FlaxGPT2LMHeadModel, GPT2Config
    cfg = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    model = _hf(FlaxGPT2LMHeadModel, cfg)
    tok = _tokens()
    return (lambda p, t: model(t, params=p).logits), (model.params, tok)


@program("hf_bert_infer", "transformers")
def hf_bert_infer():
    from transformers import BertConfig, FlaxBertForSequenceClassification
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=32, num_labels=3)
    model = _hf(FlaxBertForSequenceClassification, cfg)
    tok = _tokens()
    mask = jnp.ones_like(tok).at[1, 12:].set(0)
    return (lambda p, t, m: model(t, attention_mask=m, params=p).logits), (model.params, tok, mask)


@program("hf_vit_infer", "transformers")
def hf_vit_infer():
    from transformers import FlaxViTForImageClassification, ViTConfig
    cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, num_labels=10)
    model = _hf(FlaxViTForImageClassification, cfg)
    x = jax.random.normal(_key(1), (2, 3, 16, 16))
    return (lambda p, x: model(x, params=p).logits), (model.params, x)


@program("hf_bart_train_adam_bf16", "transformers")
def hf_bart_train_adam_bf16():
    import optax
    from transformers import BartConfig, FlaxBartForConditionalGeneration
    cfg = BartConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                     decoder_ffn_dim=64, max_position_embeddings=32, dropout=0.1, attention_dropout=0.1)
    model = FlaxBartForConditionalGeneration(cfg, seed=SEED, dtype=jnp.bfloat16)
    src, tgt = _tokens(), _tokens(t=12)
    tx = optax.adam(1e-3)

    def loss_fn(params, src, tgt, key):
        logits = model(src, decoder_input_ids=tgt[:, :-1], params=params, dropout_rng=key, train=True).logits
        return _xent(logits, tgt[:, 1:])
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), src, tgt, _key(5))


# ---------------------------------------------------------------------------------------- driver

def parse_hlo(text: str):
    """Re-parse HLO text with XLA's own parser."""
    from jax._src.lib import xla_client
    parser = getattr(getattr(xla_client, "hlo", None), "hlo_module_from_text", None) \
        or getattr(xla_client._xla, "hlo_module_from_text", None)
    return parser(text)


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("jax", "jaxlib", "flax", "dm-haiku", "equinox", "optax", "jmp", "transformers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def generate_one(name: str, out_dir: str, run: bool = True) -> dict:
    library, builder = PROGRAMS[name]
    t0 = time.perf_counter()
    fn, args = builder()
    fn.__name__ = fn.__qualname__ = name  # -> HloModule jit_<name>
    fn = jax.jit(fn)
    lowered = fn.lower(*args)
    text = lowered.as_text(dialect="hlo")
    parse_hlo(text)
    timing = f"lower {time.perf_counter() - t0:5.2f}s"
    if run:
        out = jax.block_until_ready(lowered.compile()(*args))
        bad = [l for l in jax.tree.leaves(out) if jnp.issubdtype(l.dtype, jnp.floating)
               and not np.all(np.isfinite(np.asarray(l, np.float32)))]
        if bad:
            raise RuntimeError(f"{name}: non-finite outputs")
        timing += "  ran"
    with open(os.path.join(out_dir, name + ".hlo"), "w") as f:
        f.write(text)
    instructions, computations = count_hlo(text)
    print(f"{name:36s} {library:14s} {instructions:6d} instr {computations:4d} comps  {timing}", flush=True)
    mode = "train" if "_train" in name else "infer"
    return {"name": name, "file": name + ".hlo", "library": library, "mode": mode,
            "instructions": instructions, "computations": computations, "versions": library_versions()}


def main(argv=None, programs: "dict | None" = None, default_out: str = DEFAULT_OUT,
         annotate: "Callable[[dict, str], None] | None" = None) -> int:
    """The driver of this corpus and of examples/generate_heldout_corpus.py (`programs`: name -> (library,
    builder); `annotate(entry, out_dir)` adds fields to each manifest entry)."""
    programs = PROGRAMS if programs is None else programs
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--only", nargs="+", metavar="NAME", help="program names to (re)generate")
    ap.add_argument("--no-run", action="store_true", help="skip compiling and running each program")
    ap.add_argument("--list", action="store_true", help="list the program names and exit")
    a = ap.parse_args(argv)
    names = [n for n in programs if not a.only or n in a.only]
    if a.list:
        print("\n".join(f"{n}  ({programs[n][0]})" for n in names))
        return 0
    if not names:
        ap.error(f"nothing matches --only {a.only}")
    os.makedirs(a.out, exist_ok=True)
    PROGRAMS.update(programs)  # generate_one looks builders up here
    manifest_path = os.path.join(a.out, "manifest.json")
    entries = read_manifest(manifest_path) if a.only else {}
    for name in names:
        entries[name] = generate_one(name, a.out, run=not a.no_run)
        if annotate is not None:
            annotate(entries[name], a.out)
    write_manifest(manifest_path, entries)
    print(f"done: {len(names)} programs -> {a.out}", flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
