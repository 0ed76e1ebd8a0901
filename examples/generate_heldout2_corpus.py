#!/usr/bin/env python3
"""Generate the second held-out test set: six more families of model code no decision of this project has seen.

    pip install -e ".[models]"       # flax, optax, transformers<5 (Flax models)
    python examples/generate_heldout2_corpus.py [--out examples/hlo_heldout2] [--only NAME ...] [--list]

Six families, each an inference step and a train step, written with HF transformers' own Flax models
in tiny configurations and not with anything this project contains: T5 (relative position bias in
buckets, gated-GELU feed-forward, encoder-decoder with a padded source), Whisper (a convolutional audio
front end over log-mel features, sinusoidal encoder positions, encoder-decoder), BLOOM (ALiBi attention
biases, embedding layer norm; its inference step in bf16), RoFormer (rotary position embeddings, a
masked-LM head), BigBird (block-sparse attention engaged: global, sliding-window and random key blocks
gathered per block, 256 tokens in blocks of 16) and DINOv2 (a vision transformer with layer scale
and stochastic depth, bicubic interpolation of its position embeddings to a larger image, a
classification head on the class token and the mean patch token). Train steps use optax optimizers the
first held-out set does not (adafactor, adabelief, lion, rmsprop, sgd with nesterov momentum and a cosine
schedule, adamw with warm-up and exponential decay) and dropout in train mode where the model has it.

These programs are a **test** set of docs/evaluation.md, like examples/hlo_heldout: scored once per
shipped model and never used to choose a model, a feature, a recipe or a threshold. The helpers and the
driver are those of examples/generate_heldout_corpus.py and examples/generate_library_corpus.py.
``manifest.json`` records each program's family and the SHA-256 of its text;
tests/examples/test_heldout_manifest.py fails when a file changes (the set is frozen; replacing it is a
new test set, see docs/evaluation.md).
"""
from __future__ import annotations

import contextlib
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import generate_heldout_corpus as heldout  # noqa: E402
import generate_library_corpus as lib  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hlo_heldout2")
PROGRAMS: dict = {}
FAMILY: dict[str, str] = {}
program = heldout.registry(PROGRAMS, FAMILY)


_key, _xent, _optax_step = lib._key, lib._xent, lib._optax_step
_tokens, _lm_loss = heldout._tokens, heldout._lm_loss


def _padding_mask(b, t, keep=(1.0, 0.75)):
    """Ones, with the tail of every other row padded (row i keeps keep[i % 2] of its length)."""
    return jnp.stack([(jnp.arange(t) < int(t * keep[i % len(keep)])).astype(jnp.int32) for i in range(b)])


# ---------------------------------------------------------------------------------------- T5

@contextlib.contextmanager
def _clip_with_numpy_keywords():
    """HF's Flax T5 (transformers 4.57.6) buckets relative positions with ``jnp.clip(x, a_max=...)``,
    keywords jax 0.10 no longer takes (``min=``/``max=`` now): while T5 is built and traced, ``jnp.clip``
    also takes the old names. The clip computed is the same."""
    clip = jnp.clip

    def compat(x, min=None, max=None, *, a_min=None, a_max=None):
        return clip(x, min=a_min if min is None else min, max=a_max if max is None else max)
    jnp.clip = compat
    try:
        yield
    finally:
        jnp.clip = clip


def _traced_with_numpy_clip(fn):
    def traced(*args):
        with _clip_with_numpy_keywords():
            return fn(*args)
    return traced


def _t5():
    from transformers import FlaxT5ForConditionalGeneration, T5Config
    cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_decoder_layers=1,
                   num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=64,
                   feed_forward_proj="gated-gelu", dropout_rate=0.1,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    with _clip_with_numpy_keywords():
        return FlaxT5ForConditionalGeneration(cfg, seed=lib.SEED)


def _seq2seq_batch(b=4, s=64, t=32):
    return _tokens(b, s), _padding_mask(b, s), jax.random.randint(_key(4), (b, t), 0, 512)


@program("hft5_infer", "transformers")
def hft5_infer():
    model = _t5()
    src, mask, tgt = _seq2seq_batch()
    infer = _traced_with_numpy_clip(lambda p, s, m, t: model(s, attention_mask=m, decoder_input_ids=t, params=p).logits)
    return infer, (model.params, src, mask, tgt)


