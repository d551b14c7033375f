"""Copying observations stored one item each (before segments) into segments, a page at a time.

Rows are read in (arrival, id) order and cut into segments of at most `CHUNK` rows per UTC hour,
counted from the hour's first row: the same rows always make the same segments, so a re-run (or
a page cut short by a crash) writes nothing twice, and the already copied come back
`already_present`. A page stops only at a chunk's end, and its cursor is the last copied row's
key (arrival, id): the next page resumes right after it, so it cuts where a whole run would, and
rows deleted in between move nothing (a count of rows done would skip kept rows).

A deletion running with a page deletes the one-item layout first, then walks the segments; a
segment the page writes after that walk passed would bring its rows back. So after each segment
the page reads its rows' items again (consistent reads) and takes out of the segments the rows
no longer there. Legacy items are left in place: they expire by their TTL, and reads no longer
see them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import hour_of
from infercrane.domain.validation import deployment_name
from infercrane.errors import InvalidInput
from infercrane.ports.observations import LegacyObservations, SegmentWriter

CHUNK = 500  # rows per segment: what a REST batch stores at most
PAGE_ROWS = 50_000  # rows per call: well inside a Lambda's time at the bench's rates
_FAR_MS = 10**13 - 1
_ID_MAX = 256  # twice the longest id a client may choose (validation.ID_PATTERN): room for any
_CURSOR_RE = re.compile(rf"^([0-9]{{13}})#(.{{1,{_ID_MAX}}})$")
CURSOR_MAX = 13 + 1 + _ID_MAX  # `<arrival ms:013d>#<id>`: what the admin route accepts


@dataclass(frozen=True)
class MigrationPage:
    deployment: str
    copied: int  # legacy rows written into segments by this call
    stored: int  # of them, rows of segments that are new
    already_present: int  # rows of segments an earlier run made
    segments: int
    cursor: str | None  # where the next call starts; None when the deployment is done

    def document(self) -> dict[str, object]:
        return dict(self.__dict__)


def _cursor(text: str | None) -> tuple[int, str] | None:
    """The last copied row's (arrival, id); None from the start."""
    if text is None:
        return None
    match = _CURSOR_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput("A migration cursor is the one a previous page returned.",
                           field="cursor")
    return int(match.group(1)), match.group(2)


class ObservationMigration:
    def __init__(self, legacy: LegacyObservations, segments: SegmentWriter):
        self._legacy = legacy
        self._segments = segments

    def deployments(self, tenant: str, cursor: str | None,
                    limit: int = 1000) -> tuple[list[str], str | None]:
        return self._legacy.deployments(tenant, cursor, limit)

    def page(self, tenant: str, deployment: str, cursor: str | None = None,
             max_rows: int = PAGE_ROWS) -> MigrationPage:
        deployment_name(deployment)
        after = _cursor(cursor)
        copied = stored = segments = 0
        chunk: list[StoredObservation] = []

        def flush() -> None:
            nonlocal copied, stored, segments
            if chunk:
                stored += len(chunk) if self._segments.put_migrated(chunk) else 0
                copied += len(chunk)
                segments += 1
                gone = self._legacy.missing(chunk)
                if gone:
                    self._segments.drop_migrated(gone)
                chunk.clear()

        def done(next_cursor: str | None) -> MigrationPage:
            return MigrationPage(deployment, copied, stored, copied - stored, segments,
                                 next_cursor)

        hour = None if after is None else hour_of(after[0])
        last: StoredObservation | None = None
        for o in self._legacy.query(tenant, deployment, 0 if after is None else after[0], _FAR_MS):
            if after is not None and (o.arrival_ms, o.observation_id) <= after:
                continue  # copied by an earlier page (rows at its last arrival)
            h = hour_of(o.arrival_ms)
            if h != hour:
                flush()
                if copied >= max_rows and last is not None:
                    return done(f"{last.arrival_ms:013d}#{last.observation_id}")
                hour = h
            chunk.append(o)
            last = o
            if len(chunk) == CHUNK:
                flush()
                if copied >= max_rows:
                    return done(f"{o.arrival_ms:013d}#{o.observation_id}")
        flush()
        return done(None)
