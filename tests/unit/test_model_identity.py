"""Model identity: the documented canonical manifest, streamed. (Unit tier: tmp files only.)"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infercrane.domain.model_identity import MANIFEST_HEADER, compute, validate_digest
from infercrane.errors import InvalidInput, NotFound


def write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def test_digest_follows_the_documented_manifest(tmp_path: Path) -> None:
    files = {"config.json": b"{}", "weights/model-00001.safetensors": b"\x00" * 10,
             "tokenizer.json": b"tok"}
    write(tmp_path, files)
    lines = "".join(f"{hashlib.sha256(files[p]).hexdigest()} {len(files[p])} {p}\n"
                    for p in sorted(files))
    expected = "sha256:" + hashlib.sha256((MANIFEST_HEADER + lines).encode()).hexdigest()
    identity = compute(tmp_path)
    assert identity.digest == expected
    assert identity.files == 3
    assert identity.total_bytes == 15


def test_digest_changes_with_content_and_with_names(tmp_path: Path) -> None:
    a = compute(write(tmp_path / "a", {"w.bin": b"one"})).digest
    b = compute(write(tmp_path / "b", {"w.bin": b"two"})).digest
    c = compute(write(tmp_path / "c", {"x.bin": b"one"})).digest
    assert len({a, b, c}) == 3


def test_digest_ignores_the_folder_name_and_creation_order(tmp_path: Path) -> None:
    write(tmp_path / "first", {"a": b"1", "b/c": b"2"})
    write(tmp_path / "second", {"b/c": b"2", "a": b"1"})
    assert compute(tmp_path / "first").digest == compute(tmp_path / "second").digest


def test_file_symlinks_count_as_their_content(tmp_path: Path) -> None:
    write(tmp_path / "blobs", {"abc": b"weights"})
    snap = tmp_path / "snap"
    snap.mkdir()
    os.symlink(tmp_path / "blobs" / "abc", snap / "model.bin")
    plain = write(tmp_path / "plain", {"model.bin": b"weights"})
    assert compute(snap).digest == compute(plain).digest


def test_directory_symlinks_empty_folders_and_missing_paths_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput):
        compute(tmp_path / "empty")
    with pytest.raises(NotFound):
        compute(tmp_path / "nope")
    write(tmp_path / "m", {"a": b"1"})
    os.symlink(tmp_path / "empty", tmp_path / "m" / "linked")
    with pytest.raises(InvalidInput):
        compute(tmp_path / "m")


def test_progress_is_told_every_byte(tmp_path: Path) -> None:
    write(tmp_path, {"a": b"x" * 3_000_000, "b": b"y" * 5})
    seen: list[int] = []
    compute(tmp_path, seen.append)
    assert sum(seen) == 3_000_005


@given(st.text(max_size=80))
def test_only_sha256_hex_digests_are_accepted(text: str) -> None:
    good = text.startswith("sha256:") and len(text) == 71 and all(
        c in "0123456789abcdef" for c in text[7:])
    if good:
        assert validate_digest(text) == text
    else:
        with pytest.raises(InvalidInput):
            validate_digest(text)
