#!/usr/bin/env python3
"""Generate the held-out test families: model code no decision of this project has seen.

    pip install -e ".[models]"       # flax, dm-haiku, equinox, optax, jmp, transformers<5 (Flax models)
    python examples/generate_heldout_corpus.py [--out examples/hlo_heldout] [--only NAME ...] [--list]

Eight families, each an inference step and a train step, written with the model libraries' own code
and not with anything this project contains: HF transformers' Flax Llama (RMSNorm, rotary embeddings,
grouped-query attention, SwiGLU; bf16), GPT-Neo (local attention), Wav2Vec2 (convolutional feature
encoder, pre-norm layers), RegNet (grouped convolutions, batch norm), CLIP (two towers, contrastive loss);
haiku's LSTM/GRU stack under ``hk.dynamic_unroll``; an equinox transformer encoder of
``eqx.nn.MultiheadAttention``; a flax linen U-Net (``nn.GroupNorm``, ``nn.ConvTranspose``, a time
embedding). Train steps use optax optimizers and dropout in train mode where the model has it.

These programs are the **test** families of docs/evaluation.md: they are scored once per shipped model
and never used to choose a model, a feature, a recipe or a threshold. ``manifest.json`` records each
program's family and the SHA-256 of its text; tests/examples/test_heldout_manifest.py fails when a
file changes (the set is frozen; replacing it is a new test set, see docs/evaluation.md).
"""
from __future__ import annotations

import hashlib
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import generate_library_corpus as lib  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hlo_heldout")
PROGRAMS: dict = {}
FAMILY: dict[str, str] = {}


def registry(programs: dict, family: dict):
    """The ``@program(name, library)`` decorator of a held-out generator: registers the builder in
    ``programs`` and its family (the name before the first underscore) in ``family``."""
    def program(name: str, library: str):
        def register(builder):
            programs[name] = (library, builder)
            family[name] = name.split("_", 1)[0]
            return builder
        return register
    return program


def annotator(family: dict):
    """A held-out generator's manifest hook: each entry also records its family and the SHA-256 that
    freezes it."""
    def annotate(entry: dict, out_dir: str) -> None:
        entry["family"] = family[entry["name"]]
        entry["sha256"] = sha256_of(os.path.join(out_dir, entry["file"]))
    return annotate


program = registry(PROGRAMS, FAMILY)


_key, _xent, _optax_step = lib._key, lib._xent, lib._optax_step


def _tokens(b=4, t=64, vocab=512):
    return jax.random.randint(_key(3), (b, t), 0, vocab)


def _lm_loss(model):
    def loss_fn(params, tok, key):
        logits = model(tok, params=params, dropout_rng=key, train=True).logits
        return _xent(logits[:, :-1], tok[:, 1:])
    return loss_fn


# ---------------------------------------------------------------------------------------- HF transformers

def _llama(dtype=jnp.float32):
    from transformers import FlaxLlamaForCausalLM, LlamaConfig
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return FlaxLlamaForCausalLM(cfg, seed=lib.SEED, dtype=dtype)


@program("hfllama_bf16_infer", "transformers")
def hfllama_bf16_infer():
    model = _llama(jnp.bfloat16)
    return (lambda p, t: model(t, params=p).logits), (model.params, _tokens())


@program("hfllama_train_adamw", "transformers")
def hfllama_train_adamw():
    import optax
    model = _llama()
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, weight_decay=0.1))
    return _optax_step(_lm_loss(model), tx), (model.params, tx.init(model.params), _tokens(), _key(5))


def _gptneo():
    from transformers import FlaxGPTNeoForCausalLM, GPTNeoConfig
    cfg = GPTNeoConfig(vocab_size=512, max_position_embeddings=128, hidden_size=128, num_layers=2,
                       num_heads=4, attention_types=[[["global", "local"], 1]], window_size=16,
                       intermediate_size=256)
    return FlaxGPTNeoForCausalLM(cfg, seed=lib.SEED)


@program("hfgptneo_infer", "transformers")
def hfgptneo_infer():
    model = _gptneo()
    return (lambda p, t: model(t, params=p).logits), (model.params, _tokens())


@program("hfgptneo_train_adam", "transformers")
def hfgptneo_train_adam():
    import optax
    model = _gptneo()
    tx = optax.adam(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000))
    return _optax_step(_lm_loss(model), tx), (model.params, tx.init(model.params), _tokens(), _key(5))


def _wav2vec2():
    from transformers import FlaxWav2Vec2Model, Wav2Vec2Config
    cfg = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                         conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                         feat_extract_norm="layer", do_stable_layer_norm=True)
    return FlaxWav2Vec2Model(cfg, seed=lib.SEED)


def _audio(b=2, n=4000):
    return jax.random.normal(_key(1), (b, n), jnp.float32)


