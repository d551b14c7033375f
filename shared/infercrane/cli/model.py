"""`infercrane model digest PATH`: the model-identity digest, computed locally."""

from __future__ import annotations

from pathlib import Path

import click

from infercrane.cli.client import CliError
from infercrane.cli.output import emit, progress
from infercrane.domain import model_identity
from infercrane.errors import InvalidInput, NotFound

# Below this the digest takes well under a second: no progress bar.
PROGRESS_FROM_BYTES = 64 * 1024 * 1024

EPILOG = """\b
Examples:
  infercrane model digest ./llama-3-8b-instruct
  infercrane model digest ~/.cache/huggingface/hub/models--org--m/snapshots/<rev> --output json
  infercrane model digest ./model.gguf --manifest manifest.txt

\b
The digest is `sha256:` + SHA-256 of a canonical manifest: the line
`infercrane.model-manifest/v1`, then one line `<file sha256> <size> <relative path>` per
file, sorted by path (UTF-8 bytes). Symbolic links to files are followed; see docs/cache.md."""


@click.group("model")
def command() -> None:
    """Model identity."""


@command.command("digest", epilog=EPILOG)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--manifest", "manifest_out", type=click.Path(path_type=Path), default=None,
              help="Also write the canonical manifest to this file.")
@click.pass_context
def digest(ctx: click.Context, path: Path, manifest_out: Path | None) -> None:
    """Compute the model-identity digest of the file or folder PATH (streaming)."""
    try:
        _files, total = model_identity.plan(path)
        if total >= PROGRESS_FROM_BYTES:
            with progress("hashing model files", total) as advance:
                identity = model_identity.compute(path, advance)
        else:
            identity = model_identity.compute(path)
    except NotFound as exc:
        raise CliError(exc.message, 4) from None
    except InvalidInput as exc:
        raise CliError(exc.message, 2) from None
    except OSError as exc:
        raise CliError(f"Cannot read the model files: {exc.strerror}.", 1) from None
    if manifest_out is not None:
        manifest_out.write_text(identity.manifest, encoding="utf-8", errors="surrogateescape")
    doc = {"model": identity.digest, "files": identity.files, "bytes": identity.total_bytes,
           "manifest_version": model_identity.MANIFEST_HEADER.strip()}
    emit(ctx, doc, lambda c, d: c.print(f"{d['model']}  ({d['files']} files, {d['bytes']} bytes)"))
