"""Image-folder datasets (Intel layout): find the splits, decode in parallel, write float32 .npy arrays.

Features are the resized RGB pixels in height x width x channel order, scaled to [0, 1],
optionally standardized per channel with statistics of the training split.
"""

import os
import sys
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap
from PIL import Image, ImageOps
from tqdm import tqdm

from mpinet import MpinetError
from mpinet.datasets import dataset, prepared
from mpinet.datasets.fetch import is_metadata
from mpinet.datasets.split import stratified_split
from mpinet.files import staging_dir
from mpinet.layout import SYNTHETIC_MARKER

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
SPLIT_NAMES = {"train": ("seg_train", "train"), "test": ("seg_test", "test"), "pred": ("seg_pred", "pred")}


def find_splits(root: str | Path) -> dict[str, Path | None]:
    """The train, test and (unlabelled) pred folders under root, e.g. seg_train/seg_train/<class>/*.jpg.

    A folder qualifies as a labelled split when its subfolders hold images, and as pred
    when it holds images itself; the deepest such folder with a matching name wins, so
    Kaggle's doubled seg_train/seg_train nesting and a plain train/<class> both work.
    """
    root = Path(root)
    found: dict[str, Path | None] = {"train": None, "test": None, "pred": None}
    for d, subdirs, files in sorted(os.walk(root)):
        subdirs[:] = [s for s in subdirs if not is_metadata(s)]  # never descend into __MACOSX/ or .hidden/
        files = [f for f in files if not is_metadata(f)]
        here = Path(d)
        for split, names in SPLIT_NAMES.items():
            if here.name.lower() not in names:
                continue
            if split == "pred":
                ok = any(f.lower().endswith(IMAGE_SUFFIXES) for f in files)
            else:
                ok = any(_has_images(here / s) for s in subdirs)
            if ok:
                found[split] = here
    if found["train"] is None:
        raise MpinetError(f"{root}: no training images found; expected seg_train/<class>/*.jpg or train/<class>/*.jpg")
    return found


def list_labelled(split_dir: Path) -> dict[str, list[Path]]:
    """Class name -> sorted image files; an empty class folder is an error."""
    classes = {}
    for sub in sorted(p for p in split_dir.iterdir() if p.is_dir() and not is_metadata(p.name)):
        files = sorted(f for f in sub.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and not is_metadata(f.name))
        if not files:
            raise MpinetError(f"{sub}: class folder holds no images (expected *.jpg files)")
        classes[sub.name] = files
    return classes


def prepare(raw_dir: str | Path, out_dir: str | Path, options: dict, source: str = "", workers=None) -> dict:
    """The dataset directory out_dir from the image folders in raw_dir (mpinet.datasets.prepare's entry)."""
    return prepare_images(
        raw_dir,
        out_dir,
        image_size=options["image_size"],
        standardize=options["standardize_inputs"],
        test_fraction=options["test_fraction"],
        seed=options["split_seed"],
        skip_bad_images=options["skip_bad_images"],
        include_pred=options["include_pred"],
        workers=workers,
        source=source,
    )


def prepare_images(
    root: str | Path,
    out_dir: str | Path,
    image_size: int = 150,
    standardize: bool = False,
    test_fraction: float = 0.3,
    seed: int = 0,
    skip_bad_images: bool = False,
    include_pred: bool = False,
    workers: int | None = None,
    source: str = "",
) -> dict:
    """Decode an image-folder dataset into a dataset directory; returns its summary."""
    if image_size < 1:
        raise MpinetError(f"image_size must be a positive integer, got {image_size}")
    splits = find_splits(root)
    classes, jobs, test_split = _labelled_splits(splits, test_fraction, seed)
    if include_pred and splits["pred"] is not None:
        pred = sorted(
            f for f in splits["pred"].iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and not is_metadata(f.name)
        )
        jobs.append(("pred", pred, None))
    with staging_dir(out_dir) as staging:
        skipped: list[dict] = []
        counts = _decode_splits(root, jobs, classes, staging, image_size, skip_bad_images, skipped, workers)
        channel_stats = _standardize_splits(staging, [split for split, *_ in jobs]) if standardize else None
        train_x = np.load(staging / "train_x.npy", mmap_mode="r")
        summary = {
            "format": "images",
            "source": source or str(root),
            "classes": classes,
            "counts": counts,
            "shapes": {s: list(np.load(staging / f"{s}_x.npy", mmap_mode="r").shape) for s, *_ in jobs},
            "dtype": "float32",
            "image_size": image_size,
            "layout": "height x width x RGB, flattened",
            "standardization": channel_stats,
            "values": dataset.value_stats(train_x),
            "test_split": test_split,
            "skipped_files": skipped,
            "duplicates_dropped": 0,
            "synthetic": (Path(root) / SYNTHETIC_MARKER).exists(),
        }
        del train_x
        for extra in ("train_files.txt", "test_files.txt", "pred_x.npy", "pred_files.txt"):  # before the summary
            if (staging / extra).exists():
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                os.replace(staging / extra, Path(out_dir) / extra)
        prepared.write(out_dir, staging, classes, summary)
    return summary


