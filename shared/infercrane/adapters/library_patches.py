"""The one gate every patch of a library's internals passes: a patch runs only on the version of
the library it was written and checked for, and on any other leaves the library as it is.

A patch replaces something the library does not promise to keep (a private attribute, a method's
body, a module function), so a release may move it without notice: moto 5.x moved DynamoDB's
responses to a new serializer inside a minor version. uv.lock pins each patched library exactly;
`WRITTEN_FOR` holds the version each one's patches were checked on, and
tests/unit/test_library_patches.py fails when `make lock` moves a library away from it, until the
patches are checked again and the constant follows. On any other version (a venv not synced,
a layer built from another lock) the patch is skipped with one warning naming it, why, and what is
lost, never a crash. docs/architecture.md ("Library patches") lists every patch, its fallback and
the upstream fix that would let it go.
"""

from __future__ import annotations

import logging
from importlib import metadata

log = logging.getLogger("infercrane.patches")

# The version each library's patches were written and checked for (uv.lock's; a test holds them
# equal). A patch of another library must add its library here first.
WRITTEN_FOR = {"botocore": "1.44.8", "moto": "5.2.5", "pynamodb": "6.1.0"}

_warned: set[str] = set()
# Looked up once per process: the stores ask on every batch (~0.5 ms a lookup on Lambda's path).
_versions: dict[str, str | None] = {}


def installed(library: str) -> str | None:
    """The installed distribution's version, from its metadata (not the module's __version__,
    which a vendored or partial copy could carry without being the distribution)."""
    if library not in _versions:
        try:
            _versions[library] = metadata.version(library)
        except metadata.PackageNotFoundError:
            _versions[library] = None
    return _versions[library]


def mismatch(library: str) -> str | None:
    """Why `library`'s patches may not run here, or None when they may."""
    want = WRITTEN_FOR[library]
    have = installed(library)
    if have == want:
        return None
    return f"{library} {have or '(not installed)'} is installed; the patch was written for {want}"


def may_patch(patch: str, library: str, lost: str) -> bool:
    """True when `patch` may replace `library`'s internals. Otherwise the caller keeps the
    library's own behaviour, and the log says once which patch was skipped, why, and `lost`:
    what the library's own behaviour gives up."""
    reason = mismatch(library)
    if reason is None:
        return True
    if patch not in _warned:
        _warned.add(patch)
        log.warning("library patch skipped: %s (%s); %s's own behaviour stays: %s",
                    patch, reason, library, lost)
    return False