@program("hft5_train_adafactor", "transformers")
def hft5_train_adafactor():
    import optax
    model = _t5()
    src, mask, tgt = _seq2seq_batch()
    tx = optax.adafactor(1e-3)

    def loss_fn(params, s, m, t, key):
        logits = model(s, attention_mask=m, decoder_input_ids=t[:, :-1], params=params, dropout_rng=key,
                       train=True).logits
        return _xent(logits, t[:, 1:])
    step = _traced_with_numpy_clip(_optax_step(loss_fn, tx))
    return step, (model.params, tx.init(model.params), src, mask, tgt, _key(5))


# ---------------------------------------------------------------------------------------- Whisper

def _whisper():
    from transformers import FlaxWhisperForConditionalGeneration, WhisperConfig
    cfg = WhisperConfig(vocab_size=512, num_mel_bins=16, d_model=64, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                        decoder_ffn_dim=128, max_source_positions=64, max_target_positions=64,
                        dropout=0.1, attention_dropout=0.1, activation_dropout=0.1,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                        suppress_tokens=[], begin_suppress_tokens=[])
    return FlaxWhisperForConditionalGeneration(cfg, seed=lib.SEED, input_shape=(1, 16, 128))


def _mel_batch(b=2, t=24):
    return jax.random.normal(_key(1), (b, 16, 128), jnp.float32), jax.random.randint(_key(4), (b, t), 0, 512)


@program("hfwhisper_infer", "transformers")
def hfwhisper_infer():
    model = _whisper()
    mel, tgt = _mel_batch()
    return (lambda p, x, t: model(x, decoder_input_ids=t, params=p).logits), (model.params, mel, tgt)


@program("hfwhisper_train_adabelief", "transformers")
def hfwhisper_train_adabelief():
    import optax
    model = _whisper()
    mel, tgt = _mel_batch()
    tx = optax.adabelief(1e-3)

    def loss_fn(params, x, t, key):
        logits = model(x, decoder_input_ids=t[:, :-1], params=params, dropout_rng=key, train=True).logits
        return _xent(logits, t[:, 1:])
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), mel, tgt, _key(5))


# ---------------------------------------------------------------------------------------- BLOOM

def _bloom(dtype=jnp.float32):
    from transformers import BloomConfig, FlaxBloomForCausalLM
    cfg = BloomConfig(vocab_size=512, hidden_size=64, n_layer=2, n_head=4, hidden_dropout=0.1,
                      attention_dropout=0.1)
    return FlaxBloomForCausalLM(cfg, seed=lib.SEED, dtype=dtype)


@program("hfbloom_bf16_infer", "transformers")
def hfbloom_bf16_infer():
    model = _bloom(jnp.bfloat16)
    tok = _tokens()
    return (lambda p, t, m: model(t, attention_mask=m, params=p).logits), (model.params, tok, _padding_mask(4, 64))


@program("hfbloom_train_lion", "transformers")
def hfbloom_train_lion():
    import optax
    model = _bloom()
    tx = optax.lion(1e-4, weight_decay=0.01)
    return _optax_step(_lm_loss(model), tx), (model.params, tx.init(model.params), _tokens(), _key(5))


# ---------------------------------------------------------------------------------------- RoFormer

def _roformer():
    from transformers import FlaxRoFormerForMaskedLM, RoFormerConfig
    cfg = RoFormerConfig(vocab_size=512, embedding_size=64, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=128, max_position_embeddings=128,
                         pad_token_id=0)
    return FlaxRoFormerForMaskedLM(cfg, seed=lib.SEED)


def _masked_batch(b=4, t=64, mask_id=3, vocab=512):
    """(masked input ids, labels, weights): 15% of the positions replaced by the mask token."""
    labels = _tokens(b, t, vocab)
    where = jax.random.bernoulli(_key(6), 0.15, (b, t))
    return jnp.where(where, mask_id, labels), labels, where.astype(jnp.float32)


def _mlm_loss(model, indices_rng=False):
    """Cross-entropy over the masked positions. `indices_rng`: the key is split into ``dropout_rng`` and
    ``indices_rng``, the key BigBird's block-sparse attention asks for in train mode."""
    import optax

    def loss_fn(params, ids, labels, weights, key):
        keys = dict(zip(("dropout_rng", "indices_rng"), jax.random.split(key))) if indices_rng \
            else {"dropout_rng": key}
        logits = model(ids, params=params, train=True, **keys).logits
        xent = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
        return jnp.sum(xent * weights) / jnp.maximum(jnp.sum(weights), 1.0)
    return loss_fn


