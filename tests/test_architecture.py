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

# tests/ mirrors src/braeburn/ (docs/architecture.md, "Where to add"): these alone stay at its top, as they span the
# whole package: shared fixtures, the layout's own checks, the docs' checks, and the error and warning rules every
# part follows (errors.py, warn.py: modules at the top of the package).
TOP_OF_TESTS = {"__init__.py", "conftest.py", "full_disk.py", "doc_blocks.py", "test_architecture.py",
                "test_docs_blocks.py", "test_docs_citations.py", "test_bad_input.py", "test_clear_errors.py",
                "test_warn.py", "tiers.py", "test_suite_tiers.py"}
# Folders of the repository outside the package whose own code has tests (tests/examples/, tests/benchmarks/).
OTHER_CODE = ("examples", "benchmarks")


def test_no_import_circles():
    assert import_graph.cycles(GRAPH) == []


def test_the_core_never_imports_a_peers_layer():
    assert import_graph.core_to_compat(GRAPH) == []


def test_the_core_reads_no_peers_environment_variables():
    """Accelerate's ACCELERATE_* variables are read by its layer (compat/accelerate/environment.py), not the core."""
    import ast

    package = ROOT / "src" / "braeburn"
    named = sorted({f"{path.relative_to(package)}: {node.value}" for path in package.rglob("*.py")
                    if import_graph.in_core(import_graph.module_name(package, path))
                    for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith("ACCELERATE_")})
    assert named == []


LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")


def _imports_lightning(path: Path) -> bool:
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(name.split(".")[0] in LIGHTNING_PACKAGES for name in names):
            return True
    return False


def test_lightning_is_the_lightning_paths_own_extra_and_only_that_path_imports_it():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(spec.startswith(("pytorch-lightning", "lightning")) for spec in extras["lightning"])
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(spec.startswith(("pytorch-lightning", "lightning")) for spec in dependencies)
    package = ROOT / "src" / "braeburn"
    assert [path for path in package.rglob("*.py") if _imports_lightning(path)] == []  # no import statement
    loading = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                     if "import_module(" in path.read_text() and '"pytorch_lightning"' in path.read_text())
    assert loading == ["compat/lightning/package.py"]  # loaded there, when braeburn.lightning.Braeburn is first used


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


