"""Fetch a dataset source (URL, local archive or folder, or Kaggle) and unpack it safely.

`fetch(source, out_dir)` leaves the dataset's files in out_dir, or raises MpinetError and
leaves nothing: all work happens in a staging directory that is renamed into place at the end.
"""

import bz2
import gzip
import hashlib
import lzma
import os
import shutil
import stat
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from mpinet import MpinetError
from mpinet.files import staging_dir

KAGGLE_PREFIX = "kaggle:"
# Data shipped inside the package, so a study run from any directory finds it: bundled:iris
BUNDLED_PREFIX = "bundled:"
BUNDLED = {"iris": "iris.csv"}
CHUNK = 1 << 20
# An archive may unpack to at most this many times its own size (JPEGs and CSVs compress 1-10x;
# a zip bomb, a thousand times or more), and never beyond MAX_UNPACKED bytes.
MAX_RATIO = 100
MAX_UNPACKED = 200 << 30
DEADLINE = 6 * 3600.0  # seconds for a whole download (the Intel archive is ~360 MB)
SINGLE_FILE_CODECS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def is_metadata(name: str) -> bool:
    """Files and folders other systems add that are never data: macOS's __MACOSX/ tree and ._*
    resource forks, .DS_Store, and hidden folders such as .ipynb_checkpoints or .git."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    return any(p == "__MACOSX" or (p.startswith(".") and p not in (".", "..")) for p in parts)


def resolve_source(source: str) -> str:
    """A source as a path or URL: bundled:NAME is the package's own copy of that file."""
    if source.startswith(BUNDLED_PREFIX):
        return str(Path(__file__).parents[1] / "data" / BUNDLED[source[len(BUNDLED_PREFIX) :]])
    return source


def fetch(
    source: str,
    out_dir: str | Path,
    sha256: str | None = None,
    retries: int = 3,
    timeout: float = 60.0,
    deadline: float = DEADLINE,
) -> Path:
    """Materialize `source` as a directory of files at out_dir (archives are unpacked)."""
    out = Path(out_dir)
    source = resolve_source(source)
    with staging_dir(out) as staging:
        if source.startswith(("http://", "https://")):
            name = PurePosixPath(urllib.parse.urlparse(source).path).name or "download"
            local = download(source, staging / ".download" / name, sha256, retries, timeout, deadline)
            _place(local, staging)
            shutil.rmtree(staging / ".download")
        elif source.startswith(KAGGLE_PREFIX):
            if sha256:
                raise MpinetError(f"source {source}: sha256 cannot be checked for a kaggle: source")
            _place(Path(kaggle_download(source[len(KAGGLE_PREFIX) :])), staging)
        else:
            local = Path(source).expanduser()
            if not local.exists():
                raise MpinetError(f"source {source}: no such file or directory")
            if sha256 and not local.is_file():
                raise MpinetError(f"source {source}: sha256 is given but the source is a folder, not one file")
            if sha256:
                _check_sha256(local, sha256, source)
            _place(local, staging)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    return out


def download(
    url: str,
    dest: Path,
    sha256: str | None = None,
    retries: int = 3,
    timeout: float = 60.0,
    deadline: float = DEADLINE,
) -> Path:
    """Stream url into dest's folder with a progress bar, verifying sha256; the file appears only
    when complete and correct. Its name is the server's (Content-Disposition, or the last URL after
    redirects) when it gives one with a suffix, else dest's. `deadline` bounds the whole download:
    a server trickling bytes never trips the per-read `timeout`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    start = time.monotonic()
    for attempt in range(1, retries + 1):
        try:
            digest = hashlib.sha256()
            with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as f:
                dest = dest.with_name(_served_name(r, dest.name))
                total = int(r.headers.get("Content-Length") or 0) or None
                with tqdm(
                    total=total, unit="B", unit_scale=True, desc=dest.name, file=sys.stderr, mininterval=1
                ) as bar:
                    while chunk := r.read1(CHUNK):  # what has arrived, so the deadline is checked often
                        f.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
                        if time.monotonic() - start > deadline:
                            raise Deadline(f"{url}: not complete after {deadline:g} s ({f.tell()} bytes); giving up")
                if total is not None and f.tell() != total:
                    raise MpinetError(f"{url}: download truncated at {f.tell()} of {total} bytes")
            break
        except Deadline as e:
            tmp.unlink(missing_ok=True)
            raise MpinetError(str(e)) from None
        except urllib.error.HTTPError as e:
            tmp.unlink(missing_ok=True)
            if e.code < 500 or attempt == retries:
                raise MpinetError(f"{url}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, MpinetError) as e:
            tmp.unlink(missing_ok=True)
            if attempt == retries or time.monotonic() - start > deadline:
                reason = getattr(e, "reason", e)
                raise MpinetError(f"{url}: download failed after {attempt} attempts ({reason})") from None
        time.sleep(min(2 ** (attempt - 1), 10))
    if sha256 and digest.hexdigest() != sha256.lower():
        tmp.unlink(missing_ok=True)
        raise MpinetError(f"{url}: sha256 is {digest.hexdigest()}, expected {sha256.lower()}")
    os.replace(tmp, dest)
    return dest


class Deadline(MpinetError):
    """The whole download took longer than its deadline (not retried)."""


def _served_name(response, fallback: str) -> str:
    """The file name the server gives: Content-Disposition's filename, else the final URL's last part."""
    disposition = response.headers.get_filename()
    final = PurePosixPath(urllib.parse.unquote(urllib.parse.urlparse(response.geturl()).path)).name
    for name in (disposition, final):
        name = PurePosixPath((name or "").replace("\\", "/")).name  # never a path from the server
        if name and "." in name.strip(".") and not is_metadata(name):
            return name
    return fallback


def unpack(archive: Path, dest: Path) -> None:
    """Extract a zip or tar (gz/bz2/xz) archive into dest after checking every member stays inside it."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                members = [m for m in z.infolist() if not is_metadata(m.filename)]
                for m in members:
                    _check_member(archive, m.filename, is_link=stat.S_ISLNK(m.external_attr >> 16))
                _check_size(archive, sum(m.file_size for m in members))
                bad = z.testzip()
                if bad is not None:
                    raise MpinetError(f"{archive}: member {bad} is corrupt (CRC mismatch)")
                z.extractall(dest, members=members)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as t:
                members = [m for m in t.getmembers() if not is_metadata(m.name)]
                for m in members:
                    _check_member(archive, m.name, m.issym() or m.islnk(), m.linkname, m.isdev(), hard=m.islnk())
                _check_size(archive, sum(m.size for m in members))
                if hasattr(tarfile, "data_filter"):
                    t.extractall(dest, members=members, filter="data")
                else:  # Python < 3.11.4: members were checked above
                    t.extractall(dest, members=members)
        else:
            raise MpinetError(f"{archive}: not a zip or tar archive (or truncated)")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as e:
        raise MpinetError(f"{archive}: truncated or corrupt archive ({e})") from None


