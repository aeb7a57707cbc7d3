"""Safe by default: no pickled code is ever run from a checkpoint, config files are data, and paths from a
config cannot make braeburn write or delete outside output_dir.

Every payload below would create a marker file if it were unpickled or evaluated (the first test proves
that the payload is live); each test asserts it is refused with a clear error and the marker never appears.
The launcher's rendezvous address (127.0.0.1 unless several machines) is tested in tests/cli/test_launch.py.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.accelerator.core import Accelerator
from braeburn.errors import UnsafeFileError, is_user_error
from braeburn.checkpoints.manifest import WHOLE, ManifestError, write_sizes
from braeburn.checkpoints.ownership import MARKER
from braeburn.trainer import ConfigError, parse_config
from braeburn.trainer.config import CoreTrainingConfig as TrainingConfig
from braeburn.trainer.loop import CoreTrainer as Trainer
from braeburn.trainer.checkpoint import CheckpointCorruptError, write_manifest


class Payload:
    """Unpickling this runs ``open(marker, "w")`` through exec: arbitrary code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def plant(path: Path, marker: Path) -> None:
    torch.save({"weight": torch.zeros(2), "extra": Payload(marker)}, path)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_payload_is_live_when_loaded_unsafely(tmp_path):
    marker = tmp_path / "pwned"
    plant(tmp_path / "p.pt", marker)
    torch.load(tmp_path / "p.pt", weights_only=False)  # what braeburn never does
    assert marker.exists()


def prepared(accelerator: Accelerator):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_a_huge_planted_manifest_is_refused_before_it_is_parsed(tmp_path):
    """Was: a 64 MB manifest took 33 s and 630 MB to be refused."""
    accelerator = Accelerator(cpu=True)
    prepared(accelerator)
    accelerator.save_state(tmp_path / "state")
    entries = {f"f{i:07d}.pt": {"size": 1} for i in range(400_000)}  # ~10 MB of JSON
    (tmp_path / "state" / "manifest.json").write_text(json.dumps({"format": 1, "layout": WHOLE, "files": entries}))
    started = time.perf_counter()
    with pytest.raises(ManifestError, match=r"manifest.json is [\d,]+ bytes, more than the 8,388,608 .*not read"):
        accelerator.load_state(tmp_path / "state")
    assert time.perf_counter() - started < 1


@pytest.mark.parametrize("name", ["accelerator.pt", "optimizer_0.pt", "rng_state_0.pt"])
def test_accelerator_load_state_refuses_a_pickled_payload(tmp_path, name):
    accelerator = Accelerator(cpu=True)
    prepared(accelerator)
    accelerator.save_state(tmp_path / "state")
    marker = tmp_path / "pwned"
    plant(tmp_path / "state" / name, marker)
    fresh = Accelerator(cpu=True)
    prepared(fresh)
    with pytest.raises(ManifestError, match=f"{name} is truncated or altered"):  # the manifest's size sees it
        fresh.load_state(tmp_path / "state")
    write_sizes(tmp_path / "state", WHOLE)  # an attacker who rewrites the manifest too
    with pytest.raises(UnsafeFileError) as error:
        fresh.load_state(tmp_path / "state")
    assert f"{tmp_path / 'state' / name} holds pickled objects other than tensors" in str(error.value)
    assert "Unsupported global" in str(error.value) and "refuses to load" in str(error.value)
    assert not marker.exists()


def test_accelerator_load_state_refuses_a_pickle_in_place_of_the_weights(tmp_path):
    accelerator = Accelerator(cpu=True)
    prepared(accelerator)
    accelerator.save_state(tmp_path / "state")
    marker, weights = tmp_path / "pwned", tmp_path / "state" / "model.safetensors"
    plant(weights, marker)
    write_sizes(tmp_path / "state", WHOLE)  # an attacker who rewrites the manifest too
    fresh = Accelerator(cpu=True)
    prepared(fresh)
    with pytest.raises(UnsafeFileError, match=f"{weights} is not a safetensors file that braeburn can read"):
        fresh.load_state(tmp_path / "state")
    assert not marker.exists()


def small_trainer(output_dir: Path, **options) -> Trainer:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    config = TrainingConfig(output_dir=str(output_dir), per_device_train_batch_size=4, use_cpu=True,
                            **{"max_steps": 2, "save_strategy": "steps", "save_steps": 2, "logging_steps": 1, **options})
    return Trainer(torch.nn.Linear(4, 2), config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy)


