"""PyTorch via torch_xla: timm and HF transformers models traced lazily on ``PJRT_DEVICE=CPU``.

Runs in an interpreter with torch, torch-xla, timm and transformers (examples/frontends/
requirements-torch-xla.txt); see examples/generate_frontends_corpus.py. Models are built from
tiny configurations with random initialisation (no hub download). torch_xla records operations on
XLA tensors lazily; ``torch_xla._XLAC._get_xla_tensors_hlo(tensors)`` gives the HLO of the pending
computation of those tensors:

* inference: the model's outputs under ``torch.no_grad()`` in eval mode;
* train: forward + loss + ``loss.backward()`` + ``optimizer.step()``; the HLO computes the loss
  and the updated parameters and optimizer state. One step is run and materialised first
  (``torch_xla.sync()``) so that the optimizer's state exists as device data: the HLO traced is
  the second, steady-state step.

Parameters, buffers, optimizer state and inputs are device data, so they are ``parameter``
instructions of the HLO. The per-instruction metadata (aten op names) is stripped.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Registry, main, make_program_decorator, strip_metadata  # noqa: E402

PROGRAMS: Registry = {}
program = make_program_decorator(PROGRAMS)
SEED = 0


def _device():
    import torch
    import torch_xla
    torch.manual_seed(SEED)
    return torch_xla.device()


def _hlo(tensors) -> str:
    import torch_xla
    return strip_metadata(torch_xla._XLAC._get_xla_tensors_hlo(list(tensors)))


def _sync():
    import torch_xla
    torch_xla.sync()


def infer_hlo(model, *inputs, pick=lambda out: [out]) -> str:
    import torch
    dev = _device()
    model = model.to(dev).eval()
    inputs = [x.to(dev) for x in inputs]
    _sync()
    with torch.no_grad():
        out = model(*inputs)
    return _hlo(pick(out))


def train_hlo(model, make_optimizer, loss_of, *inputs) -> str:
    """loss_of(model, *inputs) -> scalar loss. Traces the second train step."""
    dev = _device()
    model = model.to(dev).train()
    inputs = [x.to(dev) for x in inputs]
    opt = make_optimizer(model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, *inputs)
        loss.backward()
        opt.step()
        return loss
    step()
    _sync()  # parameters and optimizer state become device data
    loss = step()
    state = [t for s in opt.state.values() for t in s.values() if hasattr(t, "device")
             and str(t.device).startswith("xla")]
    return _hlo([loss] + list(model.parameters()) + state)


def _images(b=2, h=32, w=32, c=3):
    import torch
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(SEED + 1))


def _tokens(b=2, t=16, vocab=128, i=0):
    import torch
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(SEED + i))


# ------------------------------------------------------------------------------------ timm

@program("txla_timm_resnet18_infer", "timm", "infer")
def txla_timm_resnet18_infer():
    import timm
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    return infer_hlo(model, _images()), {"model": "timm resnet18, 32x32, eval (batch-norm running stats)"}


@program("txla_timm_mobilenetv3_train_sgd", "timm", "train")
def txla_timm_mobilenetv3_train_sgd():
    import timm
    import torch
    model = timm.create_model("mobilenetv3_small_050", pretrained=False, num_classes=10)
    labels = torch.tensor([1, 7])

    def loss_of(m, x, y):
        return torch.nn.functional.cross_entropy(m(x), y, label_smoothing=0.1)
    return train_hlo(model, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                       weight_decay=1e-4),
                     loss_of, _images(), labels), \
        {"model": "timm mobilenetv3_small_050, 32x32, train-mode batch norm",
         "optimizer": "torch.optim.SGD nesterov, weight decay"}


@program("txla_timm_vit_tiny_infer", "timm", "infer")
def txla_timm_vit_tiny_infer():
    import timm
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32,
                              patch_size=8, depth=2)
    return infer_hlo(model, _images()), {"model": "timm ViT-Tiny, 2 blocks, 32x32 patch 8"}


# ------------------------------------------------------------------------------------ transformers

def _bert_config():
    from transformers import BertConfig
    return BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64, num_labels=3)


@program("txla_hf_bert_classifier_infer", "transformers", "infer")
def txla_hf_bert_classifier_infer():
    import torch
    from transformers import BertForSequenceClassification
    model = BertForSequenceClassification(_bert_config())
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    return infer_hlo(model, _tokens(), mask, pick=lambda out: [out.logits]), \
        {"model": "BertForSequenceClassification 2 layers x 32, padding mask"}


@program("txla_hf_bert_classifier_train_adamw", "transformers", "train")
def txla_hf_bert_classifier_train_adamw():
    import torch
    from transformers import BertForSequenceClassification
    model = BertForSequenceClassification(_bert_config())
    labels = torch.tensor([0, 2])

    def loss_of(m, tok, y):
        return m(input_ids=tok, labels=y).loss
    return train_hlo(model, lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
                     loss_of, _tokens(i=1), labels), \
        {"model": "BertForSequenceClassification 2 layers x 32, dropout 0.1",
         "optimizer": "torch.optim.AdamW"}


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4))


@program("txla_hf_gpt2_lm_infer", "transformers", "infer")
def txla_hf_gpt2_lm_infer():
    return infer_hlo(_gpt2(), _tokens(i=2), pick=lambda out: [out.logits]), \
        {"model": "GPT2LMHeadModel 2 layers x 32, causal mask, tied embeddings"}


@program("txla_hf_gpt2_lm_train_adam", "transformers", "train")
def txla_hf_gpt2_lm_train_adam():
    import torch

    def loss_of(m, tok):
        return m(input_ids=tok, labels=tok).loss
    return train_hlo(_gpt2(), lambda p: torch.optim.Adam(p, lr=1e-3), loss_of, _tokens(i=3)), \
        {"model": "GPT2LMHeadModel 2 layers x 32, dropout 0.1", "optimizer": "torch.optim.Adam"}


if __name__ == "__main__":
    sys.exit(main(PROGRAMS, "torch_xla", ("torch", "torch-xla", "timm", "transformers",
                                           "torchvision", "numpy")))
