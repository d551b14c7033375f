"""Deployment revisions: where a candidate answers, checked before it is stored or run against."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.replay import check_deployment
from infercrane.domain.validation import NAME_RE
from infercrane.errors import InvalidInput

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$")


def check_revision_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidInput("A revision name is 1-128 letters, digits, '.', '_' or '-'.",
                           field="revision")
    return name


def check_target_url(url: str, *, field: str = "url") -> str:
    """An http(s) URL without credentials, query or fragment (evidence stores it verbatim)."""
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        port_ok = parts is not None and (parts.port is None or 0 < parts.port < 65536)
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise InvalidInput("Must be an http or https URL with a host.", field=field)
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("A target URL must not carry credentials; name an environment "
                           "variable with api_key_env instead.", field=field)
    if parts.query or parts.fragment:
        raise InvalidInput("A target URL must not carry a query or fragment.", field=field)
    if len(url) > 2048:
        raise InvalidInput("Is too long.", field=field)
    if not _URL_CHARS.match(url):
        raise InvalidInput("A target URL holds only RFC 3986 characters (no spaces, no "
                           "unencoded non-ASCII text).", field=field)
    return url.rstrip("/")


# RFC 3986's unreserved and reserved characters but '?' and '#' (refused above) and '%' escapes:
# a URL is an address, not a place for sentences (docs/architecture.md, Security properties).
_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/\[\]@!$&'()*+,;=%-]+$")


@dataclass(frozen=True)
class Revision:
    """Where a deployment's revision answers. `api_key_env` is the NAME of an environment variable
    read by the CLI at run time: the credential itself is never sent to or stored by the service."""

    deployment: str
    revision: str
    url: str
    model: str | None = None
    api_key_env: str | None = None
    updated_at: str | None = None

    def to_document(self) -> dict[str, Any]:
        return {"deployment": self.deployment, "revision": self.revision, "url": self.url,
                "model": self.model, "api_key_env": self.api_key_env,
                "updated_at": self.updated_at}


def make_revision(deployment: str, revision: str, url: str, model: str | None,
                  api_key_env: str | None, now: datetime) -> Revision:
    check_deployment(deployment)
    check_revision_name(revision)
    if model is not None and (not isinstance(model, str) or not MODEL_RE.match(model)):
        raise InvalidInput("A model name is 1-256 letters, digits or . _ : / @ + -.",
                           field="model")
    if api_key_env is not None and (not isinstance(api_key_env, str)
                                    or not ENV_NAME_RE.match(api_key_env)):
        raise InvalidInput("api_key_env is the name of an environment variable (letters, digits "
                           "and '_'), never the credential itself.", field="api_key_env")
    return Revision(deployment, revision, check_target_url(url), model, api_key_env, rfc3339(now))
