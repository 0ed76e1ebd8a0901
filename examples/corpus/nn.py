"""Tiny neural-network toolkit in plain JAX (no flax/haiku/optax).

Models are ordinary Python functions ``forward(cx, inputs, cfg)`` that ask a
:class:`Ctx` for their parameters by name.  The same function serves two
purposes:

* **init**: ``Ctx(seed=...)`` creates every parameter the first time it is
  asked for (deterministically, with numpy's PRNG seeded by the fixed seed and
  the creation order; the forward pass only needs to be traced, e.g. under
  ``jax.eval_shape``);
* **apply**: ``Ctx(params, state, train=...)`` looks parameters up in flat
  ``{"scope/name": array}`` dictionaries that are passed to the jitted function
  as *arguments*, so the lowered HLO has ``parameter`` instructions rather than
  large literal constants.

Non-trainable state (batch-norm running statistics) lives in a second flat
dictionary; in training mode layers record its new value with ``set_state``.
"""
from __future__ import annotations

import contextlib
import math

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax


# --------------------------------------------------------------------------- context
class Ctx:
    def __init__(self, params=None, state=None, *, seed=0, train=False):
        self.initializing = params is None
        self.params = {} if params is None else params
        self.state = {} if state is None else state
        self.new_state = {}
        self.train = train
        self._seed = seed
        self._count = 0
        self._scope: list[str] = []

    # names ----------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name):
        self._scope.append(str(name))
        try:
            yield self
        finally:
            self._scope.pop()

    def _full(self, name):
        return "/".join(self._scope + [name])

    def _next_rng(self):
        rng = np.random.default_rng([self._seed, self._count])
        self._count += 1
        return rng

    # parameters -----------------------------------------------------------
    def param(self, name, shape, init="fan_in", scale=1.0):
        full = self._full(name)
        if not self.initializing:
            return self.params[full]
        if full in self.params:
            raise ValueError(f"parameter {full!r} created twice")
        value = make_init(init, self._next_rng(), tuple(shape), scale)
        self.params[full] = value
        return value

    def get_state(self, name, shape, init="zeros"):
        full = self._full(name)
        if not self.initializing:
            return self.state[full]
        if full in self.state:
            raise ValueError(f"state {full!r} created twice")
        value = make_init(init, None, tuple(shape), 1.0)
        self.state[full] = value
        return value

    def set_state(self, name, value):
        self.new_state[self._full(name)] = lax.stop_gradient(value)


def make_init(kind, rng, shape, scale):
    """A float32 numpy array; rng is a numpy Generator (None for the constant kinds)."""
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "ones":
        return np.ones(shape, np.float32)
    if kind == "normal":  # embeddings and the like
        return (0.02 * scale * rng.standard_normal(shape)).astype(np.float32)
    fan_in = max(1, math.prod(shape[:-1]))
    if kind == "fan_in":  # He-normal over all but the last dimension
        return (scale * math.sqrt(2.0 / fan_in) * rng.standard_normal(shape)).astype(np.float32)
    if kind == "uniform":
        lim = scale / math.sqrt(fan_in)
        return rng.uniform(-lim, lim, shape).astype(np.float32)
    raise ValueError(kind)


