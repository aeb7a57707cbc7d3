"""Model weights go through the safetensors package: what braeburn writes is what the package writes and reads, a
checkpoint written by braeburn's earlier writer still loads, and a file that is not safetensors is refused with one
line, never unpickled. (The hostile files, through a Trainer resume: tests/checkpoints/test_malformed_weights.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
import safetensors.torch as safetensors_torch

from braeburn.checkpoints import safetensors_file
from braeburn.checkpoints import state as state_io
from braeburn import Accelerator  # the public one: save_model is an Accelerate name (compat/accelerate)
from braeburn.errors import MalformedFileError

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.complex64]


def every_dtype() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tensors = {str(dtype).removeprefix("torch."): (torch.randn(3, 5, generator=generator) * 50).to(dtype)
               for dtype in DTYPES}
    return {**tensors, "bool": torch.rand(7, generator=generator) > 0.5, "scalar": torch.tensor(2.5),
            "empty": torch.empty(0, 4), "transposed": torch.arange(12.0).view(3, 4).t()}


def test_braeburn_writes_and_reads_what_the_safetensors_package_writes_and_reads(tmp_path):
    tensors = every_dtype()
    assert safetensors_file.can_hold(tensors)
    ours = tmp_path / "model.safetensors"
    safetensors_file.write(tensors, ours, {"format": "pt"})
    theirs = tmp_path / "theirs.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, theirs, metadata={"format": "pt"})
    assert ours.read_bytes() == theirs.read_bytes()  # the package's own bytes
    loaded, metadata = safetensors_file.read(theirs)
    assert metadata == {"format": "pt"} and loaded.keys() == tensors.keys()
    assert all(loaded[k].dtype == v.dtype and torch.equal(loaded[k], v) for k, v in tensors.items())


def earlier_writer_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """What braeburn's own writer wrote before the package did (checkpoints in the wild): tensors in the state dict's
    order, a compact header padded with spaces to 8 bytes."""
    header, offset, data = {"__metadata__": metadata}, 0, b""
    for name, tensor in tensors.items():
        raw = tensor.contiguous().view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": {torch.float32: "F32", torch.int64: "I64"}[tensor.dtype],
                        "shape": list(tensor.shape), "data_offsets": [offset, offset + len(raw)]}
        offset, data = offset + len(raw), data + raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def test_a_checkpoint_of_braeburns_earlier_writer_still_loads(tmp_path):
    weight = torch.randn(3, 4)
    state = {"weight": weight, "steps": torch.arange(3), "empty": torch.empty(0)}
    (tmp_path / "model.safetensors").write_bytes(
        earlier_writer_bytes(state, {"format": "pt", state_io.ALIASES: json.dumps({"tied": "weight"})}))
    loaded = state_io.load_model_state(tmp_path, 0)
    assert loaded.keys() == {"weight", "steps", "empty", "tied"}
    assert torch.equal(loaded["weight"], weight) and torch.equal(loaded["tied"], weight)
    assert torch.equal(loaded["steps"], torch.arange(3)) and loaded["empty"].shape == (0,)


def header(fields: dict, data: bytes = b"") -> bytes:
    text = json.dumps(fields).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("content, reason", [
    (b"\x80\x04\x95", "header too small"),
    (struct.pack("<Q", 1 << 40) + b"{}", "header too large"),
    (header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "not fully covered"),
    (header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8), "invalid shape, data type"),
    (header({"w": {"dtype": "OBJ", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), "unknown variant `OBJ`"),
    (header({"__metadata__": {"a": 1}}), "expected a string"),
    (b"\x02\0\0\0\0\0\0\0[]", "invalid type: sequence"),
])
def test_a_file_that_is_not_safetensors_is_refused_with_one_line(tmp_path, content, reason):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(MalformedFileError, match=f"{path} is not a safetensors file that braeburn can read "
                                                 rf"\(the safetensors package refuses it: .*{reason}"):
        safetensors_file.read(path)


def test_a_write_error_of_the_package_is_an_os_error_with_its_errno(tmp_path, monkeypatch):
    import errno

    from safetensors import SafetensorError

    def full_disk(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors_file, "_save_file", full_disk)
    with pytest.raises(OSError) as error:
        safetensors_file.write({"w": torch.zeros(2)}, tmp_path / "model.safetensors", {})
    assert error.value.errno == errno.ENOSPC and str(error.value) == "[Errno 28] No space left on device"


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


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_the_weights_file_has_the_mode_of_every_other_file_of_the_state(tmp_path, umask):
    """safetensors 0.8 writes a private temporary file and renames it: model.safetensors came out 0600 while every
    other file of a checkpoint was 0644, so a group that reads the checkpoint could read all of it but its weights."""
    import os

    old = os.umask(umask)
    try:
        accelerator = Accelerator(cpu=True)
        model = torch.nn.Linear(3, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        accelerator.prepare(model, optimizer)
        accelerator.save_state(tmp_path / "state")
        (tmp_path / "plain").write_bytes(b"")
    finally:
        os.umask(old)
    expected = (tmp_path / "plain").stat().st_mode & 0o777
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "state").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {oct(expected)}, modes


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
        file.write(later / name)
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


def test_save_weights_writes_tied_weights_once_and_a_view_into_a_weight_as_a_copy(tmp_path):
    """Accelerator.save_model and Trainer.save_model of a plain module: the package refuses shared memory."""
    from braeburn.compat.transformers.files import save_weights

    weight = torch.randn(10, 4)
    state = {"embed.weight": weight, "out.weight": weight, "table": weight[2:5], "out.bias": torch.zeros(10)}
    written = save_weights(state, tmp_path)
    stored = safetensors_torch.load_file(written[0])
    assert sorted(stored) == ["embed.weight", "out.bias", "table"]  # the tied name once, as Transformers writes it
    assert torch.equal(stored["table"], weight[2:5]) and torch.equal(stored["embed.weight"], weight)


def test_two_saves_of_one_state_are_the_same_bytes(tmp_path):
    """The package orders metadata entries at random: braeburn writes one entry, so a checksum is reproducible."""
    weight = torch.randn(6, 4)
    state = {"weight": weight, "tied": weight, "bias": torch.zeros(6)}
    for folder in ("a", "b", "c"):
        (tmp_path / folder).mkdir()
        state_io.save_model_state(state, tmp_path / folder, 0)
    assert len({(tmp_path / f / "model.safetensors").read_bytes() for f in ("a", "b", "c")}) == 1
    loaded = state_io.load_model_state(tmp_path / "a", 0, state)  # the tied name comes back from the model's ties
    assert loaded.keys() == state.keys() and torch.equal(loaded["tied"], weight)


@pytest.mark.parametrize("architecture", ["XLMRoberta", "Camembert"])
def test_a_masked_lm_checkpoint_keeps_the_tied_name_transformers_keeps_and_loads_bitwise_for_fine_tuning(
        tmp_path, architecture):
    """XLM-R's and CamemBERT's state dicts list ``lm_head.decoder.weight`` before the word embeddings it is tied to;
    save_pretrained keeps the embeddings (the head is the declared copy), so the base model and a classifier built
    on it load the trained embeddings from a checkpoint, not random ones."""
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, f"{architecture}Config")(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=40, pad_token_id=1)
    torch.manual_seed(0)
    model = getattr(transformers, f"{architecture}ForMaskedLM")(config)
    assert next(iter(n for n in model.state_dict() if n.endswith("decoder.weight") or "word_emb" in n)) == \
        "lm_head.decoder.weight"  # the name a first-name rule would keep
    model.save_pretrained(tmp_path / "transformers")
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(model)
    accelerator.save_state(tmp_path / "state")
    accelerator.save_model(prepared, tmp_path / "model")
    theirs = safetensors_torch.load_file(tmp_path / "transformers" / "model.safetensors").keys()
    assert "roberta.embeddings.word_embeddings.weight" in theirs and "lm_head.decoder.weight" not in theirs
    fresh = getattr(transformers, f"{architecture}ForMaskedLM")(config)
    fresh.load_state_dict(state_io.load_model_state(tmp_path / "state", 0, fresh.state_dict()))
    assert fresh.lm_head.decoder.weight.data_ptr() == fresh.roberta.embeddings.word_embeddings.weight.data_ptr()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in fresh.state_dict().items())  # resumes tied, exact
    trained = {k: v for k, v in model.roberta.state_dict().items() if not k.startswith("pooler.")}
    for folder in ("state", "model"):
        assert safetensors_torch.load_file(tmp_path / folder / "model.safetensors").keys() == theirs
        config.save_pretrained(tmp_path / folder)
        base = transformers.AutoModel.from_pretrained(tmp_path / folder)
        classifier = getattr(transformers, f"{architecture}ForSequenceClassification").from_pretrained(
            tmp_path / folder)
        for loaded in (base.state_dict(), classifier.roberta.state_dict()):
            assert all(torch.equal(loaded[k], v) for k, v in trained.items()), folder


def test_a_model_that_declares_no_ties_keeps_the_first_name_of_a_tied_pair(tmp_path):
    """Without ``_tied_weights_keys`` (any plain module), the state dict's first name is written."""
    model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    assert state_io.tied_names(model.state_dict(), model) == {"1.weight": "0.weight"}
    model._tied_weights_keys = {"0.weight": "1.weight"}  # a model that says the first name is the copy
    assert state_io.tied_names(model.state_dict(), model) == {"0.weight": "1.weight"}
