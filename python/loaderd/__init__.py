"""loaderd - feed a PyTorch (or numpy) training loop from loaderd's shared-memory rings.

    import loaderd
    with loaderd.Loader("/run/user/1000/loaderd.sock", "train.dpk", 256, crop=224) as it:
        for epoch in range(epochs):
            it.set_epoch(epoch)
            for images, labels in it:          # uint8 (N, H, W, 3) views of the ring, no copy
                ...

A pure-Python ctypes binding of libldc.so (the C client API, shm/ldc.h). See README.md.
"""
from ._lib import (SAMPLE_PADDING, SAMPLE_REPEATED, SAMPLE_SUBSTITUTED, SLOT_LAST, abi_check,
                   lib)
from .loader import Batch, Loader, LoaderdError, LoaderdTimeout, default_socket
from . import profile as _profile

if _profile.enabled_by_env():   # loaderd.diagnose: time DDP's allreduce from the start
    _profile.install_ddp_patch()

__version__ = "0.1.0"
__all__ = ["Loader", "Batch", "LoaderdError", "LoaderdTimeout", "abi_check", "default_socket",
           "lib", "SAMPLE_SUBSTITUTED", "SAMPLE_PADDING", "SAMPLE_REPEATED", "SLOT_LAST"]
