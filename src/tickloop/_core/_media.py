"""Images and audio as values of a run: `tl.Image`, `tl.Audio`, and the `$media` reference.

A tool (Python or MCP) may return media. Bytes never enter the log, the journal, events
or programs: the engine keeps them with the run's `MediaKeeper` (the store's media table,
or memory without a store) and the call's result holds a reference in their place,

    {"$media": "m-<hash>", "mime": "image/png", "bytes": 1234}

The id is the SHA-256 of the MIME type and the bytes (cut to 32 hex digits), so the same
bytes are kept once and a replay, resume or fork that meets them again names them the
same. A request shows a
reference as the provider's own content part, reading the bytes back from the keeper
(`_models`: OpenAI image parts, Anthropic image blocks, Responses `input_image`).

Pure data: no I/O here, no store; the keeper is a Protocol the layers above meet.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = [
    "MEDIA_KEY",
    "Audio",
    "Image",
    "Media",
    "MediaKeeper",
    "MemoryMedia",
    "is_media_ref",
    "keep_media",
    "media_refs",
]

#: The key that marks a media reference in a JSON value.
MEDIA_KEY = "$media"


class Media:
    """Bytes of an image or an audio clip and their MIME type, as a tool returns them.

    `data` is bytes (or a base64 string, as MCP servers send them). Only
    `Image` and `Audio` are made by users; a result may hold them anywhere in its JSON.
    """

    __slots__ = ("data", "mime")
    kind = "media"
    _prefix = ""

    def __init__(self, data: bytes | bytearray | memoryview | str, mime: str) -> None:
        if isinstance(data, str):
            try:
                data = base64.b64decode(data, validate=True)
            except ValueError as error:
                raise ValueError(f"{type(self).__name__}: data is not base64: {error}") from None
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(
                f"{type(self).__name__}(data, mime): data must be bytes, not {type(data).__name__}"
            )
        if not isinstance(mime, str) or "/" not in mime:
            raise ValueError(f"{type(self).__name__}: mime must be a MIME type, not {mime!r}")
        if self._prefix and not mime.startswith(self._prefix):
            raise ValueError(
                f"{type(self).__name__}: mime must start with {self._prefix!r}, not {mime!r}"
            )
        self.data = bytes(data)
        self.mime = mime

    @property
    def id(self) -> str:
        return media_id(self.data, self.mime)

    def ref(self) -> dict[str, Any]:
        """The JSON that stands for these bytes in a run."""
        return {MEDIA_KEY: self.id, "mime": self.mime, "bytes": len(self.data)}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.data)} bytes, {self.mime!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Media)
            and (self.data, self.mime) == (other.data, other.mime)
            and self.kind == other.kind
        )

    def __hash__(self) -> int:
        return hash((self.data, self.mime))


#: The MIME types of each kind (MIME types, not paths; tests/test_run_paths.py).
IMAGE_TYPES = "image/"
AUDIO_TYPES = "audio/"


class Image(Media):
    """An image a tool returns: `return tl.Image(png_bytes, "image/png")`."""

    __slots__ = ()
    kind = "image"
    _prefix = IMAGE_TYPES


class Audio(Media):
    """An audio clip a tool returns: `return tl.Audio(wav_bytes, "audio/wav")`."""

    __slots__ = ()
    kind = "audio"
    _prefix = AUDIO_TYPES


def media_of(mime: str, data: bytes) -> Media:
    """The `Image`, `Audio` (or plain `Media`) of bytes kept under `mime`."""
    if mime.startswith(IMAGE_TYPES):
        return Image(data, mime)
    if mime.startswith(AUDIO_TYPES):
        return Audio(data, mime)
    return Media(data, mime)


def media_id(data: bytes, mime: str) -> str:
    """The id of bytes of a type: the same bytes as another type are another media."""
    return "m-" + hashlib.sha256(mime.encode() + b"\0" + data).hexdigest()[:32]


class MediaKeeper(Protocol):
    """Where a run keeps the bytes its references name: `SQLiteStore`, `MemoryMedia`."""

    def put_media(self, media_id: str, mime: str, data: bytes) -> None:
        """Keep `data` under `media_id` (kept once: a second put of an id is a no-op)."""

    def get_media(self, media_id: str) -> tuple[str, bytes] | None:
        """The MIME type and bytes kept under `media_id`, or None."""


class MemoryMedia:
    """The media of a run without a store, in this process's memory."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, tuple[str, bytes]] = {}

    def put_media(self, media_id: str, mime: str, data: bytes) -> None:
        self._items.setdefault(media_id, (mime, data))

    def get_media(self, media_id: str) -> tuple[str, bytes] | None:
        return self._items.get(media_id)

    def __len__(self) -> int:
        return len(self._items)


def is_media_ref(value: Any) -> bool:
    return (
        type(value) is dict
        and isinstance(value.get(MEDIA_KEY), str)
        and isinstance(value.get("mime"), str)
    )


def media_refs(value: Any) -> Iterator[dict[str, Any]]:
    """Every media reference in a JSON value, in document order."""
    if type(value) is dict:
        if is_media_ref(value):
            yield value
            return
        for item in value.values():
            yield from media_refs(item)
    elif type(value) is list:
        for item in value:
            yield from media_refs(item)


def holds_media(value: Any) -> bool:
    """Whether a handler's return value holds a `Media` anywhere (dicts, lists, tuples).

    A loop, not recursion: a result may nest deeper than the interpreter's stack (the
    engine refuses it with its own message, which this must not pre-empt)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Media):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def keep_media(value: Any, keeper: MediaKeeper) -> Any:
    """`value` with each `Media` in it kept by `keeper` and replaced by its reference."""
    if isinstance(value, Media):
        keeper.put_media(value.id, value.mime, value.data)
        return value.ref()
    if isinstance(value, dict):
        return {key: keep_media(item, keeper) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [keep_media(item, keeper) for item in value]
    return value


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
