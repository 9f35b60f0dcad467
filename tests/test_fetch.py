import gzip
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.datasets.fetch import fetch, unpack
from mpinet.datasets.images import ImageOptions, prepare_images


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _nothing_left(tmp_path):
    """Neither the output nor a staging directory nor a partial download is left behind."""
    return not [p for p in tmp_path.rglob("*") if "raw" in p.name or p.suffix == ".part"]


def test_download_checksum_unpack_and_preprocess_match_pillow(http_server, synthetic_zip, tmp_path):
    url, www = http_server
    (www / "intel.zip").write_bytes(synthetic_zip.read_bytes())
    raw = fetch(f"{url}/intel.zip", tmp_path / "raw", sha256=_sha(synthetic_zip))
    assert (raw / "seg_train" / "seg_train" / "forest").is_dir()
    assert not list(tmp_path.glob(".raw.partial*"))
    summary = prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24))
    a = dataset.load(tmp_path / "ds")
    assert summary["synthetic"] is True
    assert a.classes == ["buildings", "forest", "glacier", "mountain", "sea", "street"]
    files = [Path(f) for f in (tmp_path / "ds" / "train_files.txt").read_text().splitlines()]
    assert sorted(files) == sorted((raw / "seg_train" / "seg_train").glob("*/*.jpg"))
    assert len(files) == len(a.train_y) == 36
    assert [f.parent.name for f in files[:6]] != sorted(f.parent.name for f in files[:6])  # stored shuffled
    for i in (0, 17, 35):
        expected = np.asarray(Image.open(files[i]).convert("RGB")).reshape(-1)
        assert a.train_x.dtype == np.uint8 and (a.train_x[i] == expected).all()  # the decoded pixels
        assert a.classes[a.train_y[i]] == files[i].parent.name


def test_wrong_checksum_fails_and_leaves_nothing(http_server, synthetic_zip, tmp_path):
    url, www = http_server
    (www / "intel.zip").write_bytes(synthetic_zip.read_bytes())
    with pytest.raises(MpinetError, match=r"intel.zip: sha256 is [0-9a-f]{64}, expected 0{64}"):
        fetch(f"{url}/intel.zip", tmp_path / "raw", sha256="0" * 64)
    assert _nothing_left(tmp_path)


def test_http_404_names_url_and_status(http_server, tmp_path):
    url, _ = http_server
    with pytest.raises(MpinetError, match=rf"{url}/missing.zip: HTTP 404"):
        fetch(f"{url}/missing.zip", tmp_path / "raw")
    assert _nothing_left(tmp_path)


def test_unreachable_server_gives_up_after_retries(tmp_path):
    with pytest.raises(MpinetError, match=r"download failed after 2 attempts"):
        fetch("http://127.0.0.1:9/x.zip", tmp_path / "raw", retries=2, timeout=2)
    assert list(tmp_path.iterdir()) == []


