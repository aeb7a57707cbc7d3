"""A malformed weights file is refused with one braeburn error naming the file and what is wrong, through the path a
Trainer resume takes, even when the manifest's checksums were rewritten to match it.

Each file is built by hand and planted as ``model.safetensors`` of a genuine checkpoint of a ``Linear(4, 2)``
(``weight`` [2, 4] and ``bias`` [2], float32: 40 bytes of data), its manifest rewritten as an attacker would. The
resume goes through ``run_main``, as a script does: one ``error:`` paragraph, no traceback, exit status 1, and no
step trained from the file.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.errors import run_main
from braeburn.trainer import Trainer, TrainingConfig
from braeburn.trainer.checkpoint import write_manifest

pytestmark = pytest.mark.usefixtures("one_thread", "no_launcher_env")

WEIGHT = {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]}
BIAS = {"dtype": "F32", "shape": [2], "data_offsets": [32, 40]}
DATA = struct.pack("<10f", *range(10))
FORMAT = '"__metadata__":{"format":"pt"}'
DEEP = 100_000  # levels of nesting: past Python's recursion limit as past the package's


def entry(**fields) -> str:
    return json.dumps({**WEIGHT, **fields})


def raw(header: str | bytes, data: bytes = DATA) -> bytes:
    """A file: the header's length (8 bytes, little-endian), the header, the tensors' bytes."""
    text = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(text)) + text + data


def tensors(weight: str = json.dumps(WEIGHT), bias: str = json.dumps(BIAS), metadata: str = FORMAT) -> str:
    return f'{{{metadata},"weight":{weight},"bias":{bias}}}'


def truncated(genuine: bytes) -> bytes:
    return genuine[: len(genuine) - 12]


CASES = [  # (id, the file's bytes from the genuine file's, the reason the error must give)
    ("truncated", truncated, r"file not fully covered"),
    ("shorter than its length field", lambda g: b"\x10\x00\x00", r"header too small"),
    ("header length 2**63", lambda g: struct.pack("<Q", 1 << 63) + b"{}", r"header too large"),
    ("header length past the end", lambda g: struct.pack("<Q", 4096) + b"{}" + DATA, r"invalid header length"),
    ("overlapping byte ranges", lambda g: raw(tensors(bias=json.dumps({**BIAS, "data_offsets": [24, 32]})), DATA[:32]),
     r"invalid offset for tensor `bias`"),
    ("duplicate key, the bytes of both covered",
     lambda g: raw(tensors()[:-1] + f',"weight":{entry(dtype="I32")}}}'), r"its header names 'weight' twice"),
    ("duplicate key, other bytes",
     lambda g: raw(tensors()[:-1] + f',"bias":{json.dumps({**BIAS, "data_offsets": [40, 48]})}}}', DATA + DATA[:8]),
     r"invalid offset for tensor"),
    ("duplicate metadata entry", lambda g: raw(tensors(metadata='"__metadata__":{"format":"pt","format":"np"}')),
     r"its header names 'format' twice"),
    ("deep nesting in the header", lambda g: raw(tensors(weight=entry()[:-1] + ',"x":' + "[" * DEEP + "]" * DEEP + "}")),
     r"recursion limit exceeded"),
    ("deep nesting in the tied names",
     lambda g: raw(tensors(metadata=f'"__metadata__":{{"format":"pt","braeburn_aliases":"{"[" * DEEP}{"]" * DEEP}"}}')),
     r"names tied weights \(braeburn_aliases in its metadata\) that it does not hold, or names one twice"),
    ("tied names it does not hold",
     lambda g: raw(tensors(metadata='"__metadata__":{"format":"pt","braeburn_aliases":"{\\"head\\": \\"nothing\\"}"}')),
     r"names tied weights"),
    ("a number of 400 digits", lambda g: raw(tensors(weight=entry(shape=[2, 10**400]))), r"number out of range"),
    ("a shape whose size overflows", lambda g: raw(tensors(weight=entry(shape=[2**62, 2**62]))),
     r"overflow computing buffer size"),
    ("an offset past 2**64", lambda g: raw(tensors(weight=entry(data_offsets=[0, 2**64 + 32]))),
     r"expected usize"),
    ("a negative size", lambda g: raw(tensors(weight=entry(shape=[-2, -4]))), r"expected usize"),
    ("an unknown dtype", lambda g: raw(tensors(weight=entry(dtype="OBJ"))), r"unknown variant `OBJ`"),
    ("a dtype whose size does not fit the bytes", lambda g: raw(tensors(weight=entry(dtype="F16"))),
     r"invalid shape, data type, or offset"),
    ("a header that is not an object", lambda g: raw("[]", b""), r"invalid type: sequence"),
    ("metadata that is not text", lambda g: raw(tensors(metadata='"__metadata__":{"format":1}')),
     r"expected a string"),
    ("a header that is not UTF-8", lambda g: raw(b'{"w\xff":1}', b""), r"invalid UTF-8"),
]


def trainer(output_dir: Path, **options) -> Trainer:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    config = TrainingConfig(output_dir=str(output_dir), per_device_train_batch_size=4, use_cpu=True,
                            **{"max_steps": 2, "save_strategy": "steps", "save_steps": 2, "logging_steps": 1,
                               "save_in_background": False, **options})
    return Trainer(torch.nn.Linear(4, 2), config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pristine") / "out"
    trainer(out).train()
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_weights_file_is_refused_with_one_error_naming_it(tmp_path, pristine, capsys, case):
    _, build, reason = case
    out = tmp_path / "out"
    shutil.copytree(pristine, out)
    weights = (out / "checkpoint-2" / "model.safetensors").resolve()
    weights.write_bytes(build(weights.read_bytes()))
    write_manifest(out / "checkpoint-2", 2)  # the checksums now vouch for the hostile file
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        run_main(lambda argv: trainer(out, max_steps=4).train(resume_from_checkpoint="latest"), argv=[])
    err = capsys.readouterr().err
    assert stop.value.code == 1 and "Traceback" not in err, err
    assert err.count("error: ") == 1 and err.startswith(f"error: {weights} "), err
    assert re.search(reason, err), err
    assert "nothing was loaded from it" in err or "so it was not loaded" in err, err
    assert not (out / "checkpoint-4").exists()  # no step trained from what the file holds


def accelerator_and_model():
    from braeburn.accelerator.core import Accelerator

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 2)
    return accelerator, *accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))


LOADER = """
import sys, torch
from braeburn.accelerator.core import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 2)
accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
try:
    accelerator.load_state(sys.argv[1])
