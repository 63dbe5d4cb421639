from __future__ import annotations

import torch

from genembed.generation._scoring import right_padded_batches


def test_rows_are_right_padded_and_masked_after_a_prefix():
    rows = [[5, 6, 7], [8], [9, 10]]
    batches = list(right_padded_batches(rows, 2, None, prefix=2))
    assert [indices for indices, _, _ in batches] == [[0, 2], [1]]  # longest first
    indices, ids, mask = batches[0]
    assert ids.tolist() == [[5, 6, 7], [9, 10, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    _, ids, mask = batches[1]
    assert ids.tolist() == [[8]] and mask.tolist() == [[1, 1, 1]] and ids.dtype == mask.dtype == torch.long
