"""Shared test setup."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy 2-core machine waiting for them costs
    seconds per call. Subprocesses (the CLI and end-to-end tests) set OMP_NUM_THREADS themselves."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
