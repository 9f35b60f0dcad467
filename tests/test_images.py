import json
import os

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from mpinet import MpinetError
from mpinet.datasets import dataset, images
from mpinet.datasets.fetch import fetch
from mpinet.datasets.images import ImageOptions, find_splits, prepare_images


def _folder(root, split, classes, n=3, size=20, seed=0):
    rng = np.random.default_rng(seed)
    for c in classes:
        d = root / split / c
        d.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 255, (size, size + 4, 3), dtype=np.uint8)).save(d / f"{i}.jpg")
    return root


@pytest.fixture
def raw(synthetic_zip, tmp_path):
    return fetch(str(synthetic_zip), tmp_path / "raw")


def test_kaggle_nesting_and_plain_layout_are_found(raw, tmp_path):
    s = find_splits(raw)
    assert s["train"] == raw / "seg_train" / "seg_train" and s["pred"] == raw / "seg_pred" / "seg_pred"
    plain = _folder(tmp_path / "plain", "train", ["a", "b"])
    _folder(plain, "test", ["a", "b"])
    assert find_splits(plain) == {"train": plain / "train", "test": plain / "test", "pred": None}


def test_resize_matches_pillow_bilinear(tmp_path):
    root = _folder(tmp_path / "r", "train", ["a", "b"], n=2, size=20)
    _folder(root, "test", ["a", "b"], n=1, size=20, seed=1)
    prepare_images(root, tmp_path / "ds", ImageOptions(image_size=8))
    a = dataset.load(tmp_path / "ds")
    files = (tmp_path / "ds" / "train_files.txt").read_text().splitlines()
    assert a.train_x.shape == (4, 8 * 8 * 3) and sorted(a.train_y.tolist()) == [0, 0, 1, 1]
    assert [a.classes[y] for y in a.train_y] == [f.split("/")[-2] for f in files]
    for row, f in zip(a.train_x, files):
        img = Image.open(f).convert("RGB").resize((8, 8), Image.Resampling.BILINEAR)
        assert (row == np.asarray(img).reshape(-1)).all()  # uint8: the resized pixels themselves


def test_missing_test_split_is_made_stratified_and_seeded(tmp_path):
    root = _folder(tmp_path / "r", "train", ["a", "b", "c"], n=10)
    s1 = prepare_images(root, tmp_path / "d1", ImageOptions(image_size=8, test_fraction=0.3, seed=4))
    prepare_images(root, tmp_path / "d2", ImageOptions(image_size=8, test_fraction=0.3, seed=4))
    assert s1["counts"]["test"] == {"a": 3, "b": 3, "c": 3}
    assert s1["test_split"] == "made from the training folder"
    assert np.array_equal(dataset.load(tmp_path / "d1").test_x, dataset.load(tmp_path / "d2").test_x)


def test_per_channel_standardization_uses_training_statistics(raw, tmp_path):
    s = prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24, standardize=True))
    a = dataset.load(tmp_path / "ds")
    assert a.train_x.dtype == np.float32  # standardized values are stored: reads stay copies
    values = np.asarray(a.train_x).reshape(-1, 3)
    assert np.allclose(values.mean(axis=0), 0, atol=1e-4) and np.allclose(values.std(axis=0), 1, atol=1e-3)
    assert len(s["standardization"]["mean"]) == 3
    # the operations mpinet 0.6 applied: scaled in float32, then standardized per channel in float32
    prepare_images(raw, tmp_path / "plain", ImageOptions(image_size=24))
    plain = dataset.load(tmp_path / "plain")
    old = np.multiply(plain.test_x, np.float32(1 / 255)).reshape(-1, 3)
    old -= np.float32(s["standardization"]["mean"])
    old *= (1 / np.array(s["standardization"]["std"])).astype(np.float32)
    assert np.asarray(a.test_x).tobytes() == old.tobytes()
    # the channel statistics are those of the training pixels as values
    train = np.multiply(plain.train_x, np.float32(1 / 255)).reshape(-1, 3).astype(np.float64)
    assert np.allclose(s["standardization"]["mean"], train.mean(axis=0), rtol=1e-12)
    assert np.allclose(s["standardization"]["std"], train.std(axis=0), rtol=1e-9)
    summary = json.loads((tmp_path / "ds" / "summary.json").read_text())
    assert summary["fingerprint"] == dataset.fingerprint(tmp_path / "ds")  # hashed as the values were written
    assert summary["values"] == dataset.value_stats(a.train_x)


def test_pred_images_are_optional_extra_output(raw, tmp_path):
    prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24, include_pred=True))
    assert np.load(tmp_path / "ds" / "pred_x.npy").shape == (4, 24 * 24 * 3)
    assert len((tmp_path / "ds" / "pred_files.txt").read_text().splitlines()) == 4


def test_corrupt_jpeg_stops_with_its_name_and_leaves_no_output(raw, tmp_path):
    bad = raw / "seg_train" / "seg_train" / "sea" / "00002.jpg"
    bad.write_bytes(bad.read_bytes()[:200])
    with pytest.raises(MpinetError, match=r"sea/00002.jpg: cannot decode image .*skip_bad_images"):
        prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24))
    assert not (tmp_path / "ds").exists() and not (tmp_path / ".ds.partial").exists()


