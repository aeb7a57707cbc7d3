"""braeburn's safetensors writer and reader (issue 31): the files are what the safetensors package reads and
writes, and a file that is not one is refused with one line, never unpickled."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from braeburn.checkpoints import safetensors_file
from braeburn.checkpoints import state as state_io
from braeburn.accelerator.core import Accelerator
from braeburn.errors import UnsafeFileError

safetensors_torch = pytest.importorskip("safetensors.torch")


def every_dtype() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tensors = {str(dtype).removeprefix("torch."): (torch.randn(3, 5, generator=generator) * 50).to(dtype)
               for dtype in safetensors_file.DTYPES if dtype != torch.bool}
    return {**tensors, "bool": torch.rand(7, generator=generator) > 0.5, "scalar": torch.tensor(2.5),
            "empty": torch.empty(0, 4), "transposed": torch.arange(12.0).view(3, 4).t()}


def test_the_safetensors_package_reads_what_braeburn_writes_and_back(tmp_path):
    tensors = every_dtype()
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as handle:
        safetensors_file.write(tensors, handle, {"format": "pt", "note": "x"})
    theirs = safetensors_torch.load_file(path)
    assert theirs.keys() == tensors.keys()
    assert all(theirs[k].dtype == v.dtype and torch.equal(theirs[k], v) for k, v in tensors.items())
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "theirs.safetensors",
                                metadata={"format": "pt"})
    ours, metadata = safetensors_file.read(tmp_path / "theirs.safetensors")
    assert metadata == {"format": "pt"}
    assert all(ours[k].dtype == v.dtype and torch.equal(ours[k], v) for k, v in tensors.items())


def header(fields: dict, data: bytes = b"") -> bytes:
    text = json.dumps(fields).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("content, reason", [
    (b"\x80\x04\x95", "shorter than its header length"),
    (struct.pack("<Q", 1 << 40) + b"{}", "its header claims"),
    (header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "does not fit its shape"),
    (header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8), "does not fit its shape"),
    (header({"w": {"dtype": "OBJ", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), "not a dtype, shape"),
    (header({"__metadata__": {"a": 1}}), "not a table of strings"),
    (b"\x02\0\0\0\0\0\0\0[]", "not a JSON object"),
])
def test_a_file_that_is_not_safetensors_is_refused_with_one_line(tmp_path, content, reason):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(UnsafeFileError, match=f"{path} is not a safetensors file that braeburn can read .*{reason}"):
        safetensors_file.read(path)


class Counter(torch.nn.Module):
    """A module whose state dict holds a non-tensor (its extra state): safetensors cannot hold it."""

    def __init__(self):
        super().__init__()
        self.linear, self.count = torch.nn.Linear(2, 2), 0

    def get_extra_state(self):
        return {"count": self.count}

    def set_extra_state(self, state):
        self.count = state["count"]


def test_save_state_writes_safetensors_and_a_torch_file_only_where_safetensors_cannot_hold_the_state(tmp_path):
    accelerator = Accelerator(cpu=True)
    plain, counter = torch.nn.Linear(3, 3), Counter()
    counter.count = 7
    accelerator.prepare(plain, counter)
    accelerator.save_state(tmp_path / "state")
    names = {p.name for p in (tmp_path / "state").iterdir()}
    assert "model.safetensors" in names and "model_0.pt" not in names  # Accelerate's name for the first model
    assert "model_1.pt" in names and "model_1.safetensors" not in names
    fresh = Accelerator(cpu=True)
    plain2, counter2 = fresh.prepare(torch.nn.Linear(3, 3), Counter())
    fresh.load_state(tmp_path / "state")
    assert torch.equal(plain2.weight, plain.weight) and torch.equal(counter2.linear.weight, counter.linear.weight)
    assert counter2.count == 7


def test_a_snapshot_captures_the_same_bytes_as_a_write(tmp_path):
    state = {"a": torch.randn(4, 4), "b": torch.arange(3)}
    state_io.save_model_state(state, tmp_path, 0)
    with state_io.capture_writes() as files:
        state_io.save_model_state(state, Path("."), 0)
    assert files == {"model.safetensors": (tmp_path / "model.safetensors").read_bytes()}


def test_a_deferred_snapshot_writes_the_same_bytes_as_a_write_and_ignores_later_changes(tmp_path):
    weight = torch.randn(6, 4)
    state = {"weight": weight, "tied": weight, "row": weight[1], "steps": torch.arange(3)}
    optimizer_like = {"state": {0: {"exp_avg": weight * 2, "step": torch.tensor(3.0)}},
                      "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0]}], "extra": [1, 2]}
    state_io.save_model_state(state, tmp_path, 0)
    state_io.save_file(optimizer_like, tmp_path, "optimizer_0.pt")
    with state_io.defer_writes() as files:
        state_io.save_model_state(state, Path("."), 0)
        state_io.save_file(optimizer_like, Path("."), "optimizer_0.pt")
    with torch.no_grad():  # training goes on after the snapshot: nothing of it may reach the files
        weight.add_(1.0)
        optimizer_like["state"][0]["exp_avg"].zero_()
        optimizer_like["extra"].append(3)
    assert set(files) == {"model.safetensors", "optimizer_0.pt"}
    # "tied" is the same view as "weight" (dropped, named in the metadata); "row" overlaps it, so it is written as a copy
    assert files["model.safetensors"].nbytes == weight.nbytes + weight[1].nbytes + 3 * 8
    for name, file in files.items():
        later = tmp_path / "later"
        later.mkdir(exist_ok=True)
        with open(later / name, "wb") as handle:
            file.write(handle)
        assert (later / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_host_copy_keeps_views_and_sharing_and_copies_mutable_leaves():
    from braeburn.checkpoints.host_copy import host_copy

    base = torch.arange(12.0)
    mutable = {"list": [1, 2]}
    copied, nbytes = host_copy({"a": base, "b": base[2:5], "c": base.view(3, 4).t(), "m": mutable, "n": 3})
    assert nbytes == base.nbytes
    assert copied["b"].untyped_storage().data_ptr() == copied["a"].untyped_storage().data_ptr() != base.data_ptr()
    assert torch.equal(copied["c"], base.view(3, 4).t()) and copied["c"].stride() == (1, 4)
    mutable["list"].append(3)
    assert copied["m"] == {"list": [1, 2]} and copied["n"] == 3


def test_host_copy_keeps_the_container_types():
    import collections

    from braeburn.checkpoints.host_copy import host_copy

    pair = collections.namedtuple("pair", "tensor number")
    state = {"p": pair(torch.zeros(2), 2), "d": collections.defaultdict(list, x=torch.ones(1)),
             "o": collections.OrderedDict(z=torch.ones(1)), "t": (torch.ones(1), "s")}
    copied, nbytes = host_copy(state)
    assert type(copied["p"]) is pair and copied["p"].number == 2 and torch.equal(copied["p"].tensor, torch.zeros(2))
    assert type(copied["d"]) is collections.defaultdict and copied["d"].default_factory is list
    assert type(copied["o"]) is collections.OrderedDict and type(copied["t"]) is tuple and nbytes == 8 + 4 + 4 + 4