def test_the_graph_sees_string_imports_and_names_a_package_loads_lazily(tmp_path):
    """importlib.import_module and __import__ with a literal name are imports, and so is a name taken from a package
    whose __init__ loads it lazily (``from braeburn import Trainer`` loads compat/): the checks would miss a core
    module reaching a peer's layer, or a circle, that way."""
    package = tmp_path / "braeburn"
    for folder in ("compat", "trainer", "plan"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text('_WHERE = {"Trainer": ".compat.peer"}\n_ALIASES = {"Other": "Trainer"}\n')
    (package / "trainer" / "__init__.py").write_text('_WHERE = {"Trainer": "loop"}\n')
    (package / "compat" / "peer.py").write_text("")
    (package / "trainer" / "loop.py").write_text("from ..plan import rules\n")
    (package / "plan" / "rules.py").write_text("def f():\n    from ..trainer import Trainer\n")
    (package / "errors.py").write_text("def f():\n    from braeburn import Other\n")
    (package / "warn.py").write_text('import importlib\ndef f():\n    importlib.import_module(".compat.peer", "braeburn")\n')
    (package / "data.py").write_text('def f():\n    return __import__("braeburn.compat.peer")\n')
    graph = import_graph.graph(package)
    assert import_graph.cycles(graph) == [["braeburn.plan.rules", "braeburn.trainer.loop"]]
    assert import_graph.core_to_compat(graph) == [(module, "braeburn.compat.peer") for module in
                                                  ("braeburn.data", "braeburn.errors", "braeburn.warn")]


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


OLD_PATH_THEN_USE = """
import importlib, warnings
import braeburn.checkpoints.state as state
import braeburn.compat.transformers.arguments as arguments
import braeburn.state, braeburn.trainer.hf_args  # old paths: the same modules
warnings.simplefilter("error", ImportWarning)
assert state.__spec__.name == "braeburn.checkpoints.state", state.__spec__
assert arguments.__spec__.parent == arguments.__package__ == "braeburn.compat.transformers", arguments.__spec__
state.enable_full_determinism()  # a relative import inside the function: no "__package__ != __spec__.parent"
state.enable_full_determinism = None
importlib.reload(braeburn.state)
assert state.enable_full_determinism is not None  # reload ran the module's code again
print("ok")
"""


@pytest.mark.slow  # 24 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_an_old_module_path_leaves_the_module_its_own_spec(tmp_path):
    """Importing an old path gives the module under both names, but the module keeps its own __spec__: a relative
    import inside its functions does not warn (an error under -W error), and importlib.reload runs its code again."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", OLD_PATH_THEN_USE], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_lightning_names_still_import_from_the_compat_path_they_had():
    """braeburn.compat.lightning was a module defining Trainer and LightningArgumentError (braeburn.lightning
    imported them from it); as a package it still gives both, the same classes as braeburn.lightning's."""
    from braeburn import lightning
    from braeburn.compat.lightning import LightningArgumentError, Trainer

    assert Trainer is lightning.Trainer and LightningArgumentError is lightning.LightningArgumentError


def test_the_options_callback_keeps_its_old_name_at_its_old_path(tmp_path):
    """The built-in callback for options between steps was HfOptionsCallback in braeburn.trainer.hf_callbacks (the
    docs named it); that name still gives the class, so trainer.remove_callback(HfOptionsCallback) still finds it."""
    import torch

    import braeburn
    from braeburn.trainer.hf_callbacks import HfOptionsCallback
    from braeburn.trainer.options_callback import OptionsCallback

    assert HfOptionsCallback is OptionsCallback
    trainer = braeburn.Trainer(torch.nn.Linear(2, 1), braeburn.TrainingArguments(output_dir=str(tmp_path), use_cpu=True))
    assert isinstance(trainer.pop_callback(HfOptionsCallback), OptionsCallback)
    trainer.accelerator.end_training()


TRAIN_WITH_THE_CORE = """
import sys, torch
from torch.utils.data import TensorDataset
from braeburn.trainer import CoreTrainer as Trainer, CoreTrainingConfig as TrainingConfig

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
    from braeburn.trainer.config import CoreTrainingConfig as TrainingConfig
    from braeburn.trainer.loop import CoreTrainer as Trainer

    for public, core in ((braeburn.Trainer, Trainer), (braeburn.Accelerator, Accelerator),
                         (braeburn.TrainingConfig, TrainingConfig), (braeburn.TrainingArguments, TrainingConfig)):
        assert issubclass(public, core) and public is not core
        assert public.__module__.startswith("braeburn.compat.")


def test_a_trainer_takes_either_config_and_its_accumulation_stays(monkeypatch, tmp_path):
    """braeburn's own Trainer takes the public TrainingConfig, and braeburn.Trainer braeburn's own: each builds its
    Accelerator with the config's accumulation (ACCELERATE_GRADIENT_ACCUMULATION_STEPS does not replace it)."""
    import torch

    import braeburn
    from braeburn.trainer.config import CoreTrainingConfig as TrainingConfig
    from braeburn.trainer.loop import CoreTrainer as Trainer

    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    for trainer_class, config_class in ((Trainer, braeburn.TrainingConfig), (braeburn.Trainer, TrainingConfig)):
        config = config_class(output_dir=str(tmp_path), use_cpu=True, gradient_accumulation_steps=2)
        trainer = trainer_class(torch.nn.Linear(2, 1), config)
        assert trainer.accelerator.gradient_accumulation_steps == 2
        trainer.accelerator.end_training()


def misplaced_test_files(tests: Path, repository: Path) -> list[str]:
    """The .py files under ``tests`` not in a folder named for a folder of ``src/braeburn/`` (``compat/<peer>/``
    included) or for one of OTHER_CODE, nor on the short list of what stays at the top; and the folders holding
    them that are not packages (every folder of tests/ has an __init__.py, so two files of one name never clash)."""
    package, problems = repository / "src" / "braeburn", []
    for path in sorted(tests.rglob("*.py")):
        folder = path.parent.relative_to(tests)
        if folder == Path("."):
            placed = path.name in TOP_OF_TESTS
        elif folder.parts[0] in OTHER_CODE:
            placed = len(folder.parts) == 1 and (repository / folder).is_dir()
        else:
            placed = (package / folder).is_dir() and "__pycache__" not in folder.parts
        if folder == Path(".") and not placed:
            problems.append(f"{path.name}: at the top of tests/, which holds only TOP_OF_TESTS")
        elif not placed and path.name != "__init__.py":
            problems.append(f"{path.relative_to(tests)}: no folder of src/braeburn/ is named {folder}")
        if not (path.parent / "__init__.py").is_file():
            problems.append(f"{folder}/: no __init__.py")
    return sorted(set(problems))


def test_every_test_file_lives_in_the_folder_of_the_concern_it_tests():
    assert misplaced_test_files(ROOT / "tests", ROOT) == []


def test_the_layout_check_finds_a_test_outside_the_mirror(tmp_path):
    """The check would pass vacuously if it looked at nothing: a flat test, a folder no src folder names, a folder
    without __init__.py and a peer braeburn has no layer for are each found; a mirrored file passes."""
    for folder in ("src/braeburn/trainer", "src/braeburn/compat/accelerate", "examples"):
        (tmp_path / folder).mkdir(parents=True)
    files = {"__init__.py": "", "conftest.py": "", "test_issue_notes.py": "", "trainer/__init__.py": "",
             "trainer/test_loop.py": "", "compat/__init__.py": "", "compat/accelerate/__init__.py": "",
             "compat/accelerate/test_api.py": "", "compat/deepspeed/__init__.py": "", "compat/deepspeed/test_x.py": "",
             "misc/__init__.py": "", "misc/test_misc.py": "", "examples/test_examples.py": ""}
    for name, text in files.items():
        (tmp_path / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / name).write_text(text)
    assert misplaced_test_files(tmp_path / "tests", tmp_path) == [
        "compat/deepspeed/test_x.py: no folder of src/braeburn/ is named compat/deepspeed",
        "examples/: no __init__.py",
        "misc/test_misc.py: no folder of src/braeburn/ is named misc",
        "test_issue_notes.py: at the top of tests/, which holds only TOP_OF_TESTS",
    ]


# Every name a script could import from these paths before the package was laid out by concern (each module's
# __all__ then, braeburn.trainer's lazy names then, and the names the docs and both examples imported then).
NAMES_AT_OLD_PATHS = {
    "braeburn.trainer": ("Callback", "CallbackList", "CheckpointCorruptError", "CheckpointError", "CheckpointManager",
                         "ConfigError", "TrainingConfig", "TrainingArguments", "parse_config", "HfArgumentParser",
                         "TrainerCallback", "TrainerControl", "EarlyStoppingCallback", "MetricsLogCallback",
                         "PlotCallback", "ProgressCallback", "SignalCallback", "TrainingInterrupted", "TrainerState",
                         "EvalPrediction", "NonFiniteLossError", "PredictionOutput", "Trainer", "TrainOutput",
                         "EvalLoopOutput"),
    "braeburn.trainer.loop": ("EvalPrediction", "NonFiniteLossError", "PredictionOutput", "TrainOutput", "Trainer",
                              "PlanError", "EarlyStoppingCallback"),
    "braeburn.trainer.config": ("ConfigError", "TrainingArguments", "TrainingConfig", "parse_config", "plan_errors"),
    "braeburn.accelerator": ("Accelerator", "AcceleratedOptimizer", "AcceleratedScheduler"),
}


@pytest.mark.parametrize("module,name", [(module, name) for module, names in NAMES_AT_OLD_PATHS.items()
                                         for name in names])
def test_a_name_at_its_old_path_is_the_public_object(module, name):
    """``from braeburn.trainer.loop import Trainer`` (the old examples' import) gives braeburn.Trainer itself, not
    the core class under it: a script written then keeps Transformers' arguments, methods and overrides."""
    import braeburn

    found = getattr(importlib.import_module(module), name)
    if name in braeburn.__all__:
        assert found is getattr(braeburn, name)
    assert name in importlib.import_module(module).__all__ or module.count(".") == 2


def test_the_core_classes_keep_their_own_names_and_a_missing_name_is_still_missing():
    import braeburn
    from braeburn.trainer import config, loop

    assert issubclass(braeburn.Trainer, loop.CoreTrainer) and loop.Trainer is braeburn.Trainer
    assert issubclass(braeburn.TrainingArguments, config.CoreTrainingConfig)
    for module in (loop, config, braeburn.trainer, braeburn.accelerator):
        with pytest.raises(AttributeError, match=f"module '{module.__name__}' has no attribute 'Nothing'"):
            module.Nothing


def test_the_graph_sees_a_public_name_a_core_package_gives(tmp_path):
    """``braeburn.trainer.Trainer`` is braeburn.Trainer (defined in compat/): a core module importing it reaches a
    peer's layer, and the check says so."""
    package = tmp_path / "braeburn"
    for folder in ("compat", "trainer"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text('_WHERE = {"Trainer": ".compat.peer"}\n')
    public = 'PUBLIC_NAMES = {"Trainer": "Trainer", "loop.Trainer": "Trainer"}\n'
    (package / "trainer" / "__init__.py").write_text(public)
    (package / "compat" / "peer.py").write_text("")
    (package / "trainer" / "loop.py").write_text("")
    (package / "trainer" / "steps.py").write_text("from .loop import Trainer\n")
    (package / "trainer" / "other.py").write_text("from . import Trainer\n")
    graph = import_graph.graph(package)
    assert import_graph.core_to_compat(graph) == [("braeburn.trainer.other", "braeburn.compat.peer"),
                                                  ("braeburn.trainer.steps", "braeburn.compat.peer")]