def test_truncated_archive_is_a_clear_error(http_server, synthetic_zip, tmp_path):
    url, www = http_server
    data = synthetic_zip.read_bytes()
    (www / "cut.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(MpinetError, match=r"cut.zip: (truncated or corrupt archive|not a zip or tar)"):
        fetch(f"{url}/cut.zip", tmp_path / "raw")
    assert _nothing_left(tmp_path)


def test_local_archive_and_folder_sources_work(synthetic_zip, tmp_path):
    fetch(str(synthetic_zip), tmp_path / "from_zip")
    fetch(str(tmp_path / "from_zip"), tmp_path / "from_folder")
    names = sorted(p.relative_to(tmp_path / "from_zip") for p in (tmp_path / "from_zip").rglob("*"))
    assert names == sorted(p.relative_to(tmp_path / "from_folder") for p in (tmp_path / "from_folder").rglob("*"))


def test_tar_gz_archives_unpack(tmp_path):
    archive = tmp_path / "t.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        info = tarfile.TarInfo("data/iris.csv")
        info.size = 6
        t.addfile(info, io.BytesIO(b"a,b\n1,"))
    unpack(archive, tmp_path / "out")
    assert (tmp_path / "out" / "data" / "iris.csv").read_bytes() == b"a,b\n1,"


def _zip_with(path, name):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok.txt", "fine")
        z.writestr(name, "evil")
    return path


@pytest.mark.parametrize("name", ["../evil.txt", "a/../../evil.txt", "/tmp/evil-abs.txt"])
def test_zip_path_traversal_is_rejected_and_writes_nothing(tmp_path, name):
    archive = _zip_with(tmp_path / "bad.zip", name)
    with pytest.raises(MpinetError, match="refusing to unpack"):
        fetch(str(archive), tmp_path / "sub" / "raw")
    assert _nothing_left(tmp_path)
    assert not list(tmp_path.rglob("evil*")) and not (tmp_path.parent / "evil.txt").exists()
    assert not list(tmp_path.rglob("ok.txt"))  # checked before anything was extracted


def test_tar_link_pointing_outside_is_rejected(tmp_path):
    archive = tmp_path / "link.tar"
    with tarfile.open(archive, "w") as t:
        link = tarfile.TarInfo("data/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "../../etc/passwd"
        t.addfile(link)
    with pytest.raises(MpinetError, match="points outside the target"):
        unpack(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "data").exists()


def test_kaggle_without_credentials_says_how_to_fix_it(tmp_path, monkeypatch):
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "nothing"))
    with pytest.raises(MpinetError, match="no Kaggle credentials; set KAGGLE_USERNAME and KAGGLE_KEY") as e:
        fetch("kaggle:puneet6060/intel-image-classification", tmp_path / "raw")
    assert "point the dataset's source" in str(e.value) or "set the dataset's source" in str(e.value)
    assert not (tmp_path / "raw").exists()


def test_missing_local_source_is_named(tmp_path):
    with pytest.raises(MpinetError, match="source /no/such/file.zip: no such file or directory"):
        fetch("/no/such/file.zip", tmp_path / "raw")


def test_macos_metadata_in_a_zip_is_never_data(synthetic_zip, tmp_path):
    """A zip made by macOS's Finder: `Intel/…` sorts before `__MACOSX/Intel/…/._*.jpg` copies."""
    made = tmp_path / "mac.zip"
    with zipfile.ZipFile(synthetic_zip) as src, zipfile.ZipFile(made, "w") as dst:
        for m in src.infolist():
            data = src.read(m)
            dst.writestr(f"Intel/{m.filename}", data)
            if m.filename.endswith(".jpg"):
                folder, _, name = m.filename.rpartition("/")
                dst.writestr(f"__MACOSX/Intel/{folder}/._{name}", b"\x00\x05\x16\x07 resource fork")
                dst.writestr(f"Intel/{folder}/._{name}", b"\x00\x05\x16\x07 resource fork")
        dst.writestr("Intel/seg_train/seg_train/.ipynb_checkpoints/x-checkpoint.jpg", b"not a class")
        dst.writestr("Intel/.DS_Store", b"\x00")
    raw = fetch(str(made), tmp_path / "raw")
    assert not [p for p in raw.rglob("*") if p.name.startswith(".") or p.name == "__MACOSX"]
    prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24))  # skip_bad_images is off: every file decodes
    assert dataset.load(tmp_path / "ds").classes == ["buildings", "forest", "glacier", "mountain", "sea", "street"]


def test_hidden_folders_in_a_folder_source_are_not_classes(synthetic_zip, tmp_path):
    raw = fetch(str(synthetic_zip), tmp_path / "unpacked")
    (raw / "seg_train" / "seg_train" / ".ipynb_checkpoints").mkdir()
    (raw / "seg_train" / "seg_train" / ".ipynb_checkpoints" / "a.jpg").write_bytes(b"junk")
    (raw / "seg_train" / "seg_train" / "forest" / "._0.jpg").write_bytes(b"junk")
    copied = fetch(str(raw), tmp_path / "raw")
    assert not (copied / "seg_train" / "seg_train" / ".ipynb_checkpoints").exists()
    prepare_images(raw, tmp_path / "ds", ImageOptions(image_size=24))  # straight from the folder too
    assert len(dataset.load(tmp_path / "ds").classes) == 6