def test_trainer_resume_refuses_a_pickled_payload_even_with_a_matching_manifest(tmp_path):
    out = tmp_path / "out"
    small_trainer(out).train()
    checkpoint, marker = out / "checkpoint-2", tmp_path / "pwned"
    plant(checkpoint / "optimizer_0.pt", marker)
    with pytest.raises(CheckpointCorruptError, match="optimizer_0.pt is truncated or altered"):  # the manifest sees it
        small_trainer(out, max_steps=4).train(resume_from_checkpoint=str(checkpoint))
    write_manifest(checkpoint, 2)  # an attacker who rewrites the manifest too
    with pytest.raises(UnsafeFileError) as error:
        small_trainer(out, max_steps=4).train(resume_from_checkpoint="latest")
    assert f"{checkpoint / 'optimizer_0.pt'} holds pickled objects" in str(error.value) and is_user_error(error.value)
    assert not marker.exists()


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['touch {m}']",
                                 "!!python/object/new:subprocess.Popen [['touch', '{m}']]",
                                 "!!python/name:os.system"])
def test_yaml_config_with_python_tags_is_refused(tmp_path, tag):
    marker = tmp_path / "pwned"
    config = tmp_path / "config.yaml"
    config.write_text(f"learning_rate: {tag.format(m=marker)}\n")
    with pytest.raises(ConfigError, match="cannot be read as .yaml") as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    assert str(config) in str(error.value)
    assert not marker.exists()


def test_toml_config_values_are_data_never_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    config = tmp_path / "config.toml"
    config.write_text(f'learning_rate = "__import__(\'os\').system(\'touch {marker}\') or 1e-3"\n'
                      f'output_dir = "{tmp_path}/out"\n')
    with pytest.raises(ConfigError, match="learning_rate=.*expected a number"):
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    assert not marker.exists()


def _alias_bomb(levels: int) -> str:
    """Nested YAML aliases ("billion laughs"): 9**levels values from a few hundred bytes."""
    names = "abcdefghij"
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{names[i]}: &{names[i]} [{','.join([f'*{names[i - 1]}'] * 9)}]" for i in range(1, levels)]
    lines.append(f"learning_rate: [{','.join([f'*{names[levels - 1]}'] * 9)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [5, 9])  # 9**5 values (main formatted them all), and the 360-byte 9**9 one
def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, levels):
    config = tmp_path / "bomb.yaml"
    config.write_text(_alias_bomb(levels))
    assert config.stat().st_size < 420
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="expands to more than 10,000 values") as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    assert time.perf_counter() - started < 2 and len(str(error.value)) < 600
    assert str(config) in str(error.value) and "without nested aliases" in str(error.value)


@pytest.mark.parametrize("name, text, words", [
    ("self.yaml", "learning_rate: &a [1, *a]\n", "refers to itself"),
    ("deep.yaml", "learning_rate: " + "[" * 5000 + "]" * 5000 + "\n", "more than 32 levels deep"),
    ("deeper.yaml", "learning_rate: " + "[" * 40 + "]" * 40 + "\n", "more than 32 levels deep"),
    ("deep.toml", "learning_rate = " + "[" * 5000 + "]" * 5000 + "\n", "more than 32 levels deep"),
    ("tables.toml", "[" + ".".join(["a"] * 40) + "]\nx = 1\n", "more than 32 levels deep"),
    ("huge.yaml", "# padding\n" * 100_001 + "learning_rate: 1e-3\n", "more than the 1,000,000"),
    ("huge.toml", "# padding\n" * 100_001 + "learning_rate = 1e-3\n", "more than the 1,000,000"),
])
def test_config_files_too_deep_too_large_or_self_referring_are_refused(tmp_path, name, text, words):
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(ConfigError, match=words) as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    assert len(error.value.errors) == 1 and len(str(error.value)) < 600


@pytest.mark.parametrize("name, text, key, lines", [
    ("dup.yaml", "learning_rate: 0.1\nseed: 3\nlearning_rate: 0.5\n", "'learning_rate'", "lines 1 and 3"),
    ("flow.yaml", "seed: 1\nlr_scheduler_kwargs: {a: 1, a: 2}\n", "'a'", "lines 2 and 2"),
])
def test_a_yaml_key_given_twice_is_refused_with_its_lines(tmp_path, name, text, key, lines):
    """YAML keeps the last of two equal keys without a word; TOML refuses them itself."""
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(ConfigError) as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    message = str(error.value)
    assert f"gives the key {key} twice ({lines})" in message and "Keep one of them" in message
    assert str(config) in message