def is_archive(path: Path) -> bool:
    return path.is_file() and (zipfile.is_zipfile(path) or tarfile.is_tarfile(path))


def kaggle_download(ref: str) -> str:
    """Download OWNER/DATASET through kagglehub; needs Kaggle credentials."""
    if not _kaggle_credentials():
        raise MpinetError(
            f"kaggle:{ref}: no Kaggle credentials; set KAGGLE_USERNAME and KAGGLE_KEY (or put kaggle.json "
            f"in ~/.kaggle/), or download the archive from https://www.kaggle.com/datasets/{ref} and set "
            "the dataset's source to its local path"
        )
    try:
        import kagglehub
    except ImportError:
        raise MpinetError("kaggle sources need the kagglehub package: pip install kagglehub") from None
    try:
        return kagglehub.dataset_download(ref)
    except Exception as e:  # kagglehub raises many types; the user needs the message
        raise MpinetError(f"kaggle:{ref}: download failed ({e})") from None


def _kaggle_credentials() -> bool:
    env = os.environ
    if (env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY")) or env.get("KAGGLE_API_TOKEN"):
        return True
    homes = [Path(env.get("KAGGLE_CONFIG_DIR", "~/.kaggle")).expanduser(), Path("~/.config/kaggle").expanduser()]
    return any((h / f).is_file() for h in homes for f in ("kaggle.json", "access_token"))


def _place(local: Path, staging: Path) -> None:
    """Put a local file or folder's content into staging, unpacking archives."""
    if local.is_dir():
        shutil.copytree(local, staging, dirs_exist_ok=True, ignore=_metadata_names)
    elif is_archive(local):
        unpack(local, staging)
    elif local.suffix.lower() in SINGLE_FILE_CODECS:
        _decompress(local, staging / local.stem)
    elif local.suffix.lower() in (".zip", ".tar", ".tgz"):
        raise MpinetError(f"{local}: truncated or corrupt archive")
    else:
        shutil.copy2(local, staging / local.name)


def _check_member(
    archive: Path, name: str, is_link: bool, link: str = "", special: bool = False, hard: bool = False
) -> None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise MpinetError(f"{archive}: member '{name}' has an absolute path; refusing to unpack")
    if ".." in p.parts:
        raise MpinetError(f"{archive}: member '{name}' points outside the target ('..'); refusing to unpack")
    if special:
        raise MpinetError(f"{archive}: member '{name}' is a device file; refusing to unpack")
    if is_link:
        target = PurePosixPath(link)
        inside = target if hard else p.parent / target  # hard links name a path from the archive root
        if not link or target.is_absolute() or _escapes(inside):
            raise MpinetError(f"{archive}: link '{name}' -> '{link}' points outside the target; refusing to unpack")


def _decompress(src: Path, dest: Path) -> None:
    """One compressed file (iris.csv.gz, .bz2, .xz) written out under its name without the suffix."""
    limit = _unpack_limit(src)
    try:
        with SINGLE_FILE_CODECS[src.suffix.lower()](src, "rb") as f, open(dest, "wb") as out:
            while chunk := f.read(CHUNK):
                out.write(chunk)
                if out.tell() > limit:
                    raise MpinetError(f"{src}: decompresses to more than {limit / 2**30:.1f} GiB; refusing")
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise MpinetError(f"{src}: truncated or corrupt {src.suffix} file ({e})") from None


def _metadata_names(folder, names: list[str]) -> list[str]:
    return [n for n in names if is_metadata(n)]


def _unpack_limit(packed: Path) -> int:
    """Bytes a packed file may unpack to: MAX_RATIO times its size (at least 1 MiB's), at most MAX_UNPACKED."""
    return min(MAX_UNPACKED, MAX_RATIO * max(packed.stat().st_size, 1 << 20))


def _check_size(archive: Path, unpacked: int) -> None:
    limit = _unpack_limit(archive)
    if unpacked > limit:
        raise MpinetError(
            f"{archive}: would unpack to {unpacked / 2**30:.1f} GiB, more than {limit / 2**30:.1f} GiB "
            f"({MAX_RATIO}x the archive, at most {MAX_UNPACKED >> 30} GiB); refusing to unpack (a zip bomb?)"
        )


def _escapes(path: PurePosixPath) -> bool:
    depth = 0
    for part in path.parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            return True
    return False


def _check_sha256(path: Path, expected: str, source: str) -> None:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    if h.hexdigest() != expected.lower():
        raise MpinetError(f"{source}: sha256 is {h.hexdigest()}, expected {expected.lower()}")