class Rand:
    """Seeded numpy random source for example inputs (fast: no XLA compilation involved)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, dtype=np.float32):
        return self.rng.standard_normal(shape).astype(np.float32)

    def uniform(self, shape, dtype=np.float32):
        return self.rng.random(shape).astype(np.float32)

    def randint(self, shape, low, high, dtype=np.int32):
        return self.rng.integers(low, high, shape).astype(np.int32)


# --------------------------------------------------------------------------- activations
relu = jax.nn.relu
swish = jax.nn.swish
sigmoid = jax.nn.sigmoid


def gelu(x):
    return jax.nn.gelu(x, approximate=True)


# --------------------------------------------------------------------------- dense / conv
def dense(cx, name, x, features, bias=True, init="fan_in", scale=1.0):
    w = cx.param(f"{name}/w", (x.shape[-1], features), init, scale)
    y = jnp.dot(x, w)
    if bias:
        y = y + cx.param(f"{name}/b", (features,), "zeros")
    return y


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def conv(cx, name, x, features, kernel=3, stride=1, padding="SAME", groups=1,
         dilation=1, bias=False):
    """2-D convolution, NHWC activations and HWIO weights."""
    kh, kw = _pair(kernel)
    cin = x.shape[-1]
    w = cx.param(f"{name}/w", (kh, kw, cin // groups, features))
    y = lax.conv_general_dilated(
        x, w, window_strides=_pair(stride), padding=padding,
        rhs_dilation=_pair(dilation), dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups)
    if bias:
        y = y + cx.param(f"{name}/b", (features,), "zeros")
    return y


def depthwise_conv(cx, name, x, kernel=3, stride=1):
    return conv(cx, name, x, x.shape[-1], kernel, stride, groups=x.shape[-1])


def conv_transpose(cx, name, x, features, kernel=3, stride=2, bias=True):
    kh, kw = _pair(kernel)
    w = cx.param(f"{name}/w", (kh, kw, x.shape[-1], features))
    y = lax.conv_transpose(x, w, _pair(stride), "SAME",
                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
    if bias:
        y = y + cx.param(f"{name}/b", (features,), "zeros")
    return y


def conv1d(cx, name, x, features, kernel=3, stride=1, padding="SAME", bias=True):
    """1-D convolution over (batch, time, channels)."""
    w = cx.param(f"{name}/w", (kernel, x.shape[-1], features))
    y = lax.conv_general_dilated(x, w, (stride,), padding,
                                 dimension_numbers=("NWC", "WIO", "NWC"))
    if bias:
        y = y + cx.param(f"{name}/b", (features,), "zeros")
    return y


# --------------------------------------------------------------------------- normalization
def batchnorm(cx, name, x, momentum=0.9, eps=1e-5):
    c = x.shape[-1]
    scale = cx.param(f"{name}/scale", (c,), "ones")
    bias = cx.param(f"{name}/bias", (c,), "zeros")
    rmean = cx.get_state(f"{name}/mean", (c,), "zeros")
    rvar = cx.get_state(f"{name}/var", (c,), "ones")
    if cx.train:
        axes = tuple(range(x.ndim - 1))
        mean = jnp.mean(x, axes)
        var = jnp.mean(jnp.square(x - mean), axes)
        cx.set_state(f"{name}/mean", momentum * rmean + (1 - momentum) * mean)
        cx.set_state(f"{name}/var", momentum * rvar + (1 - momentum) * var)
    else:
        mean, var = rmean, rvar
    return (x - mean) * (lax.rsqrt(var + eps) * scale) + bias


def layernorm(cx, name, x, eps=1e-6):
    d = x.shape[-1]
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    y = (x - mean) * lax.rsqrt(var + eps)
    return y * cx.param(f"{name}/scale", (d,), "ones") + cx.param(f"{name}/bias", (d,), "zeros")


def conv_bn(cx, name, x, features, kernel=3, stride=1, act=relu, groups=1):
    x = conv(cx, f"{name}/conv", x, features, kernel, stride, groups=groups)
    x = batchnorm(cx, f"{name}/bn", x)
    return act(x) if act is not None else x


# --------------------------------------------------------------------------- pooling / resizing
def max_pool(x, window=3, stride=2, padding="SAME"):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, window, window, 1),
                             (1, stride, stride, 1), padding)


def avg_pool(x, window=3, stride=1, padding="SAME"):
    s = lax.reduce_window(x, 0.0, lax.add, (1, window, window, 1), (1, stride, stride, 1), padding)
    return s / float(window * window)


def global_avg_pool(x):
    return jnp.mean(x, axis=(1, 2))


def upsample_nearest(x, factor=2):
    return jnp.repeat(jnp.repeat(x, factor, axis=1), factor, axis=2)


def upsample_bilinear(x, factor=2):
    b, h, w, c = x.shape
    return jax.image.resize(x, (b, h * factor, w * factor, c), "bilinear")


# --------------------------------------------------------------------------- attention
def attention(cx, name, q_in, kv_in, heads, mask=None):
    """Multi-head scaled dot-product attention. mask: broadcastable to (B, H, Tq, Tk)."""
    b, tq, d = q_in.shape
    tk = kv_in.shape[1]
    hd = d // heads
    q = dense(cx, f"{name}/query", q_in, d).reshape(b, tq, heads, hd)
    k = dense(cx, f"{name}/key", kv_in, d).reshape(b, tk, heads, hd)
    v = dense(cx, f"{name}/value", kv_in, d).reshape(b, tk, heads, hd)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
    if mask is not None:
        logits = jnp.where(mask, logits, -1e9)
    w = jax.nn.softmax(logits, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, tq, d)
    return dense(cx, f"{name}/out", o, d)


# --------------------------------------------------------------------------- recurrent cells
def lstm_params(cx, name, in_dim, hidden):
    return dict(
        wi=cx.param(f"{name}/wi", (in_dim, 4 * hidden), "uniform"),
        wh=cx.param(f"{name}/wh", (hidden, 4 * hidden), "uniform"),
        b=cx.param(f"{name}/b", (4 * hidden,), "zeros"),
    )


def lstm_cell(p, carry, x_proj):
    """One LSTM step; x_proj is the precomputed input projection x @ wi + b."""
    h, c = carry
    gates = x_proj + jnp.dot(h, p["wh"])
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c = sigmoid(f + 1.0) * c + sigmoid(i) * jnp.tanh(g)
    h = sigmoid(o) * jnp.tanh(c)
    return h, c


def lstm_layer(cx, name, xs, hidden, reverse=False):
    """LSTM over (B, T, D) with lax.scan (an HLO while loop). Returns (B, T, H), (h, c)."""
    b = xs.shape[0]
    p = lstm_params(cx, name, xs.shape[-1], hidden)
    proj = jnp.swapaxes(jnp.dot(xs, p["wi"]) + p["b"], 0, 1)  # (T, B, 4H)

    def step(carry, xp):
        carry = lstm_cell(p, carry, xp)
        return carry, carry[0]

    init = (jnp.zeros((b, hidden), xs.dtype), jnp.zeros((b, hidden), xs.dtype))
    carry, hs = lax.scan(step, init, proj, reverse=reverse)
    return jnp.swapaxes(hs, 0, 1), carry


def gru_params(cx, name, in_dim, hidden):
    return dict(
        wi=cx.param(f"{name}/wi", (in_dim, 3 * hidden), "uniform"),
        wh=cx.param(f"{name}/wh", (hidden, 3 * hidden), "uniform"),
        bi=cx.param(f"{name}/bi", (3 * hidden,), "zeros"),
        bh=cx.param(f"{name}/bh", (3 * hidden,), "zeros"),
    )


def gru_cell(p, h, x):
    xi = jnp.dot(x, p["wi"]) + p["bi"]
    hh = jnp.dot(h, p["wh"]) + p["bh"]
    xr, xz, xn = jnp.split(xi, 3, axis=-1)
    hr, hz, hn = jnp.split(hh, 3, axis=-1)
    r = sigmoid(xr + hr)
    z = sigmoid(xz + hz)
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h


# --------------------------------------------------------------------------- losses
def softmax_xent(logits, labels, weights=None):
    """Mean cross entropy; labels are int32 class ids, optional per-position weights."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    if weights is None:
        return jnp.mean(nll)
    return jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def sigmoid_bce(logits, targets):
    return jnp.mean(jnp.maximum(logits, 0) - logits * targets + jnp.log1p(jnp.exp(-jnp.abs(logits))))


def smooth_l1(pred, target, weights=None):
    d = jnp.abs(pred - target)
    l = jnp.where(d < 1.0, 0.5 * d * d, d - 0.5)
    if weights is None:
        return jnp.mean(l)
    return jnp.sum(l * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def mse(pred, target):
    return jnp.mean(jnp.square(pred - target))
