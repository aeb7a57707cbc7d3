"""Image data for the image example: class folders, the Oxford-IIIT pets layout, or scikit-learn's digits.

Images are read with Pillow and turned into tensors with plain torch ops (no torchvision needed).
Every source gives the same thing: a list of (item, label index) pairs and the sorted class names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch.utils.data import Dataset

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
# Oxford-IIIT pets: "Abyssinian_12.jpg" -> "Abyssinian", "american_bulldog_100.jpg" -> "american_bulldog".
PETS_NAME = re.compile(r"^(?P<label>.+)_\d+$")


@dataclass
class ImageSource:
    """Where the examples come from; ``items`` are file paths or ready tensors."""

    items: list
    labels: list[int]
    class_names: list[str]
    layout: str  # "class folders", "file names (pets)" or "sklearn digits"


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def _from_class_folders(folders: list[Path]) -> ImageSource:
    folders = sorted(folders, key=lambda folder: folder.name)
    items, labels = [], []
    for index, folder in enumerate(folders):
        for path in sorted(p for p in folder.rglob("*") if _is_image(p)):
            items.append(path)
            labels.append(index)
    return ImageSource(items, labels, [folder.name for folder in folders], "class folders")


def label_from_file_name(path: Path) -> str:
    """The pets-layout label: the file name without its trailing ``_<number>`` and suffix."""
    match = PETS_NAME.match(path.stem)
    if match is None:
        raise ValueError(f"image file {path.name!r} has no label in its name: in a folder of images without "
                         "class sub-folders every name must look like '<label>_<number>.<ext>' (the "
                         "Oxford-IIIT pets layout, e.g. 'Abyssinian_12.jpg'). Rename it, or put the images "
                         "in one sub-folder per class.")
    return match.group("label")


def _from_file_names(files: list[Path]) -> ImageSource:
    names = [label_from_file_name(path) for path in files]
    class_names = sorted(set(names))
    index = {name: i for i, name in enumerate(class_names)}
    return ImageSource(list(files), [index[name] for name in names], class_names, "file names (pets)")


def scan_image_folder(data_dir: str | Path) -> ImageSource:
    """Class sub-folders if ``data_dir`` has any with images, else labels from the file names."""
    root = Path(data_dir)
    if not root.is_dir():
        why = "is a file, not a folder" if root.exists() else f"does not exist (working directory {Path.cwd()})"
        raise FileNotFoundError(f"--data_dir {str(data_dir)!r} {why}. Pass a folder holding one sub-folder of images "
                                "per class, or images named '<label>_<number>.jpg'.")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and any(_is_image(f) for f in p.rglob("*")))
    files = sorted(p for p in root.iterdir() if _is_image(p))
    if folders and files:
        raise ValueError(f"--data_dir {str(root)!r} holds both class sub-folders ({folders[0].name}, ...) and loose "
                         f"images ({files[0].name}, ...): the layout is ambiguous. Move the loose images into "
                         "their class folders, or point --data_dir at a folder with only one of the two.")
    if folders:
        source = _from_class_folders(folders)
    elif files:
        source = _from_file_names(files)
    else:
        raise ValueError(f"--data_dir {str(root)!r} holds no images ({', '.join(IMAGE_SUFFIXES)}), neither in "
                         "class sub-folders nor directly. Point it at the folder that contains them.")
    if len(source.class_names) < 2:
        raise ValueError(f"--data_dir {str(root)!r} has a single class ({source.class_names[0]!r}): "
                         "a classifier needs at least two. Add images of another class.")
    return source


def load_digits_source() -> ImageSource:
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes); no download."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Pixel values are 0..16; scale to 0..1 and keep one channel.
    images = torch.tensor(digits.images, dtype=torch.float32).div_(16.0).unsqueeze(1)
    return ImageSource(list(images), [int(t) for t in digits.target], [str(n) for n in digits.target_names],
                       "sklearn digits")


def stratified_split(labels: Sequence[int], eval_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices (train, eval) holding out ``eval_fraction`` of every class, reproducibly for ``seed``."""
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"--validation_split {eval_fraction} must lie strictly between 0 and 1 "
                         "(the fraction of images held out for evaluation), e.g. 0.2.")
    generator = torch.Generator().manual_seed(seed)
    by_class: dict[int, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    train, held_out = [], []
    for members in by_class.values():
        order = [members[i] for i in torch.randperm(len(members), generator=generator).tolist()]
        count = max(1, round(len(members) * eval_fraction)) if len(members) > 1 else 0
        held_out += order[:count]
        train += order[count:]
    return sorted(train), sorted(held_out)


def read_image(path: Path, size: int) -> torch.Tensor:
    """An RGB image as a float tensor (3, size, size) in 0..1."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB").resize((size, size), Image.BILINEAR)
        data = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
    return data.view(size, size, 3).permute(2, 0, 1).float().div_(255.0)


def random_horizontal_flip(image: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return image.flip(-1) if torch.rand((), generator=generator) < 0.5 else image


def normalize(image: torch.Tensor) -> torch.Tensor:
    """Centre 0..1 pixels on 0 with unit-ish spread: the same for every source, so no dataset statistics needed."""
    return (image - 0.5) / 0.5


class ImageDataset(Dataset):
    """(image tensor, label) pairs; paths are decoded lazily so large folders need little memory."""

    def __init__(self, source: ImageSource, indices: Sequence[int], image_size: int,
                 augment: Callable[[torch.Tensor], torch.Tensor] | None = None):
        # Images already in memory (the digits) are normalized once here, not again in every epoch.
        self.items = [normalize(item) if isinstance(item, torch.Tensor) else item
                      for item in (source.items[i] for i in indices)]
        self.labels = [source.labels[i] for i in indices]
        self.image_size = image_size
        self.augment = augment

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        item = self.items[index]
        image = item if isinstance(item, torch.Tensor) else normalize(read_image(item, self.image_size))
        if self.augment is not None:
            image = self.augment(image)
        return image, self.labels[index]
