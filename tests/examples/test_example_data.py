"""The examples' data helpers: image folders in both layouts, digits, GLUE TSV with a BOM, CSV/JSON lines, metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch
from PIL import Image as PIL

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import _images  # noqa: E402
import _metrics  # noqa: E402
import _text  # noqa: E402

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MRPC_ROWS = [
    "1\t101\t102\tHe said the deal \"was done .\tThe deal was done , he said .",
    "0\t103\t104\tShares rose 5 % on Monday .\tThe company 's shares fell on Tuesday .",
    "1\t105\t106\tThe café opened in 2003 .\tIn 2003 the cafe opened .",
]


def write_png(path: Path, color: tuple[int, int, int], size: tuple[int, int] = (12, 9)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.new("RGB", size, color).save(path)
    return path


def write_mrpc(path: Path, rows: list[str] = MRPC_ROWS, bom: bool = True) -> Path:
    text = "\n".join([MRPC_HEADER, *rows]) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


# -- images ------------------------------------------------------------------------------------

def test_class_folders_give_sorted_classes_and_every_image(tmp_path):
    for name, color in (("dog", (200, 10, 10)), ("cat", (10, 200, 10))):
        for i in range(3):
            write_png(tmp_path / name / f"img{i}.png", color)
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    source = _images.scan_image_folder(tmp_path)
    assert source.layout == "class folders"
    assert source.class_names == ["cat", "dog"]
    assert len(source.items) == 6
    assert [source.labels[i] for i, p in enumerate(source.items) if p.parent.name == "dog"] == [1, 1, 1]


def test_pets_layout_takes_the_label_from_the_file_name(tmp_path):
    for name in ("Abyssinian_1.jpg", "Abyssinian_12.jpg", "american_bulldog_100.png", "american_bulldog_7.png"):
        write_png(tmp_path / name, (1, 2, 3))
    source = _images.scan_image_folder(tmp_path)
    assert source.layout == "file names (pets)"
    assert source.class_names == ["Abyssinian", "american_bulldog"]
    assert sorted(zip([p.name for p in source.items], source.labels)) == [
        ("Abyssinian_1.jpg", 0), ("Abyssinian_12.jpg", 0), ("american_bulldog_100.png", 1), ("american_bulldog_7.png", 1)]


def test_file_without_label_in_its_name_says_how_to_fix(tmp_path):
    write_png(tmp_path / "Abyssinian_1.jpg", (1, 2, 3))
    write_png(tmp_path / "holiday.jpg", (1, 2, 3))
    with pytest.raises(ValueError, match="'holiday.jpg' has no label in its name.*one sub-folder per class"):
        _images.scan_image_folder(tmp_path)


@pytest.mark.parametrize("setup, message", [
    (lambda root: None, "holds no images"),
    (lambda root: write_png(root / "only" / "a.png", (0, 0, 0)), "single class"),
    (lambda root: (write_png(root / "a" / "x.png", (0, 0, 0)), write_png(root / "b_1.png", (0, 0, 0))), "ambiguous"),
])
def test_unusable_folders_are_refused_with_the_reason(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(ValueError, match=message):
        _images.scan_image_folder(tmp_path)


def test_missing_data_dir_is_named_as_missing_and_a_file_as_a_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere' does not exist \(working directory "):
        _images.scan_image_folder(tmp_path / "nowhere")
    (tmp_path / "photo.png").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"photo.png' is a file, not a folder\. Pass a folder"):
        _images.scan_image_folder(tmp_path / "photo.png")


def test_read_image_resizes_to_rgb_floats(tmp_path):
    path = write_png(tmp_path / "red.png", (255, 0, 0), size=(20, 7))
    image = _images.read_image(path, 16)
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32
    assert torch.allclose(image[0], torch.ones(16, 16)) and image[1:].abs().max() == 0


def test_image_dataset_normalises_and_labels(tmp_path):
    for name in ("a", "b"):
        write_png(tmp_path / name / "1.png", (255, 255, 255) if name == "a" else (0, 0, 0))
    source = _images.scan_image_folder(tmp_path)
    dataset = _images.ImageDataset(source, [0, 1], image_size=8)
    (white, label_a), (black, label_b) = dataset[0], dataset[1]
    assert (label_a, label_b) == (0, 1)
    assert torch.allclose(white, torch.ones(3, 8, 8)) and torch.allclose(black, -torch.ones(3, 8, 8))


def test_digits_load_offline_as_one_channel_images():
    source = _images.load_digits_source()
    assert len(source.items) == 1797 and source.class_names == [str(i) for i in range(10)]
    assert source.items[0].shape == (1, 8, 8) and 0.0 <= float(source.items[0].min()) <= float(source.items[0].max()) <= 1.0


def test_stratified_split_holds_out_each_class_reproducibly():
    labels = [0] * 10 + [1] * 5 + [2]
    train, held_out = _images.stratified_split(labels, 0.2, seed=7)
    assert sorted(train + held_out) == list(range(16))
    assert [labels[i] for i in held_out].count(0) == 2 and [labels[i] for i in held_out].count(1) == 1
    assert 15 in train  # a class with one image is kept for training
    assert _images.stratified_split(labels, 0.2, seed=7) == (train, held_out)
    with pytest.raises(ValueError, match="--validation_split 1.5"):
        _images.stratified_split(labels, 1.5, seed=7)


# -- text ---------------------------------------------------------------------------------------

def test_glue_tsv_with_a_byte_order_mark_is_read(tmp_path):
    examples = _text.read_glue_tsv(write_mrpc(tmp_path / "dev.tsv"), "mrpc")
    assert examples.labels == ["1", "0", "1"]
    assert examples.first[0] == 'He said the deal "was done .'  # an unbalanced quote stays text
    assert examples.second[2] == "In 2003 the cafe opened ."
    assert examples.first[2] == "The café opened in 2003 ."


def test_glue_tsv_without_bom_reads_the_same(tmp_path):
    with_bom = _text.read_glue_tsv(write_mrpc(tmp_path / "a.tsv"), "MRPC")
    without = _text.read_glue_tsv(write_mrpc(tmp_path / "b.tsv", bom=False), "mrpc")
    assert with_bom == without


def test_glue_tsv_errors_name_the_column_and_the_task(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("sentence\tlabel\nhello\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no column '#1 String'.*columns found: 'sentence', 'label'"):
        _text.read_glue_tsv(path, "mrpc")
    with pytest.raises(ValueError, match="--task_name 'cola' is not one this example reads"):
        _text.read_glue_tsv(path, "cola")


def test_csv_and_json_lines_find_sentence_pairs(tmp_path):
    rows = [{"sentence1": "a b", "sentence2": "c, d", "label": "yes"}, {"sentence1": "e", "sentence2": "f", "label": "no"}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    (tmp_path / "t.csv").write_text('\ufefflabel,sentence1,sentence2\nyes,a b,"c, d"\nno,e,f\n', encoding="utf-8")
    from_json, from_csv = _text.read_table(tmp_path / "t.jsonl"), _text.read_table(tmp_path / "t.csv")
    assert from_json == from_csv
    assert from_json.first == ["a b", "e"] and from_json.second == ["c, d", "f"] and from_json.labels == ["yes", "no"]


def test_single_text_column_and_the_first_column_fallback(tmp_path):
    (tmp_path / "s.csv").write_text("text,label\ngood film,1\nbad film,0\n", encoding="utf-8")
    single = _text.read_table(tmp_path / "s.csv")
    assert single.first == ["good film", "bad film"] and single.second is None
    (tmp_path / "o.csv").write_text("review,label\nfine,1\n", encoding="utf-8")
    assert _text.read_table(tmp_path / "o.csv").first == ["fine"]
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        _text.read_table(tmp_path / "x.txt")


def test_labels_map_to_indices_and_unknown_labels_are_refused():
    names = _text.label_names(None, ["pos", "neg", "pos"])
    assert names == ["neg", "pos"]
    assert _text.label_indices(["pos", "neg"], names, "train") == [1, 0]
    assert _text.label_names("mrpc", []) == ["0", "1"]
    with pytest.raises(ValueError, match=r"validation has labels \['meh'\]"):
        _text.label_indices(["meh"], names, "validation")


def test_word_vocabulary_tokenizer_knows_the_training_words(tmp_path):
    texts = ["The café opened .", "Shares rose 5 % on Monday ."]
    tokenizer = _text.word_tokenizer(texts, tmp_path / "vocab", max_size=100)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("The cafe opened", "shares rose")["input_ids"])
    assert tokens == ["[CLS]", "the", "cafe", "opened", "[SEP]", "shares", "rose", "[SEP]"]
    assert tokenizer.convert_ids_to_tokens(tokenizer("zebra")["input_ids"])[1] == "[UNK]"
    assert _text.build_word_vocab(texts * 3 + ["rare"], max_size=2)[5:] == sorted(["."] + ["the"])  # most frequent


def test_small_bert_classifies_a_batch():
    model = _text.small_bert(vocab_size=50, num_labels=3, max_positions=32, hidden_size=32, layers=1)
    out = model(input_ids=torch.randint(0, 50, (2, 10)), labels=torch.tensor([0, 2]))
    assert out.logits.shape == (2, 3) and out.loss.ndim == 0


def test_unknown_model_alias_package_or_directory_says_the_fix(monkeypatch, tmp_path):
    monkeypatch.setitem(_text.MODEL_ALIASES, "nosuch", "braeburn_no_such_package")
    with pytest.raises(SystemExit, match=r"pip install 'braeburn\[mrpc\]'"):
        _text.resolve_model_path("nosuch")
    assert _text.resolve_model_path(str(tmp_path)) == str(tmp_path)
    with pytest.raises(SystemExit, match=r"could not be loaded \(no such folder\)"):
        _text.load_pretrained(str(tmp_path / "missing"), num_labels=2)  # a path: never looked up on the hub


# -- metrics ------------------------------------------------------------------------------------

def test_binary_and_macro_f1():
    binary = _metrics.classification_metrics([1, 1, 0, 0], [1, 0, 0, 0], num_classes=2)
    assert binary == {"accuracy": 0.75, "f1": pytest.approx(2 / 3)}
    macro = _metrics.classification_metrics([0, 1, 2], [0, 1, 1], num_classes=3)
    assert macro["accuracy"] == pytest.approx(2 / 3) and macro["f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_accuracy_and_f1_are_scikit_learns_numbers_to_the_bit():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = numpy.random.default_rng(0)
    for trial in range(300):
        classes, size = int(rng.integers(2, 6)), int(rng.integers(1, 40))
        labels = rng.integers(0, classes, size).tolist()
        predictions = [0] * size if trial % 7 == 0 else rng.integers(0, classes, size).tolist()  # a class never predicted
        average = "binary" if classes == 2 else "macro"
        expected = {"accuracy": float(metrics.accuracy_score(labels, predictions)),
                    "f1": float(metrics.f1_score(labels, predictions, average=average, labels=list(range(classes)),
                                                 zero_division=0))}
        assert _metrics.classification_metrics(labels, predictions, classes) == expected, (labels, predictions)


def test_accuracy_and_f1_leave_scikit_learn_unimported():
    """Importing scikit-learn costs one to two seconds of a short run's process: the text example does without it."""
    code = ("import sys; sys.path.insert(0, 'examples'); import _metrics; "
            "_metrics.classification_metrics([0, 1, 1], [0, 1, 0], 2); print('sklearn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLES.parent, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_report_and_confusion_matrix_png(tmp_path):
    labels, predictions = [0, 0, 1, 2, 2], [0, 1, 1, 2, 0]
    report = _metrics.per_class_report(labels, predictions, ["cat", "dog", "owl"])
    assert all(name in report for name in ("cat", "dog", "owl", "precision", "recall", "f1-score"))
    matrix = _metrics.confusion(labels, predictions, 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]
    picture = _metrics.save_confusion_matrix_png(matrix, ["cat", "dog", "owl"], tmp_path / "out" / "cm.png", "t")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert PIL.open(picture).size[0] >= 400


def test_a_hub_name_loads_from_the_hub_when_online_and_a_folder_never_does(tmp_path, monkeypatch):
    """The text example refused run_glue's own model names even online. A hub name now goes to the hub
    (local_files_only=False) unless HF_HUB_OFFLINE is set; a local folder is always read offline."""
    transformers = pytest.importorskip("transformers")
    asked = []

    def fake(name, **options):
        asked.append((name, options["local_files_only"]))
        raise OSError("no network here")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(SystemExit, match="from the Hugging Face hub .*cannot reach the hub"):
        _text.load_pretrained("google-bert/bert-base-cased", 2)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="offline \\(HF_HUB_OFFLINE is set"):
        _text.load_pretrained("google-bert/bert-base-cased", 2)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(SystemExit, match="from its folder"):
        _text.load_pretrained(str(tmp_path), 2)
    assert asked == [("google-bert/bert-base-cased", False), ("google-bert/bert-base-cased", True),
                     (str(tmp_path), True)]
