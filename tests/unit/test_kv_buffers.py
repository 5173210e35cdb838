"""The screeners' KV buffers hold exactly what the plain concatenations hold: the generation
screener's in-place cache layer against HF's ``DynamicLayer`` (through appends past its spare room,
finished rows leaving and crops), and the scoring screener's prefix written once per layer against
the per-row copy concatenated with each row's own keys/values."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from celtk.cli.allocator import glibc
from celtk.screening.generation import RoomyLayer, left_padded
from celtk.screening.kv_stand_ins import PrefixKV


def test_roomy_layer_equals_dynamic_layer_through_appends_overflow_selects_and_crops() -> None:
    gen = torch.Generator().manual_seed(0)
    keys, values = torch.randn(5, 2, 7, 4, generator=gen), torch.randn(5, 2, 7, 4, generator=gen)
    plain = DynamicLayer()
    plain.update(keys, values)
    room = 3
    k_buf, v_buf = torch.full((5, 2, 7 + room, 4), float("nan")), torch.full((5, 2, 7 + room, 4), float("nan"))
    k_buf[:, :, :7], v_buf[:, :, :7] = keys, values
    roomy = RoomyLayer(k_buf, v_buf, 7)
    rows = 5
    for step, columns in enumerate([1, 1, 2, 1, 1, 3, 1]):  # 10 columns appended: past the room of 3, twice
        k, v = torch.randn(rows, 2, columns, 4, generator=gen), torch.randn(rows, 2, columns, 4, generator=gen)
        expected, got = plain.update(k, v), roomy.update(k, v)
        assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])
        assert roomy.get_seq_length() == plain.get_seq_length()
        if step in (1, 4):  # a finished row leaves the batch
            kept = torch.tensor([r for r in range(rows) if r != 1])
            plain.batch_select_indices(kept)
            roomy.batch_select_indices(kept)
            rows -= 1
        if step == 3:
            plain.crop(-2)
            roomy.crop(-2)
    assert plain.keys is not None and roomy.keys is not None and plain.values is not None and roomy.values is not None
    assert torch.equal(plain.keys, roomy.keys) and torch.equal(plain.values, roomy.values)
    assert not torch.isnan(roomy.keys).any()  # no unset spare column was ever exposed


def test_left_padded_moves_each_rows_padding_first_and_leaves_room() -> None:
    kv = torch.arange(2 * 1 * 5 * 1, dtype=torch.float32).view(2, 1, 5, 1)  # rows of 2 prefix + 3 / 1 real tokens
    out = left_padded(kv, [3, 1], prefix=2, room=2)
    assert out.shape == (2, 1, 7, 1)
    assert out[0, 0, :5, 0].tolist() == [0, 1, 2, 3, 4]  # a full row does not move
    assert out[1, 0, 2:5, 0].tolist() == [5, 6, 7]  # prefix + its one token end at the last column
    assert torch.equal(left_padded(kv, [3, 1], prefix=2), out[:, :, :5])


@pytest.mark.skipif(not glibc(), reason="glibc only")
def test_keep_freed_memory_takes_effect_on_glibc_and_can_be_opted_out() -> None:
    """In a child process, since the setting is process-wide. Its effect on page faults is measured
    by ``benchmarks/generation_speed.py`` (``--allocator keep`` against ``--allocator glibc``)."""
    code = "from celtk.cli.allocator import keep_freed_memory; print(keep_freed_memory())"

    def took_effect(**env: str) -> str:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, **env})
        return done.stdout.split()[-1]

    assert took_effect() == "True"
    assert took_effect(CELTK_KEEP_FREED_MEMORY="0") == "False"


def test_roomy_layer_refuses_cache_operations_it_does_not_keep_in_step() -> None:
    layer = RoomyLayer(torch.zeros(2, 1, 5, 2), torch.zeros(2, 1, 5, 2), 3)
    for call in (lambda: layer.reorder_cache(torch.tensor([1, 0])), lambda: layer.batch_repeat_interleave(2),
                 layer.reset):
        with pytest.raises(NotImplementedError, match="DynamicLayer"):
            call()
    layer.crop(-5)  # past its length: empty, as DynamicLayer's crop leaves it
    assert layer.keys is not None
    assert layer.get_seq_length() == 0 and layer.keys.shape[-2] == 0


def test_prefix_written_once_equals_per_row_copy_concatenated() -> None:
    gen = torch.Generator().manual_seed(1)
    for g, rows in [(1, 4), (3, 2), (4, 1)]:  # the intact pass (one prefix) and chunks of g ablations
        prefix = torch.randn(g, 2, 6, 4, generator=gen)
        own = torch.randn(rows * g, 2, 5, 4, generator=gen)
        per_row = prefix.repeat(rows, 1, 1, 1)  # row b·g + j ← set j
        keys, values = PrefixKV({7: prefix}, {7: prefix + 1}).update(own, own - 1, 7)
        assert torch.equal(keys, torch.cat([per_row, own], dim=-2))
        assert torch.equal(values, torch.cat([per_row + 1, own - 1], dim=-2))
        assert keys.is_contiguous()
