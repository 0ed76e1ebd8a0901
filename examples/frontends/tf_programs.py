"""TensorFlow programs: ``tf.function(jit_compile=True)`` -> ``experimental_get_compiler_ir(...)(stage="hlo")``.

Runs in an interpreter with tensorflow-cpu and tf-keras (examples/frontends/requirements-tf.txt);
see examples/generate_frontends_corpus.py. Keras 3 (TF backend) applications and layers, tf_keras
models, and plain TF ops; train steps are forward + loss + tf.GradientTape gradients + the
optimizer's ``apply_gradients`` in one compiled function. Captured tf.Variables (weights, optimizer
slots, batch-norm statistics) are parameters of the HLO; updated variables are written by the
function (their new values come out of the HLO).
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Registry, main, make_program_decorator, strip_metadata  # noqa: E402

PROGRAMS: Registry = {}
program = make_program_decorator(PROGRAMS)
SEED = 0


def _tf():
    import tensorflow as tf
    tf.random.set_seed(SEED)
    return tf


def _hlo(fn, *args) -> str:
    """HLO text of fn (a tf.function with jit_compile=True) for these arguments, without the
    per-instruction metadata (TF op names), which would triple its size."""
    return strip_metadata(fn.experimental_get_compiler_ir(*args)(stage="hlo"))


def _images(b=4, h=32, w=32, c=3):
    tf = _tf()
    return tf.random.stateless_normal((b, h, w, c), seed=(SEED, 1))


def _labels(b=4, n=10):
    tf = _tf()
    return tf.random.stateless_uniform((b,), seed=(SEED, 2), maxval=n, dtype=tf.int32)


def _keras3():
    import keras
    assert keras.backend.backend() == "tensorflow", keras.backend.backend()
    keras.utils.set_random_seed(SEED)
    return keras


def _keras_train(model, loss_fn, optimizer, *batch, training=True):
    """A GradientTape train step over a Keras model (Keras 3 or tf_keras); returns the HLO."""
    tf = _tf()
    optimizer.build(model.trainable_variables) if hasattr(optimizer, "build") else None

    @tf.function(jit_compile=True)
    def train_step(*batch):
        x, y = batch[:-1], batch[-1]
        with tf.GradientTape() as tape:
            out = model(*x, training=training)
            loss = loss_fn(y, out)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    train_step(*batch)  # creates the optimizer's slots (variables) outside the traced HLO
    return _hlo(train_step, *batch)


def _keras_infer(model, *x):
    tf = _tf()

    @tf.function(jit_compile=True)
    def infer(*x):
        return model(*x, training=False)
    return _hlo(infer, *x)


# ------------------------------------------------------------------------- Keras 3, TF backend

@program("tf_keras3_mobilenetv2_infer", "keras.applications", "infer")
def keras3_mobilenetv2_infer():
    keras = _keras3()
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=10)
    return _keras_infer(model, _images()), {"model": "MobileNetV2(alpha=0.35) 32x32"}


@program("tf_keras3_efficientnetb0_infer", "keras.applications", "infer")
def keras3_efficientnetb0_infer():
    keras = _keras3()
    model = keras.applications.EfficientNetB0(input_shape=(32, 32, 3), weights=None, classes=10)
    return _keras_infer(model, _images(b=2)), {"model": "EfficientNetB0 32x32"}


@program("tf_keras3_mobilenetv2_train_sgd", "keras.applications", "train")
def keras3_mobilenetv2_train_sgd():
    keras = _keras3()
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=10)
    loss = keras.losses.SparseCategoricalCrossentropy()
    opt = keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True)
    return _keras_train(model, loss, opt, _images(), _labels()), {"optimizer": "SGD nesterov"}


def _k3_convnet(keras):
    L = keras.layers
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        L.Conv2D(16, 3, padding="same"), L.BatchNormalization(), L.ReLU(),
        L.MaxPooling2D(),
        L.Conv2D(32, 3, padding="same"), L.BatchNormalization(), L.ReLU(),
        L.AveragePooling2D(2),
        L.Flatten(), L.Dropout(0.2), L.Dense(64, activation="gelu"), L.Dense(10),
    ])


@program("tf_keras3_convnet_bn_train_adam", "keras", "train")
def keras3_convnet_bn_train_adam():
    keras = _keras3()
    model = _k3_convnet(keras)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(1e-3)
    return _keras_train(model, loss, opt, _images(), _labels()), {"optimizer": "Adam", "dropout": True}


@program("tf_keras3_convnet_bn_infer", "keras", "infer")
def keras3_convnet_bn_infer():
    keras = _keras3()
    return _keras_infer(_k3_convnet(keras), _images()), {}


def _k3_rnn(keras, cell):
    L = keras.layers
    return keras.Sequential([
        keras.Input((16,), dtype="int32"),
        L.Embedding(128, 32),
        cell(32, return_sequences=True),
        cell(32),
        L.Dense(5),
    ])


@program("tf_keras3_lstm_train_rmsprop", "keras", "train")
def keras3_lstm_train_rmsprop():
    keras, tf = _keras3(), _tf()
    model = _k3_rnn(keras, keras.layers.LSTM)
    tok = tf.random.stateless_uniform((4, 16), seed=(SEED, 3), maxval=128, dtype=tf.int32)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.RMSprop(1e-3)
    return _keras_train(model, loss, opt, tok, _labels(n=5)), {"optimizer": "RMSprop"}


@program("tf_keras3_gru_infer", "keras", "infer")
def keras3_gru_infer():
    keras, tf = _keras3(), _tf()
    model = _k3_rnn(keras, keras.layers.GRU)
    tok = tf.random.stateless_uniform((4, 16), seed=(SEED, 3), maxval=128, dtype=tf.int32)
    return _keras_infer(model, tok), {}


def _k3_transformer(keras):
    L = keras.layers
    inp = keras.Input((16,), dtype="int32")
    x = L.Embedding(128, 32)(inp)
    for _ in range(2):
        h = L.LayerNormalization()(x)
        h = L.MultiHeadAttention(num_heads=4, key_dim=8, dropout=0.1)(h, h, use_causal_mask=True)
        x = x + L.Dropout(0.1)(h)
        h = L.LayerNormalization()(x)
        h = L.Dense(64, activation="gelu")(h)
        x = x + L.Dense(32)(h)
    out = L.Dense(128)(L.LayerNormalization()(x))
    return keras.Model(inp, out)


@program("tf_keras3_transformer_train_adamw", "keras", "train")
def keras3_transformer_train_adamw():
    keras, tf = _keras3(), _tf()
    model = _k3_transformer(keras)
    tok = tf.random.stateless_uniform((2, 16), seed=(SEED, 3), maxval=128, dtype=tf.int32)
    tgt = tf.roll(tok, -1, axis=1)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.AdamW(1e-3, weight_decay=0.01, clipnorm=1.0)
    return _keras_train(model, loss, opt, tok, tgt), {"optimizer": "AdamW clipnorm", "causal_mask": True}


@program("tf_keras3_transformer_infer", "keras", "infer")
def keras3_transformer_infer():
    keras, tf = _keras3(), _tf()
    tok = tf.random.stateless_uniform((2, 16), seed=(SEED, 3), maxval=128, dtype=tf.int32)
    return _keras_infer(_k3_transformer(keras), tok), {}


# ------------------------------------------------------------------------- tf_keras (Keras 2)

def _tfk():
    import tf_keras
    tf_keras.utils.set_random_seed(SEED)
    return tf_keras


@program("tf_tfkeras_resnet_block_train_sgd", "tf_keras", "train")
def tfkeras_resnet_block_train_sgd():
    k = _tfk()
    L = k.layers
    inp = k.Input((32, 32, 3))
    x = L.Conv2D(16, 3, padding="same", use_bias=False)(inp)
    for filters, stride in ((16, 1), (32, 2)):
        sc = x if stride == 1 and x.shape[-1] == filters else L.Conv2D(filters, 1, stride)(x)
        h = L.BatchNormalization()(x)
        h = L.ReLU()(h)
        h = L.Conv2D(filters, 3, stride, padding="same", use_bias=False)(h)
        h = L.BatchNormalization()(h)
        h = L.ReLU()(h)
        h = L.Conv2D(filters, 3, padding="same", use_bias=False)(h)
        x = L.Add()([sc, h])
    x = L.GlobalAveragePooling2D()(x)
    model = k.Model(inp, L.Dense(10)(x))
    loss = k.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = k.optimizers.SGD(0.05, momentum=0.9)
    return _keras_train(model, loss, opt, _images(), _labels()), {"optimizer": "SGD momentum"}


@program("tf_tfkeras_mobilenetv3small_infer", "tf_keras.applications", "infer")
def tfkeras_mobilenetv3small_infer():
    k = _tfk()
    model = k.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None, classes=10,
                                            minimalistic=False, include_preprocessing=True)
    return _keras_infer(model, _images(b=2)), {"model": "MobileNetV3Small 32x32"}


@program("tf_tfkeras_bigru_train_adam", "tf_keras", "train")
def tfkeras_bigru_train_adam():
    k, tf = _tfk(), _tf()
    L = k.layers
    model = k.Sequential([
        k.Input((16, 8)),
        L.Bidirectional(L.GRU(24, return_sequences=True)),
        L.LSTM(24),
        L.Dense(3),
    ])
    x = tf.random.stateless_normal((4, 16, 8), seed=(SEED, 4))
    loss = k.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = k.optimizers.Adam(1e-3)
    return _keras_train(model, loss, opt, x, _labels(n=3)), {"optimizer": "Adam"}


# ------------------------------------------------------------------------- plain TensorFlow

@program("tf_stft_spectrogram_infer", "tensorflow", "infer")
def tf_stft_spectrogram_infer():
    tf = _tf()
    mel = tf.signal.linear_to_mel_weight_matrix(16, 129, 8000, 20.0, 3800.0)

    @tf.function(jit_compile=True)
    def spectrogram(wav):
        s = tf.signal.stft(wav, frame_length=256, frame_step=128, fft_length=256)
        m = tf.tensordot(tf.abs(s) ** 2, mel, 1)
        logm = tf.math.log(m + 1e-6)
        return tf.signal.mfccs_from_log_mel_spectrograms(logm)
    wav = tf.random.stateless_normal((2, 4096), seed=(SEED, 5))
    return _hlo(spectrogram, wav), {"ops": "stft, mel, mfcc (fft, dct)"}


@program("tf_pool_strided_slice_grad_train", "tensorflow", "train")
def tf_pool_strided_slice_grad_train():
    tf = _tf()
    w = tf.Variable(tf.random.stateless_normal((3, 3, 3, 8), seed=(SEED, 6)) * 0.1, name="w")

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            h = tf.nn.conv2d(x, w, 1, "SAME")
            h = tf.nn.avg_pool2d(h, 3, 2, "SAME")
            h = h[:, 1:-1:2, ::-1, 2:6]          # strided slice (reverse, stride)
            h = tf.nn.max_pool2d(tf.nn.relu(h), 2, 1, "VALID")
            loss = tf.reduce_mean(tf.square(h))
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        return loss
    x = _images()
    step(x)
    return _hlo(step, x), {"ops": "AvgPoolGrad, StridedSliceGrad, MaxPoolGrad, assign_sub"}


@program("tf_while_loop_newton_infer", "tensorflow", "infer")
def tf_while_loop_newton_infer():
    tf = _tf()

    @tf.function(jit_compile=True)
    def sqrt_newton(a):
        def cond(i, x, err):
            return tf.logical_and(i < 50, err > 1e-6)

        def body(i, x, err):
            nx = 0.5 * (x + a / x)
            return i + 1, nx, tf.reduce_max(tf.abs(nx - x))
        _, x, _ = tf.while_loop(cond, body, (tf.constant(0), tf.ones_like(a), tf.constant(1.0)))
        return x
    a = tf.abs(tf.random.stateless_normal((64, 32), seed=(SEED, 7))) + 0.5
    return _hlo(sqrt_newton, a), {"ops": "tf.while_loop with a data-dependent condition"}


@program("tf_while_loop_rnn_train_sgd", "tensorflow", "train")
def tf_while_loop_rnn_train_sgd():
    tf = _tf()
    wx = tf.Variable(tf.random.stateless_normal((8, 32), seed=(SEED, 8)) * 0.2)
    wh = tf.Variable(tf.random.stateless_normal((32, 32), seed=(SEED, 9)) * 0.2)
    wo = tf.Variable(tf.random.stateless_normal((32, 1), seed=(SEED, 10)) * 0.2)
    vars_ = [wx, wh, wo]

    @tf.function(jit_compile=True)
    def step(xs, y):
        with tf.GradientTape() as tape:
            T = xs.shape[0]  # static: XLA needs a fixed TensorArray size and trip-count bound
            ta = tf.TensorArray(tf.float32, size=T)

            def body(t, h, ta):
                h = tf.tanh(xs[t] @ wx + h @ wh)
                return t + 1, h, ta.write(t, h)
            _, h, ta = tf.while_loop(lambda t, h, ta: t < T, body,
                                     (0, tf.zeros((xs.shape[1], 32)), ta), maximum_iterations=T)
            pred = h @ wo
            loss = tf.reduce_mean((pred - y) ** 2) + 1e-4 * tf.reduce_sum(ta.stack() ** 2)
        grads = tape.gradient(loss, vars_)
        for v, g in zip(vars_, grads):
            v.assign_sub(0.05 * g)
        return loss
    xs = tf.random.stateless_normal((12, 4, 8), seed=(SEED, 11))
    y = tf.random.stateless_normal((4, 1), seed=(SEED, 12))
    step(xs, y)
    return _hlo(step, xs, y), {"ops": "tf.while_loop + TensorArray, gradient through the loop"}


@program("tf_mlp_train_keras3_adagrad", "tensorflow", "train")
def tf_mlp_train_keras3_adagrad():
    """Plain tf.Variables and tf ops, a Keras 3 optimizer applying the gradients."""
    tf, keras = _tf(), _keras3()
    w1 = tf.Variable(tf.random.stateless_normal((64, 128), seed=(SEED, 13)) * 0.1)
    b1 = tf.Variable(tf.zeros((128,)))
    w2 = tf.Variable(tf.random.stateless_normal((128, 10), seed=(SEED, 14)) * 0.1)
    vars_ = [w1, b1, w2]
    opt = keras.optimizers.Adagrad(0.01)
    opt.build(vars_)

    @tf.function(jit_compile=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.gelu(x @ w1 + b1)
            h = tf.nn.dropout(h, 0.1, seed=1)
            logits = h @ w2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        opt.apply_gradients(zip(tape.gradient(loss, vars_), vars_))
        return loss
    x = tf.random.stateless_normal((16, 64), seed=(SEED, 15))
    y = _labels(b=16)
    step(x, y)
    return _hlo(step, x, y), {"optimizer": "keras Adagrad", "dropout": "tf.nn.dropout (RNG)"}


@program("tf_image_ops_infer", "tensorflow", "infer")
def tf_image_ops_infer():
    tf = _tf()

    @tf.function(jit_compile=True)
    def preprocess(x):
        x = tf.image.resize(x, (24, 24), method="bilinear")
        x = tf.image.adjust_contrast(x, 1.5)
        x = tf.image.rgb_to_grayscale(x)
        x = tf.image.sobel_edges(x)
        x = tf.reduce_sum(x * x, -1)
        x = tf.image.per_image_standardization(x)
        return tf.math.top_k(tf.reshape(x, (tf.shape(x)[0], -1)), k=8)
    return _hlo(preprocess, _images()), {"ops": "resize, contrast, sobel, standardization, top_k"}


if __name__ == "__main__":
    sys.exit(main(PROGRAMS, "tensorflow", ("tensorflow-cpu", "tensorflow", "keras", "tf-keras", "numpy")))