@program("hfwav2vec2_infer", "transformers")
def hfwav2vec2_infer():
    model = _wav2vec2()
    return (lambda p, x: model(x, params=p).last_hidden_state), (model.params, _audio())


@program("hfwav2vec2_train_sgd", "transformers")
def hfwav2vec2_train_sgd():
    import optax
    model = _wav2vec2()
    tx = optax.sgd(1e-2, momentum=0.9)

    def loss_fn(params, x, key):
        h = model(x, params=params, dropout_rng=key, train=True).last_hidden_state
        return jnp.mean(jnp.square(h[:, 1:] - jax.lax.stop_gradient(h[:, :-1])))
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), _audio(), _key(5))


def _regnet():
    from transformers import FlaxRegNetForImageClassification, RegNetConfig
    cfg = RegNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64], depths=[1, 1, 1],
                       groups_width=8, layer_type="y", num_labels=10)
    return FlaxRegNetForImageClassification(cfg, seed=lib.SEED, input_shape=(1, 32, 32, 3))


def _images_nchw(b=4):
    return jax.random.normal(_key(1), (b, 3, 32, 32), jnp.float32)


@program("hfregnet_infer", "transformers")
def hfregnet_infer():
    model = _regnet()
    return (lambda p, x: model(x, params=p, train=False).logits), (model.params, _images_nchw())


@program("hfregnet_train_momentum", "transformers")
def hfregnet_train_momentum():
    """Fine-tuning with frozen batch-norm statistics (HF Flax's train=False path), SGD with momentum."""
    import optax
    model = _regnet()
    tx = optax.sgd(1e-2, momentum=0.9)

    def loss_fn(params, x, y):
        return _xent(model(x, params=params, train=False).logits, y)
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), _images_nchw(), lib._labels())


def _clip():
    from transformers import CLIPConfig, FlaxCLIPModel
    text = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=32)
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    return FlaxCLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32), seed=lib.SEED)


def _clip_batch(b=4):
    return _tokens(b, 16), jax.random.normal(_key(1), (b, 3, 32, 32), jnp.float32)


@program("hfclip_infer", "transformers")
def hfclip_infer():
    model = _clip()
    tok, img = _clip_batch()
    return (lambda p, t, x: model(t, x, params=p).logits_per_image), (model.params, tok, img)


@program("hfclip_train_adamw", "transformers")
def hfclip_train_adamw():
    import optax
    model = _clip()
    tok, img = _clip_batch()
    tx = optax.adamw(1e-4)

    def loss_fn(params, t, x, key):
        logits = model(t, x, params=params, dropout_rng=key, train=True).logits_per_image
        labels = jnp.arange(logits.shape[0])
        return (_xent(logits, labels) + _xent(logits.T, labels)) / 2
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), tok, img, _key(5))


# ---------------------------------------------------------------------------------------- haiku

def _haiku_rnn():
    import haiku as hk

    def forward(xs):  # xs: [T, B, F], time major as hk.dynamic_unroll expects
        core = hk.DeepRNN([hk.LSTM(64), jax.nn.relu, hk.GRU(64)])
        out, _ = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
        return hk.Linear(8)(out[-1])
    return hk.without_apply_rng(hk.transform(forward))


def _sequences():
    return jax.random.normal(_key(1), (24, 8, 16), jnp.float32)


@program("haikurnn_infer", "haiku")
def haikurnn_infer():
    f = _haiku_rnn()
    xs = _sequences()
    return f.apply, (f.init(_key(), xs), xs)


@program("haikurnn_train_adam", "haiku")
def haikurnn_train_adam():
    import optax
    f = _haiku_rnn()
    xs, ys = _sequences(), lib._labels(8, 8)
    params = f.init(_key(), xs)
    tx = optax.adam(1e-3)
    return _optax_step(lambda p, xs, y: _xent(f.apply(p, xs), y), tx), (params, tx.init(params), xs, ys)


# ---------------------------------------------------------------------------------------- equinox

