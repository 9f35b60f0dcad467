"""Image-folder datasets (Intel layout): find the splits, decode in parallel, write .npy arrays.

Features are the resized RGB pixels in height x width x channel order, scaled to [0, 1] and
optionally standardized per channel with statistics of the training split (mpinet.datasets.pixels):
stored as uint8 pixels that the trainer scales batch by batch, or, standardized, as float32 values.
"""

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap
from PIL import Image, ImageOps
from tqdm import tqdm

from mpinet import MpinetError
from mpinet.datasets import dataset, pixels, prepared
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
        files = [sub / name for name in sorted(_image_names(sub))]  # names sort as paths of one folder do
        if not files:
            raise MpinetError(f"{sub}: class folder holds no images (expected *.jpg files)")
        classes[sub.name] = files
    return classes


@dataclass(frozen=True)
class ImageOptions:
    """How an image-folder dataset is prepared (the dataset's config keys, named for the code)."""

    image_size: int = 150  # pictures resized to image_size x image_size RGB
    standardize: bool = False  # standardize_inputs: per-channel, training-split statistics
    test_fraction: float = 0.3  # held out when the data has no test folder
    seed: int = 0  # split_seed
    skip_bad_images: bool = False
    include_pred: bool = False

    @classmethod
    def of(cls, options: dict) -> "ImageOptions":
        """From a dataset's config keys; the keys not given take the schema's defaults (DEFAULTS)."""
        o = {**DEFAULTS, **options}
        return cls(
            o["image_size"],
            o["standardize_inputs"],
            o["test_fraction"],
            o["split_seed"],
            o["skip_bad_images"],
            o["include_pred"],
        )


# the schema's defaults of the keys prepare reads (a test ties them)
DEFAULTS = {
    "image_size": 150,
    "standardize_inputs": False,
    "test_fraction": 0.3,
    "split_seed": 0,
    "skip_bad_images": False,
    "include_pred": False,
}


def prepare(raw_dir: str | Path, out_dir: str | Path, options: dict, source: str = "", workers=None) -> dict:
    """The dataset directory out_dir from the image folders in raw_dir (mpinet.datasets.prepare's entry)."""
    return prepare_images(raw_dir, out_dir, ImageOptions.of(options), workers=workers, source=source)


def prepare_images(
    root: str | Path, out_dir: str | Path, options: ImageOptions = ImageOptions(), workers=None, source=""
) -> dict:
    """Decode an image-folder dataset into a dataset directory; returns its summary."""
    image_size, standardize, test_fraction, seed = (
        options.image_size,
        options.standardize,
        options.test_fraction,
        options.seed,
    )
    skip_bad_images, include_pred = options.skip_bad_images, options.include_pred
    if image_size < 1:
        raise MpinetError(f"image_size must be a positive integer, got {image_size}")
    splits = find_splits(root)
    classes, jobs, test_split = _labelled_splits(splits, test_fraction, seed)
    if include_pred and splits["pred"] is not None:
        jobs.append(("pred", [splits["pred"] / name for name in sorted(_image_names(splits["pred"]))], None))
    with staging_dir(out_dir) as staging:
        skipped: list[dict] = []
        # the rows are hashed in order as they are written, and the training pixels counted as decoded
        digest = dataset.ContentDigest()
        streamed = None if standardize else digest  # else the standardized values are, after
        decode = _decode_splits(root, jobs, classes, staging, image_size, skip_bad_images, skipped, workers, streamed)
        counts, (train_counts, n_pixels) = decode
        channel_stats, values = None, pixels.value_stats(train_counts, n_pixels)
        if standardize:
            channel_stats = pixels.channel_stats(train_counts, n_pixels)
            _standardize_splits(staging, [split for split, *_ in jobs], channel_stats, digest)
            values = dataset.value_stats(np.load(staging / "train_x.npy", mmap_mode="r"))
        summary = {
            "format": "images",
            "source": source or str(root),
            "classes": classes,
            "counts": counts,
            "shapes": {s: list(np.load(staging / f"{s}_x.npy", mmap_mode="r").shape) for s, *_ in jobs},
            "dtype": "float32" if standardize else "uint8",  # values, or pixels the trainer scales
            "image_size": image_size,
            "layout": "height x width x RGB, flattened",
            "standardization": channel_stats,
            "values": values,
            "test_split": test_split,
            "skipped_files": skipped,
            "duplicates_dropped": 0,
            "synthetic": (Path(root) / SYNTHETIC_MARKER).exists(),
        }
        for extra in ("train_files.txt", "test_files.txt", "pred_x.npy", "pred_files.txt"):  # before the summary
            if (staging / extra).exists():
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                os.replace(staging / extra, Path(out_dir) / extra)
        prepared.write(out_dir, staging, classes, summary, digest if not skipped else None)
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