def _labelled_splits(splits: dict, test_fraction: float, seed: int) -> tuple[list[str], list[tuple], str]:
    """The classes, the (split, files, labels) of train and test, and where the test split came from:
    the test folder, or a seeded stratified split of the training folder when there is none."""
    train_cls = list_labelled(splits["train"])
    classes = sorted(train_cls)
    if len(classes) < 2:
        raise MpinetError(f"{splits['train']}: only one class folder ({classes[0]}); need at least 2")
    train_files, train_y = _flatten(train_cls, classes)
    if splits["test"] is not None:
        test_cls = list_labelled(splits["test"])
        if sorted(test_cls) != classes:
            only_train = sorted(set(classes) - set(test_cls))
            only_test = sorted(set(test_cls) - set(classes))
            raise MpinetError(
                f"{splits['test']}: test classes differ from training classes "
                f"(only in train: {only_train or 'none'}; only in test: {only_test or 'none'})"
            )
        test_files, test_y = _flatten(test_cls, classes)
        test_split = str(splits["test"])
    else:
        tr, te = stratified_split(train_y, test_fraction, seed)
        test_files, test_y = [train_files[i] for i in te], train_y[te]
        train_files, train_y = [train_files[i] for i in tr], train_y[tr]
        test_split = "made from the training folder"
    # Training rows are stored in a seeded random order (contiguous batches are then random mixtures);
    # train_files.txt says which file each row came from.
    perm = np.random.default_rng([seed, 1]).permutation(len(train_files))
    train_files, train_y = [train_files[i] for i in perm], train_y[perm]
    return classes, [("train", train_files, train_y), ("test", test_files, test_y)], test_split


def _decode_splits(root, jobs, classes, staging: Path, size, skip_bad, skipped, workers) -> dict:
    """Each split's <split>_x.npy, _y.npy and _files.txt in staging; returns the class counts."""
    dim = size * size * 3
    counts = {}
    for split, files, y in jobs:
        x_path = staging / f"{split}_x.npy"
        kept = _decode_all(files, x_path, size, dim, skip_bad, skipped, workers, split)
        (staging / f"{split}_files.txt").write_text("".join(f"{files[i]}\n" for i in kept))
        if y is not None:
            y = y[kept]
            np.save(staging / f"{split}_y.npy", y)
            counts[split] = {c: int((y == i).sum()) for i, c in enumerate(classes)}
        if y is not None and len(y) == 0:
            raise MpinetError(f"{root}: every {split} image was skipped as unreadable")
    return counts


def _standardize_splits(staging: Path, splits: list[str]) -> dict:
    """Standardize every split per channel with the training split's statistics; returns them."""
    mean, std = _channel_stats(np.load(staging / "train_x.npy", mmap_mode="r"))
    for split in splits:
        _standardize_inplace(np.load(staging / f"{split}_x.npy", mmap_mode="r+"), mean, std)
    return {"mean": mean.tolist(), "std": std.tolist(), "from": "training split"}


def load_image(path: Path, size: int) -> np.ndarray:
    """uint8[size, size, 3]: the file decoded by Pillow, turned upright, converted to 8-bit RGB and
    resized (bilinear) if needed."""
    with Image.open(path) as img:
        img = to_rgb(ImageOps.exif_transpose(img), path)
        if img.size != (size, size):
            img = img.resize((size, size), Image.Resampling.BILINEAR)
        return np.asarray(img, dtype=np.uint8)


