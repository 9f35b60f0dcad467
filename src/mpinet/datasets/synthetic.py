"""A synthetic stand-in for the Intel image-classification archive, for offline runs and tests.

Same layout and class names as Kaggle's archive (seg_train/seg_train/<class>/*.jpg,
seg_test/seg_test/<class>/*.jpg, seg_pred/seg_pred/*.jpg) and real JPEG files, but the
pictures are drawn: each class has its own palette and texture, with noise and jitter, so
a small network can learn them. A SYNTHETIC.txt marker travels with the data so every
summary and report labels it as synthetic.
"""

import io
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

from mpinet.files import atomic_path
from mpinet.layout import SYNTHETIC_MARKER

INTEL_CLASSES = ("buildings", "forest", "glacier", "mountain", "sea", "street")


def draw(cls: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """uint8[size, size, 3]: one picture of class cls (index into INTEL_CLASSES)."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    phase, freq = rng.uniform(0, 2 * np.pi), rng.uniform(3, 6)
    name = INTEL_CLASSES[cls]
    if name == "buildings":  # grey blocks with vertical edges
        tex = (np.sin(2 * np.pi * freq * xx + phase) > 0) * 0.5 + 0.3 * yy
        base = (0.55, 0.5, 0.5)
    elif name == "forest":  # dark green, blotchy
        tex = rng.random((size // 4 + 1, size // 4 + 1)).repeat(4, 0).repeat(4, 1)[:size, :size]
        base = (0.15, 0.45, 0.15)
    elif name == "glacier":  # bright, smooth vertical gradient
        tex = 0.6 + 0.4 * yy
        base = (0.75, 0.85, 0.95)
    elif name == "mountain":  # a peak: brighter inside a triangle
        tex = (yy > 0.3 + np.abs(xx - rng.uniform(0.3, 0.7)) * 1.2) * 0.6 + 0.2
        base = (0.5, 0.42, 0.35)
    elif name == "sea":  # blue horizontal waves
        tex = 0.5 + 0.4 * np.sin(2 * np.pi * freq * yy + phase)
        base = (0.1, 0.3, 0.75)
    else:  # street: diagonal lane markings on dark grey
        tex = (np.sin(2 * np.pi * freq * (xx + yy) + phase) > 0.6) * 0.7 + 0.15
        base = (0.3, 0.3, 0.32)
    brightness = rng.uniform(0.8, 1.2)
    img = tex[..., None] * np.array(base) * 1.6 * brightness
    img += rng.normal(0, 0.06, size=img.shape)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def make_archive(
    path: str | Path,
    train_per_class: int = 40,
    test_per_class: int = 10,
    pred_count: int = 6,
    size: int = 32,
    seed: int = 0,
) -> Path:
    """Write a zip archive in the Intel layout; returns its path."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(
            _entry(SYNTHETIC_MARKER),
            "Synthetic images drawn by mpinet.datasets.synthetic in the layout of Kaggle's "
            "puneet6060/intel-image-classification archive. Not real photographs.\n",
        )
        for split, per_class in (("seg_train", train_per_class), ("seg_test", test_per_class)):
            for c, name in enumerate(INTEL_CLASSES):
                for i in range(per_class):
                    z.writestr(_entry(f"{split}/{split}/{name}/{i:05d}.jpg"), _jpeg(draw(c, size, rng)))
        for i in range(pred_count):
            z.writestr(_entry(f"seg_pred/seg_pred/{i:05d}.jpg"), _jpeg(draw(int(rng.integers(6)), size, rng)))
    return path


def _jpeg(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _entry(name: str) -> zipfile.ZipInfo:
    """An archive member with a fixed time stamp, so the same settings give the same archive bytes."""
    return zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
