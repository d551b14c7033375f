"""Model identity: a content digest over a canonical manifest of a model's files.

A model directory is identified by what it holds, not by where it came from (two revisions behind
one `hf://` URI must not look alike). The digest is computed in one streaming pass:

1. Every regular file under the root is listed by its path relative to the root, with `/` as the
   separator (symbolic links to files are followed, as in a Hugging Face snapshot whose files link
   into `blobs/`; a symbolic link to a directory is refused rather than silently skipped).
2. Entries are sorted by the UTF-8 bytes of that relative path.
3. The manifest is the UTF-8 text `infercrane.model-manifest/v1\\n` followed by one line per file:
   `<sha256 hex of the file> <size in bytes> <relative path>\\n`.
4. The model digest is `sha256:` + the SHA-256 hex of the manifest bytes.

Files are read in 1 MiB chunks, so memory stays flat for models of any size. Paths containing a
newline or carriage return are refused (the manifest would be ambiguous), as is an empty model.
Every API accepts only this form of digest: `sha256:` followed by 64 lowercase hex digits.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from infercrane.domain.validation import DIGEST_RE
from infercrane.errors import InvalidInput, NotFound

MANIFEST_HEADER = "infercrane.model-manifest/v1\n"
CHUNK = 1024 * 1024


def validate_digest(value: object, *, field: str = "model") -> str:
    """The model-identity digest, or `InvalidInput` naming `field` (never echoing the value)."""
    if not isinstance(value, str) or not DIGEST_RE.match(value):
        raise InvalidInput("A model digest is 'sha256:' followed by 64 lowercase hex digits "
                           "(see `infercrane model digest`).", field=field)
    return value


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative, '/'-separated
    size: int
    sha256: str

    def line(self) -> str:
        return f"{self.sha256} {self.size} {self.path}\n"


@dataclass(frozen=True)
class ModelIdentity:
    digest: str
    files: int
    total_bytes: int
    manifest: str


@dataclass(frozen=True)
class _Listed:
    path: str
    absolute: Path
    size: int


def _list_files(root: Path) -> list[_Listed]:
    if not root.exists():
        raise NotFound("The model path does not exist.", field="path")
    if root.is_file():
        # A single-file model (a GGUF, say) is a manifest of one entry named after the file.
        return [_Listed(root.name, root, root.stat().st_size)]
    if not root.is_dir():
        raise InvalidInput("The model path must be a file or a directory.", field="path")
    listed: list[_Listed] = []
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(folder)
        for d in dirnames:
            if (base / d).is_symlink():
                raise InvalidInput("The model folder contains a symbolic link to a directory.",
                                   field="path")
        for name in filenames:
            absolute = base / name
            if not absolute.is_file():
                # A dangling link, a socket, a fifo: content a digest cannot pin down.
                raise InvalidInput("The model folder contains an entry that is not a regular file.",
                                   field="path")
            rel = absolute.relative_to(root).as_posix()
            if "\n" in rel or "\r" in rel:
                raise InvalidInput("A file name in the model folder contains a line break.",
                                   field="path")
            listed.append(_Listed(rel, absolute, absolute.stat().st_size))
    if not listed:
        raise InvalidInput("The model folder holds no files.", field="path")
    listed.sort(key=lambda f: f.path.encode("utf-8", "surrogateescape"))
    return listed


def _hash_file(path: Path, advance: Callable[[int], None]) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
            advance(len(chunk))
    return h.hexdigest(), size


def plan(root: Path) -> tuple[int, int]:
    """(files, total bytes) of a model path, without reading contents (for a progress bar)."""
    listed = _list_files(root)
    return len(listed), sum(f.size for f in listed)


def entries(root: Path, advance: Callable[[int], None] | None = None) -> Iterator[ManifestEntry]:
    """Manifest entries in canonical order; `advance(n)` is told of every n bytes read."""
    for f in _list_files(root):
        sha, size = _hash_file(f.absolute, advance or (lambda _n: None))
        yield ManifestEntry(f.path, size, sha)


def manifest_digest(lines: Iterator[ManifestEntry] | list[ManifestEntry]) -> ModelIdentity:
    h = hashlib.sha256(MANIFEST_HEADER.encode())
    text = [MANIFEST_HEADER]
    files = total = 0
    for entry in lines:
        line = entry.line()
        h.update(line.encode("utf-8", "surrogateescape"))
        text.append(line)
        files += 1
        total += entry.size
    return ModelIdentity(f"sha256:{h.hexdigest()}", files, total, "".join(text))


def compute(root: Path, advance: Callable[[int], None] | None = None) -> ModelIdentity:
    """The model-identity digest of a file or folder, streaming every file once."""
    return manifest_digest(entries(root, advance))