def _decode_splits(root, jobs, classes, staging: Path, size, skip_bad, skipped, workers, digest) -> tuple:
    """Each split's <split>_x.npy, _y.npy and _files.txt in staging, the labelled ones fed to digest
    as they are written, by one pool of decode workers; returns the class counts, and the training
    pixels' channel counts and number."""
    dim = size * size * 3
    counts, train = {}, None
    # Not multiprocessing.Pool: its terminate() on an error kills workers that may hold the result
    # queue's lock, and the pool then hangs on exit. The executor cancels what has not started and
    # lets the running chunks finish.
    pool = ProcessPoolExecutor(workers or min(os.cpu_count() or 1, 8), mp_context=get_context("fork"))
    try:
        for split, files, y in jobs:
            x_path = staging / f"{split}_x.npy"
            streamed = digest if split in ("train", "test") else None
            try:
                kept, pixel_counts = _decode_all(pool, files, x_path, size, dim, skipped, split, streamed)
            except BrokenProcessPool:  # a worker killed (out of memory, a signal): stop, not wait forever
                raise MpinetError(f"{root}: a process decoding the {split} images died; out of memory?") from None
            train = (pixel_counts, len(kept) * size * size) if split == "train" else train
            (staging / f"{split}_files.txt").write_text("".join(f"{files[i]}\n" for i in kept))
            if y is not None:
                y = y[kept]
                np.save(staging / f"{split}_y.npy", y)
                if streamed is not None:
                    streamed.add_file(staging / f"{split}_y.npy")
                counts[split] = {c: int((y == i).sum()) for i, c in enumerate(classes)}
            if skip_bad and y is not None and len(y) == 0:
                raise MpinetError(f"{root}: every {split} image was skipped as unreadable")
    finally:
        pool.shutdown(cancel_futures=True)
    if skipped and not skip_bad:  # every split decoded first, so each bad file is named at once
        raise MpinetError(_undecodable(root, skipped))
    return counts, train


# undecodable files named in the error line; the rest only in the log
NAMED = 3


def _undecodable(root, bad: list[dict]) -> str:
    """The error for files that cannot be decoded: one by its path and error, several by their count
    and the first NAMED paths relative to root, each (with its error) printed to stderr, the log."""
    bad = sorted(bad, key=lambda b: b["file"])
    for b in bad:
        print(f"{b['file']}: cannot decode image ({b['error']})", file=sys.stderr)
    if len(bad) == 1:
        return f"{bad[0]['file']}: cannot decode image ({bad[0]['error']}); set skip_bad_images to skip it"
    names = [os.path.relpath(b["file"], root) for b in bad[:NAMED]]
    more = f" and {len(bad) - NAMED} more" if len(bad) > NAMED else ""
    return (
        f"{root}: {len(bad)} images cannot be decoded: {', '.join(names)}{more} (each with its error in the "
        "log); set skip_bad_images to skip them"
    )