except Exception as error:
    print(type(error).__name__, error, sep=": ")
"""


@pytest.mark.slow  # a child process per case, with a timeout against a hang (16-24 s each on a loaded machine)
@pytest.mark.parametrize("kind", ["named pipe", "folder"])
@pytest.mark.parametrize("with_manifest", [True, False], ids=["manifest", "no manifest"])
def test_a_weights_file_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path, kind, with_manifest):
    """A named pipe at model.safetensors hung load_state forever inside the package's open (holding the GIL: the
    load runs in a process of its own, ended after a minute); a folder there, without a manifest, gave a raw
    ``[Errno 19]``. Both are refused with one error naming the file, before it is opened."""
    import os
    import subprocess
    import sys

    accelerator, _, _ = accelerator_and_model()
    accelerator.save_state(tmp_path / "state")
    weights = tmp_path / "state" / "model.safetensors"
    weights.unlink()
    os.mkfifo(weights) if kind == "named pipe" else weights.mkdir()
    if not with_manifest:
        (tmp_path / "state" / "manifest.json").unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path / "state")], capture_output=True,
                              text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_state() hung on the {kind} at {weights}")
    said = done.stdout.strip().splitlines()[-1]
    expected = (f"ManifestError: The saved state {tmp_path / 'state'} cannot be loaded: {weights} is not a regular "
                "file" if with_manifest else
                f"MalformedFileError: {weights} is {'a named pipe' if kind == 'named pipe' else 'a folder'}")
    assert done.returncode == 0 and said.startswith(expected), done.stdout + done.stderr


@pytest.mark.parametrize("name, planted, says", [
    ("model.safetensors", {"weight": torch.zeros(4, 2), "bias": torch.zeros(2)}, "size mismatch for weight"),
    ("model.safetensors", {"weight": torch.zeros(2, 4)}, 'Missing key(s) in state_dict: "bias"'),
    ("optimizer_0.pt", {"state": {}, "param_groups": []}, "different number of parameter groups"),
])
def test_a_well_formed_file_of_another_model_names_the_file_in_one_error(tmp_path, name, planted, says):
    """load_state of a file that is well formed but fits another model (or optimizer): torch's bare error, over
    several lines and naming no file, became one line naming the file and the fix."""
    import safetensors.torch

    from braeburn.checkpoints import manifest
    from braeburn.errors import StateMismatchError

    accelerator, _, _ = accelerator_and_model()
    accelerator.save_state(tmp_path / "state")
    path = tmp_path / "state" / name
    path.unlink()
    if name.endswith(".safetensors"):
        safetensors.torch.save_file(planted, path, metadata={"format": "pt"})
    else:
        torch.save(planted, path)
    manifest.write_sizes(tmp_path / "state", manifest.WHOLE)
    with pytest.raises(StateMismatchError) as error:
        accelerator.load_state(tmp_path / "state")
    message = str(error.value)
    assert message.startswith(f"{path} does not fit ") and says in message and "\n" not in message, message
    assert "before load_state()" in message and isinstance(error.value, RuntimeError)