@program("hfroformer_infer", "transformers")
def hfroformer_infer():
    model = _roformer()
    ids, _, _ = _masked_batch()
    return (lambda p, t, m: model(t, attention_mask=m, params=p).logits), (model.params, ids, _padding_mask(4, 64))


@program("hfroformer_train_rmsprop", "transformers")
def hfroformer_train_rmsprop():
    import optax
    model = _roformer()
    tx = optax.rmsprop(1e-3, decay=0.9, momentum=0.9, centered=True)
    return _optax_step(_mlm_loss(model), tx), (model.params, tx.init(model.params), *_masked_batch(), _key(5))


# ---------------------------------------------------------------------------------------- BigBird

# 16 blocks of 16 tokens: longer than (5 + 2 * num_random_blocks) * block_size = 144, so block-sparse attention
# engages (PyTorch's BigBird falls back to full attention below that; the Flax one does not check).
BIGBIRD_SEQ = 256


def _bigbird():
    from transformers import BigBirdConfig, FlaxBigBirdForMaskedLM
    cfg = BigBirdConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=BIGBIRD_SEQ, attention_type="block_sparse",
                        block_size=16, num_random_blocks=2, pad_token_id=0)
    assert BIGBIRD_SEQ % cfg.block_size == 0 and BIGBIRD_SEQ > (5 + 2 * cfg.num_random_blocks) * cfg.block_size
    return FlaxBigBirdForMaskedLM(cfg, seed=lib.SEED, input_shape=(1, BIGBIRD_SEQ))


@program("hfbigbird_infer", "transformers")
def hfbigbird_infer():
    model = _bigbird()
    ids, _, _ = _masked_batch(2, BIGBIRD_SEQ)
    return (lambda p, t, m: model(t, attention_mask=m, params=p).logits), \
        (model.params, ids, _padding_mask(2, BIGBIRD_SEQ))


@program("hfbigbird_train_nesterov", "transformers")
def hfbigbird_train_nesterov():
    """Block-sparse attention in train mode, with dropout. HF's Flax BigBird asks for an ``indices_rng`` in
    train mode but draws its random key blocks from it only at sequence lengths 1024, 3072 and 4096; at
    other lengths, 256 here, the random blocks are fixed (block 0) in both modes."""
    import optax
    model = _bigbird()
    tx = optax.sgd(optax.cosine_decay_schedule(0.05, 1000), momentum=0.9, nesterov=True)
    batch = _masked_batch(2, BIGBIRD_SEQ)
    return _optax_step(_mlm_loss(model, indices_rng=True), tx), (model.params, tx.init(model.params), *batch, _key(5))


# ---------------------------------------------------------------------------------------- DINOv2

def _dinov2():
    from transformers import Dinov2Config, FlaxDinov2ForImageClassification
    cfg = Dinov2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=28,
                       patch_size=4, num_channels=3, layerscale_value=0.1, drop_path_rate=0.1,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=10)
    return FlaxDinov2ForImageClassification(cfg, seed=lib.SEED)


# the first held-out set's 32x32 images, for a model configured at 28x28: 8x8 patches, position embeddings
# interpolated
_images_nchw = heldout._images_nchw


@program("hfdinov2_infer", "transformers")
def hfdinov2_infer():
    model = _dinov2()
    return (lambda p, x: model(x, params=p).logits), (model.params, _images_nchw())


@program("hfdinov2_train_adamw", "transformers")
def hfdinov2_train_adamw():
    import optax
    model = _dinov2()
    tx = optax.adamw(optax.warmup_exponential_decay_schedule(0.0, 5e-4, 50, 1000, 0.5, end_value=1e-5),
                     weight_decay=0.05)

    def loss_fn(params, x, y, key):
        return _xent(model(x, params=params, dropout_rng=key, train=True).logits, y)
    return _optax_step(loss_fn, tx), (model.params, tx.init(model.params), _images_nchw(), lib._labels(), _key(5))


# ---------------------------------------------------------------------------------------- driver

def main(argv=None) -> int:
    return lib.main(argv, PROGRAMS, DEFAULT_OUT, annotate=heldout.annotator(FAMILY))


if __name__ == "__main__":
    sys.exit(main())