def _standardize_splits(staging: Path, splits: list[str], stats: dict, digest) -> None:
    """Rewrite every split's pixels as float32 values standardized with the training split's channel
    statistics, feeding the labelled splits (and their labels) to digest in file order."""
    tiled = pixels.standardization(stats, np.load(staging / "train_x.npy", mmap_mode="r").shape[1])
    for split in splits:
        path = staging / f"{split}_x.npy"
        stored = np.load(path, mmap_mode="r")
        fed = digest if split in ("train", "test") else None
        new = path.with_name("std_" + path.name)
        offset = open_memmap(new, mode="w+", dtype=np.float32, shape=stored.shape).offset
        # blocks of rows computed in a buffer in the cache and written with write(): a memory map of
        # the new file would fault in every page first (2x slower)
        block = np.empty((max(1, (4 << 20) // max(1, 4 * stored.shape[1])), stored.shape[1]), np.float32)
        with open(new, "r+b") as f:
            if fed is not None:
                fed.start(path.name)
                fed.update(f.read(offset))  # the .npy header
            f.seek(offset)
            for start in range(0, len(stored), len(block)):
                rows = block[: len(stored[start : start + len(block)])]
                for i, row in enumerate(rows):  # row by row: each pass over a row stays in the L2 cache
                    pixels.to_values(stored[start + i], row, tiled)
                f.write(rows)
                if fed is not None:
                    fed.update(rows)
        del stored
        os.replace(new, path)
        if fed is not None:
            fed.add_file(staging / f"{split}_y.npy")


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


_OUTPUTS: dict[str, tuple[int, int, int]] = {}  # a decode worker's output .npy files: fd, data offset, row bytes
# files a decode task takes: their pixels are counted in one call and written in one pwrite (per
# image, numpy's call overhead was half of the counting's cost)
CHUNK = 16


def _output(path: str) -> tuple[int, int, int]:
    """This worker's (fd, data offset, row bytes) of an output .npy, opened once."""
    if path not in _OUTPUTS:
        x = np.load(path, mmap_mode="r")
        _OUTPUTS[path] = (os.open(path, os.O_WRONLY), x.offset, x.shape[1])
    return _OUTPUTS[path]


def _decode_chunk(args) -> tuple[int, list[str | None], np.ndarray | None]:
    """Decode consecutive files into their rows of the output array (pwrite: no pickled pixels, no
    page faults); returns the first's index, per file None or its error, and, if asked to count,
    the decoded pixels' channel counts."""
    start, paths, size, output, count = args
    fd, offset, nbytes = _output(output)
    rows = np.empty((len(paths), nbytes), np.uint8)
    errors: list[str | None] = []
    for j, path in enumerate(paths):
        try:
            rows[j] = load_image(path, size).reshape(-1)
            errors.append(None)
        except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError... for bad files
            errors.append(f"{type(e).__name__}: {e}")
    good = [j for j, e in enumerate(errors) if e is None]
    if len(good) == len(paths):
        os.pwrite(fd, rows, offset + start * nbytes)
    else:
        for j in good:
            os.pwrite(fd, rows[j], offset + (start + j) * nbytes)
    if not count:
        return start, errors, None
    return start, errors, pixels.channel_counts(rows[good]) if good else pixels.no_counts()


def _decode_all(pool, files, x_path, size, dim, skipped, split, digest) -> tuple:
    """Decode files in order into a uint8[n, dim] .npy, its bytes fed to digest (if any) as they
    come; returns the indices of the files kept and (training rows) their pixels' channel counts."""
    written = open_memmap(x_path, mode="w+", dtype=np.uint8, shape=(len(files), dim))
    written.flush()
    if digest is not None:
        digest.start(x_path.name)
        with open(x_path, "rb") as f:
            digest.update(f.read(written.offset))  # the .npy header
    kept, total = [], pixels.no_counts()
    jobs = ((s, files[s : s + CHUNK], size, str(x_path), split == "train") for s in range(0, len(files), CHUNK))
    with tqdm(total=len(files), desc=f"decode {split}", unit="img", file=sys.stderr, mininterval=2) as bar:
        for start, errors, got in pool.map(_decode_chunk, jobs):  # in file order
            if got is not None:
                pixels.add_counts(total, got)
            for i, error in enumerate(errors, start):
                if error is None:
                    kept.append(i)
                else:  # an error once every file is decoded, unless skip_bad_images (_decode_splits)
                    skipped.append({"file": str(files[i]), "error": error})
            if digest is not None:  # a skipped row's zeros too: the digest is dropped then (prepared.write)
                digest.update(written[start : start + len(errors)])
            bar.update(len(errors))
    del written
    if len(kept) < len(files):  # skipped files: keep only the decoded rows (the digest is dropped)
        full = np.load(x_path, mmap_mode="r")
        small_path = x_path.with_name("small_" + x_path.name)
        small = open_memmap(small_path, mode="w+", dtype=np.uint8, shape=(len(kept), dim))
        for j, i in enumerate(kept):
            small[j] = full[i]
        small.flush()
        del small, full
        os.replace(small_path, x_path)
    return np.array(kept, dtype=np.intp), total


def _flatten(by_class: dict[str, list[Path]], classes: list[str]) -> tuple[list[Path], np.ndarray]:
    files, labels = [], []
    for i, c in enumerate(classes):
        files += by_class[c]
        labels += [i] * len(by_class[c])
    return files, np.array(labels, dtype=np.int64)


def _image_names(d: Path) -> list[str]:
    """The image files' names in folder d, without metadata (is_metadata of a file name with an image
    suffix is its leading dot; checked here directly, 10x cheaper per file)."""
    with os.scandir(d) as entries:
        return [
            e.name
            for e in entries
            if not e.name.startswith(".") and os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES and e.is_file()
        ]


def _has_images(d: Path) -> bool:
    return d.is_dir() and bool(_image_names(d))
