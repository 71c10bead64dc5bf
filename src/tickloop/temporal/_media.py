"""The bytes of a run's images and audio, carried between Temporal activities.

A local run keeps the bytes a `$media` reference names in its store (or memory), where
the next request finds them. On Temporal the call runs in one worker's activity and the
request in another's: the tool activity returns the bytes its result refers to with the
result, the workflow keeps them (its history holds them, so a replay keeps them too), and
each model request carries the bytes of the media its messages show.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._core._media import MEDIA_KEY, MediaKeeper, MemoryMedia

Lookup = Callable[[str], "tuple[str, bytes] | None"]

__all__ = ["ids_of", "keep_payload", "media_lookup", "media_payload"]


def media_payload(ids: Iterable[str], lookup: Lookup | None) -> dict[str, list[str]]:
    """The bytes of the media of `ids`, as JSON carries them: id -> [mime, base64].
    What `lookup` does not have is left out (the request that shows it then fails with
    a `ModelError` saying its bytes are not kept, as a local run's would)."""
    payload: dict[str, list[str]] = {}
    if lookup is None:
        return payload
    for media_id in ids:
        if media_id in payload:
            continue
        found = lookup(media_id)
        if found is not None:
            mime, data = found
            payload[media_id] = [mime, base64.b64encode(data).decode("ascii")]
    return payload


def keep_payload(keeper: MediaKeeper, payload: Any) -> None:
    """Keep what `media_payload` made in `keeper`; anything else in it is ignored."""
    if not isinstance(payload, dict):
        return
    for media_id, item in payload.items():
        if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
            keeper.put_media(media_id, item[0], base64.b64decode(item[1]))


def ids_of(refs: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The ids of `$media` references (`_core._media.media_refs`)."""
    return (ref[MEDIA_KEY] for ref in refs)


def media_lookup(payload: Any) -> Lookup | None:
    """How a request made in an activity reads the bytes its data carried."""
    if not payload:
        return None
    kept = MemoryMedia()
    keep_payload(kept, payload)
    return kept.get_media