def to_rgb(img: Image.Image, path) -> Image.Image:
    """8-bit RGB as a viewer shows the picture. Pillow's plain convert("RGB") would clip 16-bit
    pixels to 255 (a white image), drop transparency (showing whatever colour transparent pixels
    store) and guess at 32-bit values; here 16-bit is scaled, transparency is laid on white, and
    integer or float pixels of unknown range are refused."""
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N"):
        gray = np.asarray(img, dtype=np.uint16)
        return Image.fromarray(((gray.astype(np.uint32) + 128) // 257).astype(np.uint8), "L").convert("RGB")
    if img.mode in ("I", "F"):
        raise MpinetError(
            f"{path}: {img.mode} pixels (32-bit {'integer' if img.mode == 'I' else 'float'}) have no known "
            "range for 8-bit RGB; convert the image to 8 or 16 bits per channel"
        )
    if img.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


_OUTPUT = None  # a decode worker's (file descriptor, data offset, row bytes, row buffer) of the output .npy


def _open_output(path: str) -> None:
    global _OUTPUT
    x = np.load(path, mmap_mode="r")
    row = np.empty(x.shape[1], dtype=np.float32)
    _OUTPUT = (os.open(path, os.O_WRONLY), x.offset, row.nbytes, row)


def _decode_into(args) -> tuple[int, str | None]:
    """Decode one file and write its row of the output array (pwrite: no pickled pixels, no page faults)."""
    i, path, size = args
    try:
        pixels = load_image(path, size)
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError... for bad files
        return i, f"{type(e).__name__}: {e}"
    fd, offset, nbytes, row = _OUTPUT
    np.multiply(pixels.reshape(-1), np.float32(1 / 255), out=row)
    os.pwrite(fd, row, offset + i * nbytes)
    return i, None


def _decode_all(files, x_path, size, dim, skip_bad, skipped, workers, split) -> np.ndarray:
    """Decode files in order into a float32[n, dim] .npy; returns the indices of the files kept."""
    open_memmap(x_path, mode="w+", dtype=np.float32, shape=(len(files), dim)).flush()
    kept = []
    workers = workers or min(os.cpu_count() or 1, 8)
    jobs = ((i, f, size) for i, f in enumerate(files))
    with get_context("fork").Pool(workers, initializer=_open_output, initargs=(str(x_path),)) as pool:
        results = pool.imap(_decode_into, jobs, chunksize=16)
        bar = tqdm(results, total=len(files), desc=f"decode {split}", unit="img", file=sys.stderr, mininterval=2)
        for i, err in bar:
            if err is None:
                kept.append(i)
                continue
            if not skip_bad:
                raise MpinetError(f"{files[i]}: cannot decode image ({err}); set skip_bad_images to skip it")
            skipped.append({"file": str(files[i]), "error": err})
    if len(kept) < len(files):  # skipped files: keep only the decoded rows
        full = np.load(x_path, mmap_mode="r")
        small_path = x_path.with_name("small_" + x_path.name)
        small = open_memmap(small_path, mode="w+", dtype=np.float32, shape=(len(kept), dim))
        for j, i in enumerate(kept):
            small[j] = full[i]
        small.flush()
        del small, full
        os.replace(small_path, x_path)
    return np.array(kept, dtype=np.intp)


def _flatten(by_class: dict[str, list[Path]], classes: list[str]) -> tuple[list[Path], np.ndarray]:
    files, labels = [], []
    for i, c in enumerate(classes):
        files += by_class[c]
        labels += [i] * len(by_class[c])
    return files, np.array(labels, dtype=np.int64)


def _channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s, ss, n = np.zeros(3), np.zeros(3), 0
    for start in range(0, len(x), 512):
        c = np.asarray(x[start : start + 512], dtype=np.float64).reshape(-1, 3)
        s += c.sum(axis=0)
        ss += np.square(c).sum(axis=0)
        n += len(c)
    mean = s / n
    std = np.sqrt(np.maximum(ss / n - mean**2, 0))
    std[std == 0] = 1.0
    return mean, std


def _standardize_inplace(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> None:
    m, inv = mean.astype(np.float32), (1 / std).astype(np.float32)
    for start in range(0, len(x), 512):
        c = x[start : start + 512].reshape(-1, 3)
        c -= m
        c *= inv
    x.flush()


def _has_images(d: Path) -> bool:
    return d.is_dir() and any(f.suffix.lower() in IMAGE_SUFFIXES and not is_metadata(f.name) for f in d.iterdir())
