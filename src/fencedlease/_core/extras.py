"""What a grant stores beside the lease, checked: its ``metadata`` (who holds it) and
``lock_delay_ms`` (how long a lease that ended without a release keeps its key), both faces and
every backend (docs/metadata.md, docs/lock-delay.md). Pure functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fencedlease._core.errors import ValidationError
from fencedlease._core.protocol import PLAIN_GRANT, GrantExtras
from fencedlease._core.validate import check_ms

__all__ = ["MAX_METADATA_BYTES", "MAX_METADATA_ENTRIES", "check_extras", "check_metadata"]

MAX_METADATA_ENTRIES: Final = 16
"""The most entries a grant's ``metadata`` may hold."""

MAX_METADATA_BYTES: Final = 1024
"""The most bytes (UTF-8) a grant's ``metadata`` may hold, every name and value counted."""


def check_metadata(value: object) -> dict[str, str]:
    """``value`` as a plain dict of str to str (None: empty), sorted by name: at most
    `MAX_METADATA_ENTRIES` entries, at most `MAX_METADATA_BYTES` bytes of UTF-8 in all its names
    and values, every name non-empty.

    Raises:
        ValidationError: naming ``metadata`` and the bound it breaks (an entry's name, never its
            value, is quoted: a value may be something its caller would not log).
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(
            "metadata", f"metadata must be a mapping of str to str; got {type(value).__name__}"
        )
    if len(value) > MAX_METADATA_ENTRIES:
        raise ValidationError(
            "metadata",
            f"metadata must hold at most {MAX_METADATA_ENTRIES} entries; got {len(value)}",
        )
    size = 0
    for name, text in value.items():
        if not isinstance(name, str) or not name:
            raise ValidationError("metadata", f"metadata names must be non-empty str; got {name!r}")
        if not isinstance(text, str):
            raise ValidationError(
                "metadata",
                f"metadata[{name!r}] must be a str; got {type(text).__name__}",
            )
        for part, role in ((name, "name"), (text, "value")):
            try:
                size += len(part.encode("utf-8"))
            except UnicodeEncodeError:
                raise ValidationError(
                    "metadata", f"metadata[{name!r}]: its {role} is not encodable as UTF-8"
                ) from None
    if size > MAX_METADATA_BYTES:
        raise ValidationError(
            "metadata",
            f"metadata must hold at most {MAX_METADATA_BYTES} bytes (UTF-8, names and values);"
            f" got {size}",
        )
    return {name: str(value[name]) for name in sorted(value)}


def check_extras(metadata: object, lock_delay_ms: object, default_delay_ms: int) -> GrantExtras:
    """A grant's ``metadata`` (`check_metadata`) and ``lock_delay_ms`` (an int in 0..MAX_MS; None:
    ``default_delay_ms``, the manager's); `PLAIN_GRANT` when neither is set.

    Raises:
        ValidationError: naming the argument out of bounds.
    """
    entries = check_metadata(metadata)
    delay = (
        default_delay_ms if lock_delay_ms is None else check_ms("lock_delay_ms", lock_delay_ms, 0)
    )
    if not entries and not delay:
        return PLAIN_GRANT
    return GrantExtras(entries, delay)
