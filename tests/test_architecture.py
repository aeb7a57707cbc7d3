"""The package's shape (docs/architecture.md): no import circles, a core that never imports a peer's layer, and
every braeburn name the docs use still importing, old module paths included."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("import_graph", ROOT / "benchmarks" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)

GRAPH = import_graph.graph(ROOT / "src" / "braeburn")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_no_import_circles():
    assert import_graph.cycles(GRAPH) == []


def test_the_core_never_imports_a_peers_layer():
    assert import_graph.core_to_compat(GRAPH) == []


def test_the_graph_sees_an_import_inside_a_function(tmp_path):
    """The check would pass vacuously if it missed imports: a circle made of function-level imports is found."""
    package = tmp_path / "braeburn"
    (package / "compat").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "compat" / "__init__.py").write_text("")
    (package / "compat" / "peer.py").write_text("def f():\n    from .. import core\n")
    (package / "core.py").write_text("def g():\n    from .compat import peer\n")
    graph = import_graph.graph(package)
    assert import_graph.cycles(graph) == [["braeburn.compat.peer", "braeburn.core"]]
    assert import_graph.core_to_compat(graph) == [("braeburn.core", "braeburn.compat.peer")]


def _doc_names() -> set[str]:
    """`from braeburn.x import a, b` statements and `braeburn.x.y` names in backticks, in the README and docs/."""
    names = set()
    for path in DOCS:
        text = path.read_text()
        for module, imported in re.findall(r"from (braeburn[\w.]*) import ([\w ,]+)", text):
            names.update(f"{module}.{name.strip()}" for name in imported.split(",") if name.strip())
        names.update(re.findall(r"`(braeburn(?:\.\w+)+)", text))
    return {name for name in names if not name.endswith((".lock", ".md", ".py"))}


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("name", sorted(_doc_names()))
def test_every_braeburn_name_in_the_docs_imports(name):
    assert _resolve(name) is not None


def test_the_docs_name_many_braeburn_paths():
    assert len(_doc_names()) > 30  # the parametrized test above would pass on none


@pytest.mark.parametrize("old", sorted(importlib.import_module("braeburn")._MOVED))
def test_an_old_module_path_imports_the_same_module(old):
    import braeburn

    module = importlib.import_module(old)
    assert module is importlib.import_module(braeburn._MOVED[old])
    assert sys.modules[old] is module


TRAIN_WITH_THE_CORE = """
import sys, torch
from torch.utils.data import TensorDataset
from braeburn.trainer import Trainer, TrainingConfig

x = torch.randn(16, 4)
config = TrainingConfig(output_dir=sys.argv[1], max_steps=2, per_device_train_batch_size=8, save_strategy="no",
                        use_cpu=True, disable_tqdm=True, logging_steps=1, eval_strategy="steps")
trainer = Trainer(torch.nn.Linear(4, 2), config, train_dataset=TensorDataset(x, (x.sum(1) > 0).long()),
                  eval_dataset=TensorDataset(x, (x.sum(1) > 0).long()), loss_fn=torch.nn.functional.cross_entropy)
trainer.train()
print(sorted(name for name in sys.modules if name.startswith("braeburn.compat")))
"""


@pytest.mark.slow  # a training run in a fresh interpreter, as a subprocess (21 s on a loaded machine)
def test_the_core_trains_without_loading_a_peers_layer(tmp_path):
    """braeburn's own Trainer (and its Accelerator) trains and evaluates with no module of compat/ loaded."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", TRAIN_WITH_THE_CORE, str(tmp_path / "run")], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_public_classes_are_the_cores_with_a_peers_layer():
    import braeburn
    from braeburn.accelerator.core import Accelerator
    from braeburn.trainer.config import TrainingConfig
    from braeburn.trainer.loop import Trainer

    for public, core in ((braeburn.Trainer, Trainer), (braeburn.Accelerator, Accelerator),
                         (braeburn.TrainingConfig, TrainingConfig), (braeburn.TrainingArguments, TrainingConfig)):
        assert issubclass(public, core) and public is not core
        assert public.__module__.startswith("braeburn.compat.")


def test_a_trainer_takes_either_config_and_its_accumulation_stays(monkeypatch, tmp_path):
    """braeburn's own Trainer takes the public TrainingConfig, and braeburn.Trainer braeburn's own: each builds its
    Accelerator with the config's accumulation (ACCELERATE_GRADIENT_ACCUMULATION_STEPS does not replace it)."""
    import torch

    import braeburn
    from braeburn.trainer.config import TrainingConfig
    from braeburn.trainer.loop import Trainer

    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    for trainer_class, config_class in ((Trainer, braeburn.TrainingConfig), (braeburn.Trainer, TrainingConfig)):
        config = config_class(output_dir=str(tmp_path), use_cpu=True, gradient_accumulation_steps=2)
        trainer = trainer_class(torch.nn.Linear(2, 1), config)
        assert trainer.accelerator.gradient_accumulation_steps == 2
        trainer.accelerator.end_training()
