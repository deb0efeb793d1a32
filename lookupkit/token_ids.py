"""Token ids: int32 everywhere. The one place that validates a sequence of ids given from outside."""

from __future__ import annotations

import numpy as np

from .errors import InputError
from .rules import ID_MAX


def token_ids(tokens, what: str) -> np.ndarray:
    """`tokens` as a contiguous 1-D int32 array; an InputError naming `what` and the first bad id if they
    are not 1-D integers in 0..2^31-1."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise InputError(f"{what} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int32)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{what} must be integer token ids, got {arr.dtype}")
    if int(arr.min()) < 0 or int(arr.max()) > ID_MAX:
        bad = int(np.argmax((arr < 0) | (arr > ID_MAX)))
        raise InputError(f"{what} holds an invalid token id {int(arr[bad])} at index {bad}, outside 0..2^31-1")
    return np.ascontiguousarray(arr, dtype=np.int32)