def test_every_corrupt_image_is_named_at_once_the_first_few_in_the_line_the_rest_in_the_log(raw, tmp_path, capsys):
    train, test = raw / "seg_train" / "seg_train", raw / "seg_test" / "seg_test"
    bad = [test / "sea" / "00002.jpg", train / "forest" / "00001.jpg", train / "forest" / "00003.jpg"]
    bad.append(train / "sea" / "00000.jpg")
    for f in bad[:2]:  # one in each split: both named, relative to the dataset's folder
        f.write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(MpinetError) as refused:
        prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24))
    assert str(refused.value) == (
        f"{raw}: 2 images cannot be decoded: seg_test/seg_test/sea/00002.jpg, seg_train/seg_train/forest/00001.jpg "
        "(each with its error in the log); set skip_bad_images to skip them"
    )
    assert not (tmp_path / "ds").exists() and not (tmp_path / ".ds.partial").exists()
    for f in bad[2:]:  # four: the first three named, the fourth counted and in the log (stderr) only
        f.write_bytes(b"\xff\xd8 not really a jpeg")
    capsys.readouterr()
    with pytest.raises(MpinetError, match=r": 4 images cannot be decoded: .*forest/00003.jpg and 1 more \(each"):
        prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24))
    logged = capsys.readouterr().err
    assert all(f"{f}: cannot decode image (UnidentifiedImageError" in logged for f in bad)


def _killed(args):
    os._exit(9)


@pytest.mark.timeout(120)
def test_a_decode_worker_that_dies_stops_the_preparation_with_a_clear_error(raw, tmp_path, monkeypatch):
    monkeypatch.setattr(images, "_decode_chunk", _killed)  # the forked workers see it too
    with pytest.raises(MpinetError, match=r"a process decoding the train images died"):
        prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24), workers=2)
    assert not (tmp_path / "ds").exists() and not (tmp_path / ".ds.partial").exists()


def test_skip_bad_images_lists_every_skipped_file(raw, tmp_path):
    bad = raw / "seg_train" / "seg_train" / "sea" / "00002.jpg"
    bad.write_bytes(b"not a jpeg")
    s = prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24, skip_bad_images=True))
    assert [x["file"] for x in s["skipped_files"]] == [str(bad)]
    assert s["counts"]["train"]["sea"] == 5 and s["shapes"]["train"] == [35, 24 * 24 * 3]
    a = dataset.load(tmp_path / "ds")
    assert len(a.train_x) == len(a.train_y) == 35
    assert s["values"] == dataset.value_stats(a.train_x)  # the skipped file's chunk counted without it


def test_empty_class_folder_is_an_error(tmp_path):
    root = _folder(tmp_path / "r", "train", ["a", "b"])
    (root / "train" / "empty").mkdir()
    with pytest.raises(MpinetError, match=r"train/empty: class folder holds no images"):
        prepare_images(root, tmp_path / "ds", ImageOptions(image_size=8))


def test_single_class_dataset_is_an_error(tmp_path):
    root = _folder(tmp_path / "r", "train", ["only"])
    with pytest.raises(MpinetError, match=r"only one class folder \(only\); need at least 2"):
        prepare_images(root, tmp_path / "ds", ImageOptions(image_size=8))


def test_train_and_test_class_sets_must_match(tmp_path):
    root = _folder(tmp_path / "r", "train", ["a", "b"])
    _folder(root, "test", ["a", "c"])
    with pytest.raises(MpinetError, match=r"test classes differ .*only in train: \['b'\]; only in test: \['c'\]"):
        prepare_images(root, tmp_path / "ds", ImageOptions(image_size=8))
    assert not (tmp_path / "ds").exists()


def test_folder_without_images_says_what_layout_is_expected(tmp_path):
    (tmp_path / "r").mkdir()
    with pytest.raises(MpinetError, match=r"no training images found; expected seg_train/<class>/\*.jpg"):
        prepare_images(tmp_path / "r", tmp_path / "ds")


def test_pixel_formats_become_the_rgb_a_viewer_shows(tmp_path):
    from mpinet.datasets.images import load_image

    deep = tmp_path / "deep.png"  # 16-bit grey: Pillow's plain RGB conversion clips it to white
    Image.fromarray(np.full((4, 4), 32896, dtype=np.uint16)).save(deep)
    assert Image.open(deep).mode.startswith("I")
    assert (load_image(deep, 4) == 128).all()

    clear = tmp_path / "clear.png"  # fully transparent pixels that store red
    Image.new("RGBA", (4, 4), (255, 0, 0, 0)).save(clear)
    assert (load_image(clear, 4) == 255).all()  # laid on white, as a viewer shows it

    turned = tmp_path / "turned.jpg"  # stored 8 wide x 4 high, EXIF says: rotate to 4 x 8
    img = Image.new("RGB", (8, 4), (0, 0, 0))
    img.paste((255, 255, 255), (0, 0, 4, 4))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    img.save(turned, exif=exif, quality=95)
    upright = load_image(turned, 8)  # resized square, but the white half must now be on top
    assert upright[:3].mean() > 200 and upright[5:].mean() < 50

    floats = tmp_path / "floats.tif"
    Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32)).save(floats)
    with pytest.raises(MpinetError, match="floats.tif: F pixels .* have no known range"):
        load_image(floats, 4)