@pytest.mark.parametrize("name, line", [("keys.yaml", "k{}: 1\n"), ("keys.toml", "k{} = 1\n")])
def test_a_hundred_thousand_unknown_keys_are_refused_fast_in_a_few_lines(tmp_path, name, line):
    """Was: 29 s and 111,000 lines of did-you-mean."""
    config = tmp_path / name
    config.write_text("".join(line.format(i) for i in range(90_000)))
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="more than the 10,000|more than 10,000 values") as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    assert time.perf_counter() - started < 8 and len(error.value.errors) == 1 and "right file" in str(error.value)


def test_many_unknown_keys_name_the_first_twenty_and_count_the_rest(tmp_path):
    config = tmp_path / "keys.yaml"
    config.write_text("".join(f"k{i}: 1\n" for i in range(500)))
    with pytest.raises(ConfigError) as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    assert len(error.value.errors) == 21 and "'480 more'" in str(error.value.errors[-1])
    assert "k19" in str(error.value) and "k20'" not in str(error.value)


def test_a_huge_value_is_shown_as_a_short_excerpt(tmp_path):
    config = tmp_path / "long.yaml"
    config.write_text("learning_rate: [" + ", ".join(["1"] * 9000) + "]\nseed: '" + "9" * 100_000 + "'\n")
    with pytest.raises(ConfigError) as error:
        parse_config(TrainingConfig, argv=["--config", str(config)], exit_on_error=False)
    message = str(error.value)
    assert "learning_rate=[1, 1, 1" in message and "..." in message and "seed='99999" in message
    assert len(message) < 1000


# -- paths ------------------------------------------------------------------------------------------
def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def victim(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    (folder / "sub").mkdir(parents=True)
    (folder / "precious.txt").write_text("a user's file")
    (folder / "sub" / "model.pt").write_bytes(b"weights")
    return folder


def test_links_planted_in_output_dir_are_never_followed_to_write_or_delete(tmp_path, capsys):
    """checkpoint-1 and the staging names of step 2 link outside: the run that would save over their names is
    refused before it starts, naming every one it checks at once, and the links and what they lead to are left as
    they were. Without them it trains, and rotation (limit 1) deletes only its own checkpoints."""
    out = tmp_path / "out"
    out.mkdir()
    outside = {name: victim(tmp_path, name) for name in ("rotated", "staged", "accelerator-staged")}
    before = {name: tree(folder) for name, folder in outside.items()}
    links = {"checkpoint-1": "rotated", ".checkpoint-2.tmp": "staged", "..checkpoint-2.tmp.partial": "accelerator-staged"}
    for link, name in links.items():
        (out / link).symlink_to(outside[name], target_is_directory=True)
    tries = 0
    while any((out / link).is_symlink() for link in links):
        tries += 1
        with pytest.raises(OSError, match="not braeburn's") as error:
            small_trainer(out, max_steps=4, save_steps=1, save_total_limit=1, overwrite_output_dir=True).train()
        message = str(error.value)  # one entry: "<path> is not braeburn's (...)"; several: "...: <name> (...); ..."
        named = [link for link in links if (out / link).is_symlink()
                 and (f"{out / link} is not" in message or re.search(rf"[:;] {re.escape(link)} \(", message))]
        assert named and "it is a symbolic link" in message and "\n" not in message
        assert {name: tree(folder) for name, folder in outside.items()} == before
        assert all(os.readlink(out / other) == str(outside[target]) for other, target in links.items()
                   if (out / other).is_symlink())
        for link in named:
            (out / link).unlink()  # the user's fix
    assert tries < len(links)  # the ones the run checks before it starts are named together
    small_trainer(out, max_steps=4, save_steps=1, save_total_limit=1, overwrite_output_dir=True).train()
    assert {name: tree(folder) for name, folder in outside.items()} == before
    assert "Saving" not in capsys.readouterr().out
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4"]


def test_output_dir_that_is_a_link_is_followed_and_nothing_is_written_beside_it(tmp_path):
    """A link as output_dir is the user's own choice (e.g. to a scratch disk): everything goes to its target."""
    real, link = tmp_path / "scratch" / "run", tmp_path / "outputs"
    real.mkdir(parents=True)
    link.symlink_to(real, target_is_directory=True)
    small_trainer(link, max_steps=3, save_steps=1, save_total_limit=1).train()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs", "scratch"]
    assert sorted(p.name for p in real.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint-3"]
    # no staging left, and no lock file (deleted when the run ended): only braeburn's record of what it wrote
    assert [p.name for p in real.iterdir() if p.name.startswith(".")] == [MARKER]