def test_an_archive_that_would_unpack_far_beyond_its_size_is_refused(tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.csv", b"\0" * (300 << 20))  # 300 MiB of zeros compress to ~300 KB
    with pytest.raises(MpinetError, match=r"bomb.zip: would unpack to 0.3 GiB, more than 0.1 GiB .* refusing"):
        unpack(bomb, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.csv"))


def test_a_checksum_that_cannot_be_checked_is_refused(tmp_path):
    from mpinet.datasets.sources import source_error

    (tmp_path / "folder").mkdir()
    entry = {"source": str(tmp_path / "folder"), "format": "images", "sha256": "0" * 64}
    assert "datasets.d.sha256: " in source_error("d", entry) and "is a folder, not one file" in source_error("d", entry)
    assert "kaggle: source" in source_error("k", {"source": "kaggle:a/b", "sha256": "0" * 64})
    assert source_error("f", {"source": str(tmp_path / "folder")}) is None
    with pytest.raises(MpinetError, match="is a folder, not one file"):
        fetch(str(tmp_path / "folder"), tmp_path / "raw", sha256="0" * 64)


def test_a_folder_source_lists_its_data_files_as_inputs(tmp_path):
    from mpinet.datasets.sources import local_files

    (tmp_path / "f" / "a").mkdir(parents=True)
    (tmp_path / "f" / "a" / "1.jpg").write_bytes(b"x")
    (tmp_path / "f" / "__MACOSX").mkdir()
    (tmp_path / "f" / "__MACOSX" / "._1.jpg").write_bytes(b"x")
    assert local_files(str(tmp_path / "f")) == [str(tmp_path / "f" / "a" / "1.jpg")]
    assert local_files("data/iris.csv") == ["data/iris.csv"]


@pytest.fixture
def odd_server():
    """A real HTTP server on 127.0.0.1 whose answers name the file themselves, redirect, or trickle."""
    import http.server
    import threading

    iris = (Path(__file__).resolve().parents[1] / "src" / "mpinet" / "data" / "iris.csv").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/download?"):  # the name only in Content-Disposition
                self._send(iris, {"Content-Disposition": 'attachment; filename="../flowers.csv"'})
            elif self.path == "/latest":  # the name only in the redirect's target
                self.send_response(302)
                self.send_header("Location", "/files/iris-v2.csv")
                self.end_headers()
            elif self.path == "/files/iris-v2.csv":
                self._send(iris, {})
            elif self.path == "/slow.zip":  # 1 byte every 0.2 s: each read is quick, the whole is not
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)

        def _send(self, body, headers):
            self.send_response(200)
            for k, v in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    import time

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_file_name_comes_from_the_server_when_the_url_has_none(odd_server, tmp_path):
    from mpinet.datasets.csvdata import find_table

    raw = fetch(f"{odd_server}/download?id=3", tmp_path / "a")
    assert [p.name for p in raw.iterdir()] == ["flowers.csv"]  # the server's name, without its path
    raw = fetch(f"{odd_server}/latest", tmp_path / "b")
    assert find_table(raw).name == "iris-v2.csv"


def test_a_trickling_download_stops_at_its_deadline(odd_server, tmp_path):
    # the deadline decides (its message says so); a fetch that ignored it would trickle for ever
    with pytest.raises(MpinetError, match=r"slow.zip: not complete after 2 s \(\d+ bytes\); giving up"):
        fetch(f"{odd_server}/slow.zip", tmp_path / "raw", deadline=2, timeout=5)
    assert _nothing_left(tmp_path)


@pytest.mark.parametrize("suffix,opener", [(".gz", "gzip"), (".bz2", "bz2"), (".xz", "lzma")])
def test_a_compressed_single_file_is_decompressed(tmp_path, suffix, opener):
    import importlib

    iris = Path(__file__).resolve().parents[1] / "src" / "mpinet" / "data" / "iris.csv"
    packed = tmp_path / f"iris.csv{suffix}"
    with importlib.import_module(opener).open(packed, "wb") as f:
        f.write(iris.read_bytes())
    raw = fetch(str(packed), tmp_path / "raw")
    assert (raw / "iris.csv").read_bytes() == iris.read_bytes()
    cut = tmp_path / f"cut.csv{suffix}"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    with pytest.raises(MpinetError, match=f"cut.csv{suffix}: truncated or corrupt {suffix} file"):
        fetch(str(cut), tmp_path / "raw2")


def test_the_bundled_iris_table_is_found_from_any_directory_and_an_unknown_name_is_refused(tmp_path, monkeypatch):
    from mpinet.datasets.fetch import resolve_source
    from mpinet.datasets.sources import source_error

    monkeypatch.chdir(tmp_path)
    path = resolve_source("bundled:iris")
    assert path.endswith("iris.csv") and open(path).read().count("\n") >= 150
    assert source_error("iris", {"source": "bundled:iris"}) is None
    refused = source_error("m", {"source": "bundled:mnist"})
    assert "unknown bundled dataset 'bundled:mnist'; expected bundled:iris" in refused
    assert resolve_source("data/x.csv") == "data/x.csv"


def test_a_synthetic_source_other_than_the_intel_layout_is_refused_not_drawn_as_intel():
    from mpinet.datasets.sources import source_error

    assert source_error("images", {"source": "synthetic:intel"}) is None
    refused = source_error("cifar", {"source": "synthetic:cifar"})
    assert refused == "datasets.cifar.source: unknown synthetic dataset 'synthetic:cifar'; expected synthetic:intel"


def test_an_error_about_the_fetched_copy_names_the_users_file_folder_or_archive_member(
    synthetic_zip, tmp_path, monkeypatch
):
    from mpinet.datasets.origin import as_written

    monkeypatch.chdir(tmp_path)  # sources as a user writes them: relative to the working directory
    Path("my data.csv").write_text("a,label\n1,x\n")
    Path("t.csv.gz").write_bytes(gzip.compress(b"a,label\n1,x\n"))
    fetch(str(synthetic_zip), "photos")
    for source, raw in [("my data.csv", "raw/one"), ("t.csv.gz", "raw/gz"), ("photos/", "raw/dir")]:
        fetch(source, raw)
    # a file (copied, or decompressed under another name) by its source; every mention of the copy
    assert (
        as_written("raw/one/my data.csv: row 3 has 1 cells", "raw/one", "my data.csv")
        == "my data.csv: row 3 has 1 cells"
    )
    assert as_written("raw/gz/t.csv: row 3 has 1 cells", "raw/gz", "t.csv.gz") == "t.csv.gz: row 3 has 1 cells"
    folder = "raw/dir/train/a/1.jpg: cannot decode ('raw/dir/train/a/1.jpg'); raw/dir: 1 image"
    assert (
        as_written(folder, "raw/dir", "photos/")
        == "photos/train/a/1.jpg: cannot decode ('photos/train/a/1.jpg'); photos/: 1 image"
    )
    # an archive's (or a download's) members as `<archive>: <member>`, the archive itself by its name
    assert as_written("raw/z/train/a: no images", "raw/z", "a.zip") == "a.zip: train/a: no images"
    assert as_written("raw/z: no training images", "raw/z", "http://h/x.tgz") == "http://h/x.tgz: no training images"
    # another dataset's copy whose name starts alike, and a message without the copy, stay as they are
    assert as_written("raw/dir2/x.csv: bad", "raw/dir", "photos/") == "raw/dir2/x.csv: bad"
    assert as_written("--options: unknown key(s) x", "raw/dir", "photos/") == "--options: unknown key(s) x"


def test_a_missing_local_source_is_named_as_written_and_other_sources_are_not_looked_for(tmp_path, monkeypatch):
    from mpinet.datasets.origin import missing_source

    monkeypatch.chdir(tmp_path)
    Path("here.csv").write_text("a\n")
    assert (
        missing_source("t", "data/t.csv")
        == f"datasets.t.source: data/t.csv: no such file or folder (relative to {tmp_path})"
    )
    assert missing_source("t", "/nowhere/t.csv") == "datasets.t.source: /nowhere/t.csv: no such file or folder"
    for source in ("here.csv", "bundled:iris", "synthetic:intel", "kaggle:o/d", "https://h/x.zip"):
        assert missing_source("t", source) is None