def _eqx_encoder():
    import equinox as eqx

    class Block(eqx.Module):
        attn: eqx.nn.MultiheadAttention
        ln1: eqx.nn.LayerNorm
        ln2: eqx.nn.LayerNorm
        mlp: eqx.nn.MLP
        drop: eqx.nn.Dropout

        def __init__(self, d, key):
            k1, k2 = jax.random.split(key)
            self.attn = eqx.nn.MultiheadAttention(4, d, key=k1)
            self.ln1, self.ln2 = eqx.nn.LayerNorm(d), eqx.nn.LayerNorm(d)
            self.mlp = eqx.nn.MLP(d, d, 2 * d, 1, activation=jax.nn.gelu, key=k2)
            self.drop = eqx.nn.Dropout(0.1)

        def __call__(self, x, key, inference):
            h = jax.vmap(self.ln1)(x)
            x = x + self.drop(self.attn(h, h, h), key=key, inference=inference)
            return x + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x))

    class Encoder(eqx.Module):
        embed: eqx.nn.Embedding
        blocks: list
        head: eqx.nn.Linear

        def __init__(self, key, d=64, vocab=512):
            ks = jax.random.split(key, 4)
            self.embed = eqx.nn.Embedding(vocab, d, key=ks[0])
            self.blocks = [Block(d, k) for k in ks[1:3]]
            self.head = eqx.nn.Linear(d, 4, key=ks[3])

        def __call__(self, tok, key=None, inference=True):
            x = jax.vmap(self.embed)(tok)
            keys = jax.random.split(key, len(self.blocks)) if key is not None else [None] * len(self.blocks)
            for b, k in zip(self.blocks, keys):
                x = b(x, k, inference)
            return self.head(jnp.mean(x, axis=0))
    return Encoder(_key())


@program("eqxencoder_infer", "equinox")
def eqxencoder_infer():
    import equinox as eqx
    params, static = eqx.partition(_eqx_encoder(), eqx.is_array)
    tok = _tokens(8, 32)
    return (lambda p, t: jax.vmap(eqx.combine(p, static))(t)), (params, tok)


@program("eqxencoder_train_adamw", "equinox")
def eqxencoder_train_adamw():
    import equinox as eqx
    import optax
    params, static = eqx.partition(_eqx_encoder(), eqx.is_array)
    tok, y = _tokens(8, 32), lib._labels(8, 4)
    tx = optax.adamw(1e-3)

    def loss_fn(params, tok, y, key):
        m = eqx.combine(params, static)
        logits = jax.vmap(lambda t, k: m(t, k, inference=False))(tok, jax.random.split(key, tok.shape[0]))
        return _xent(logits, y)
    return _optax_step(loss_fn, tx), (params, tx.init(params), tok, y, _key(5))


# ---------------------------------------------------------------------------------------- flax linen

def _unet():
    import flax.linen as nn

    class ResBlock(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x, temb):
            h = nn.silu(nn.GroupNorm(num_groups=8)(x))
            h = nn.Conv(self.features, (3, 3))(h)
            h = h + nn.Dense(self.features)(temb)[:, None, None, :]
            h = nn.Conv(self.features, (3, 3))(nn.silu(nn.GroupNorm(num_groups=8)(h)))
            skip = x if x.shape[-1] == self.features else nn.Conv(self.features, (1, 1))(x)
            return skip + h

    class UNet(nn.Module):
        @nn.compact
        def __call__(self, x, t):
            half = 16
            freqs = jnp.exp(-jnp.log(10000.0) * jnp.arange(half) / half)
            temb = jnp.concatenate([jnp.sin(t[:, None] * freqs), jnp.cos(t[:, None] * freqs)], -1)
            temb = nn.Dense(64)(nn.silu(nn.Dense(64)(temb)))
            h1 = ResBlock(16)(nn.Conv(16, (3, 3))(x), temb)
            h2 = ResBlock(32)(nn.Conv(32, (3, 3), strides=(2, 2))(h1), temb)
            h = ResBlock(32)(h2, temb)
            h = nn.ConvTranspose(16, (2, 2), strides=(2, 2))(h)
            h = ResBlock(16)(jnp.concatenate([h, h1], -1), temb)
            return nn.Conv(3, (3, 3))(nn.silu(nn.GroupNorm(num_groups=8)(h)))
    return UNet()


def _noisy_batch(b=4):
    return jax.random.normal(_key(1), (b, 32, 32, 3)), jax.random.uniform(_key(2), (b,)) * 1000


@program("flaxunet_infer", "flax.linen")
def flaxunet_infer():
    model = _unet()
    x, t = _noisy_batch()
    return (lambda p, x, t: model.apply(p, x, t)), (model.init(_key(), x, t), x, t)


@program("flaxunet_train_adam", "flax.linen")
def flaxunet_train_adam():
    import optax
    model = _unet()
    x, t = _noisy_batch()
    params = model.init(_key(), x, t)
    noise = jax.random.normal(_key(4), x.shape)
    tx = optax.adam(2e-4)

    def loss_fn(params, x, t, noise):
        return jnp.mean(jnp.square(model.apply(params, x + noise, t) - noise))
    return _optax_step(loss_fn, tx), (params, tx.init(params), x, t, noise)


# ---------------------------------------------------------------------------------------- driver

def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(argv=None) -> int:
    return lib.main(argv, PROGRAMS, DEFAULT_OUT, annotate=annotator(FAMILY))


if __name__ == "__main__":
    sys.exit(main())