def test_pixels_stored_as_uint8_read_as_the_float32_values_image_preparation_wrote_before():
    pixels = np.arange(256, dtype=np.uint8)
    as_float32 = np.empty(256, np.float32)
    np.multiply(pixels, np.float32(1 / 255), out=as_float32)  # 0.6.0's stored form, written while decoding
    assert dataset.features(pixels, np.empty(256, np.float32)).tobytes() == as_float32.tobytes()
    assert (dataset.features(pixels, np.empty(256)) == as_float32.astype(np.float64)).all()
    rgb = pixels.repeat(3).reshape(4, 192)  # every value in every channel
    stats = dataset.value_stats(rgb)
    float_stats = dataset.value_stats(dataset.features(rgb, np.empty(rgb.shape, np.float32)))
    assert stats["min"] == float_stats["min"] == 0 and stats["max"] == float_stats["max"] == 1.0
    assert np.isclose(stats["mean"], float_stats["mean"], rtol=1e-12) and np.isclose(stats["std"], float_stats["std"])


@pytest.mark.mpi
@pytest.mark.parametrize(
    "ranks,extra",
    [
        (None, ("--shuffle", "samples")),
        (None, ("--shuffle", "batches", "--dtype", "float64")),
        (None, ("--train-samples", 30, "--shuffle", "batches")),
        (2, ("--algorithm", "sharded")),
        (2, ("--algorithm", "allgather", "--dtype", "float64", "--shuffle", "batches")),
        (2, ("--algorithm", "node", "--shuffle", "batches")),  # its columns of the global batch, a view
        (3, ("--algorithm", "node", "--dtype", "float64", "--train-samples", 30)),  # gathered columns
    ],
)
def test_training_on_uint8_pixels_gives_the_weights_of_their_float32_values_bit_for_bit(tmp_path, ranks, extra):
    """Every way the trainer reads rows (gathered, as a batch view, a subset, the sharded global batch,
    the node design's columns of it),
    in both dtypes: the stored form changes no number."""
    from conftest import run_train, weights

    rng = np.random.default_rng(5)
    stored = {"uint8": tmp_path / "uint8", "float32": tmp_path / "float32"}
    for split, n in (("train", 48), ("test", 12)):
        y = rng.integers(0, 3, n)
        pixels = np.clip(rng.normal(60 + 60 * y[:, None], 40, size=(n, 27)), 0, 255).astype(np.uint8)
        for form, d in stored.items():
            d.mkdir(exist_ok=True)
            x = pixels if form == "uint8" else np.multiply(pixels, np.float32(1 / 255))  # as mpinet 0.6 stored them
            np.save(d / f"{split}_x.npy", x)
            np.save(d / f"{split}_y.npy", y.astype(np.int64))
    for d in stored.values():
        (d / "classes.json").write_text('["a", "b", "c"]')
        (d / "summary.json").write_text("{}")
    base = ("--epochs", 2, "--hidden", 6, 5, "--batch-size", 4, "--learning-rate", 0.5, "--standardize", "false")
    got, evaluated = {}, {}
    for form, d in stored.items():
        run_train(ranks, "--data", d, "--out", tmp_path / f"run_{form}", *base, *extra)
        got[form] = weights(tmp_path / f"run_{form}")
        metrics = pd.read_csv(tmp_path / f"run_{form}" / "metrics.csv")
        evaluated[form] = metrics[["train_loss", "test_loss", "test_accuracy"]].to_numpy()
    assert got["uint8"].tobytes() == got["float32"].tobytes()
    assert (evaluated["uint8"] == evaluated["float32"]).all()  # the test split is read the same way


def test_the_summary_s_fingerprint_and_values_summed_while_decoding_are_those_of_the_finished_files(raw, tmp_path):
    prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24), workers=2)
    summary = json.loads((tmp_path / "ds" / "summary.json").read_text())
    a = dataset.load(tmp_path / "ds")
    assert summary["fingerprint"] == dataset.fingerprint(tmp_path / "ds")  # hashed as the rows were written
    assert summary["values"] == dataset.value_stats(a.train_x)  # summed in the workers, row by row
    assert summary["dtype"] == "uint8" and a.train_x.dtype == np.uint8


@pytest.mark.parametrize("lines", [1, 256, 257, 700])
def test_channel_counts_are_exact_at_the_float32_limit_of_the_summed_lines(lines):
    from mpinet.datasets import pixels

    rng = np.random.default_rng(lines)
    for rows in (np.full((lines, 450), 255, np.uint8), rng.integers(0, 256, (lines, 450), dtype=np.uint8)):
        by_channel = rows.reshape(-1, pixels.CHANNELS).astype(np.int64)
        expected = [by_channel.sum(0), (by_channel**2).sum(0), by_channel.min(0), by_channel.max(0)]
        assert (pixels.channel_counts(rows) == np.array(expected)).all()
