"""The registry of sequence mixers.

A sequence mixer is an ``nn.Module`` built as ``Mixer(d_model, max_len=..., **hparams)`` whose
``forward(x)`` maps ``(batch, length, d_model)`` to the same shape **causally** (output at t
depends on inputs at positions <= t only), unless built to see ahead: then its ``lookahead``
attribute says how many steps (attention's centred conv, ``conv_mode: centred``; where that is
fair: arrepro.config.lookahead, tests/test_centred_conv.py). Each mixer lives in one file under
``arrepro/models/mixers/`` and offers, side by side:

* ``forward_portable(x)`` -- pure PyTorch, vectorised or chunked, fast enough on a CPU;
* ``forward_kernel(x)``   -- the CUDA kernel package's path over the same parameters (only where
  a package exists; such a mixer subclasses ``arrepro.models.kernels.KernelMixer``, whose
  ``forward`` picks the kernel on CUDA within its limits, else the portable path, and records why);
* ``forward_reference(x)``-- the plainest statement of the math (for recurrences a loop over
  time steps), the ground truth the tests compare the other paths against.

Required static method ``expected_parameters(d_model, *, max_len, **hparams)``: the parameter
count by formula (the tests check the module against it).

Optional class attributes: ``supports_rope`` (the mixer applies rotary embeddings itself when
built with ``rope=True``), ``kernel_name`` (its kernel function, a key of ``kernels.KERNELS``).
Optional method ``reset_special_parameters()`` runs after the backbone's generic init.
"""
from __future__ import annotations

import importlib
from typing import Callable

from torch import nn

from arrepro.config.catalogue import mixer_names

MIXERS: dict[str, type[nn.Module]] = {}


def register(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        if name in MIXERS:
            raise ValueError(f"sequence mixer {name!r} registered twice")
        MIXERS[name] = cls
        cls.registry_name = name
        return cls

    return wrap


def mixer_module(name: str) -> str:
    """The module that defines mixer ``name`` (one file per mixer)."""
    return f"arrepro.models.mixers.{name}"


def get_mixer(name: str) -> type[nn.Module]:
    if name not in MIXERS:
        try:
            importlib.import_module(mixer_module(name))
        except ModuleNotFoundError as err:
            if err.name != mixer_module(name):
                raise
    if name not in MIXERS:
        raise KeyError(f"unknown sequence mixer {name!r}; known: {sorted(available_mixers())}")
    return MIXERS[name]


def available_mixers() -> list[str]:
    """Every mixer: one file each under models/mixers (arrepro.config.catalogue)."""
    return sorted(mixer_names() or ())

