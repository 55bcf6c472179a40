"""The Lua scripts the library sends, and what running one needs without I/O: the no-op runs
that go with an EVAL fallback (`primers`), the pipeline of a script and its ``WAIT`` (`waited`),
the replies' reading. Running one, either face, is `fencedlease._async.scripts` (the sync face's
generated from it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any, Final, NamedTuple

import attrs
import redis

from fencedlease._core.protocol import new_owner_token

from .acl_refusals import register_script
from .errors import SCRIPT_REFUSAL

__all__ = [
    "ACQUIRE",
    "ENQUEUE",
    "INSPECT",
    "RELEASE",
    "RENEW",
    "RENEW_MANY",
    "SCRIPT_REFUSAL",
    "SEMAPHORE_ACQUIRE",
    "SEMAPHORE_CLEAR",
    "SEMAPHORE_COUNT",
    "SEMAPHORE_RELEASE",
    "SEMAPHORE_RENEW_MANY",
    "AckedCall",
    "Script",
    "acked_replies",
    "eval_reply",
    "primers",
    "waited",
]


@attrs.frozen
class Script:
    """A Lua script shipped in ``fencedlease/scripts/``, with its SHA-1 for EVALSHA."""

    name: str
    source: str
    sha: str

    def __attrs_post_init__(self) -> None:
        register_script(self.name, self.source, self.sha)  # an ACL refusal inside names its command

    @classmethod
    def load(cls, name: str, *parts: str) -> Script:
        """``scripts/<name>.lua``; or, given ``parts``, the last one, ``scripts/<part>.lua``, sent
        with the definitions it uses from the files before it (see `assemble`), under ``name``.

        Raises:
            ValueError: a shared file holds a statement that is not a definition (see
                `definitions`).
        """
        folder = resources.files("fencedlease").joinpath("scripts")
        texts = [folder.joinpath(f"{part}.lua").read_text("utf-8") for part in (parts or (name,))]
        source = assemble(texts[:-1], texts[-1])
        return cls(name, source, hashlib.sha1(source.encode()).hexdigest())  # noqa: S324 (Redis's id)


#: A line of a script's own file after which go the shared definitions used only below it (see
#: `assemble`).
SHARED_HERE: Final = "-- [shared definitions used below]"

# A Lua token that can hold a name: a quoted string or a comment (skipped), or a word.
_LUA_WORDS: Final = re.compile(r"""'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|--[^\n]*|(\w+)""")
# A top-level definition: ``local function name(`` or ``local name =``.
_DEFINES: Final = re.compile(r"local (?:function )?(\w+)\s*[(=]")


def words(code: str) -> set[str]:
    """The names ``code`` mentions, strings and comments left out."""
    return {m.group(1) for m in _LUA_WORDS.finditer(code) if m.group(1)}


def definitions(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A shared file's header (its opening lines before the first blank line, when a definition
    follows it) and its top-level definitions, ``(name, text)`` in order: each from the comment
    lines right above its ``local`` line (at column 0) to the next one's.

    Raises:
        ValueError: a line at column 0 that is neither a comment, a ``local`` definition of one
            name nor the ``end`` of one (top-level code, which no definition could carry).
    """
    lines = text.rstrip("\n").split("\n")
    starts = []
    for i, line in enumerate(lines):
        if line.startswith("local "):
            if not _DEFINES.match(line):
                raise ValueError(f"not a definition of one name: {line!r}")
            start = i
            while start > 0 and lines[start - 1].startswith("--"):
                start -= 1
            starts.append(start)
        elif line and not line.startswith(("--", " ", "end")):
            raise ValueError(f"a statement outside any definition: {line!r}")
    head_end = lines.index("") if "" in lines[: starts[0] if starts else 0] else 0
    header = "\n".join(lines[:head_end])
    chunks = []
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        body = "\n".join(lines[start:end]).rstrip("\n")
        match = _DEFINES.search(body, body.index("\nlocal ") + 1 if body.startswith("--") else 0)
        assert match is not None  # every start is a comment run then a definition
        chunks.append((match.group(1), body))
    return header, chunks


def assemble(shared: Sequence[str], own: str) -> str:
    """A script's source: each shared file's header and the definitions the script uses (those its
    own code names, and theirs, in the files' order), then its own file.

    Each definition made costs Redis's time on every run, so a definition used only on a rarer
    path may wait for it: the own file's line `SHARED_HERE` is followed by the definitions that
    only the code below it uses, and the others come first.
    """
    if not shared:
        return own
    head, marker, tail = own.partition(f"\n{SHARED_HERE}\n")
    parsed = [definitions(text) for text in shared]
    pool = {name: body for _, chunks in parsed for name, body in chunks}

    def needed(code: str, known: set[str]) -> set[str]:
        found: set[str] = set()
        todo = (words(code) & pool.keys()) - known
        while todo:
            name = todo.pop()
            found.add(name)
            todo |= (words(pool[name]) & pool.keys()) - found - known
        return found

    first = needed(head, set())
    later = needed(tail, first) if marker else set()
    parts = [header for header, _ in parsed if header]
    parts += [body for _, chunks in parsed for name, body in chunks if name in first]
    if not marker:
        return "\n".join([*parts, own])
    rest = [body for _, chunks in parsed for name, body in chunks if name in later]
    return "\n".join([*parts, head + marker.rstrip("\n"), *rest, tail])


# lease_common.lua holds the functions the lease scripts share (reading, token checks, the next
# token); each script is sent with those it uses (`assemble`).
ACQUIRE: Final = Script.load("acquire", "lease_common", "acquire")
RENEW: Final = Script.load("renew", "lease_common", "renew")
RENEW_MANY: Final = Script.load("renew_many", "lease_common", "renew_many")
RELEASE: Final = Script.load("release", "lease_common", "release")
INSPECT: Final = Script.load("inspect")
FORCE_RELEASE: Final = Script.load("force_release")
ENQUEUE: Final = Script.load("enqueue", "lease_common", "enqueue")
# The semaphore's scripts (fencedlease._async.semaphore_stores): semaphore_common.lua after
# lease_common.
_SEMAPHORE: Final = ("lease_common", "semaphore_common")
SEMAPHORE_ACQUIRE: Final = Script.load("semaphore_acquire", *_SEMAPHORE, "semaphore_acquire")
SEMAPHORE_RENEW_MANY: Final = Script.load(
    "semaphore_renew_many", *_SEMAPHORE, "semaphore_renew_many"
)
SEMAPHORE_RELEASE: Final = Script.load("semaphore_release", *_SEMAPHORE, "semaphore_release")
SEMAPHORE_COUNT: Final = Script.load("semaphore_count", *_SEMAPHORE, "semaphore_count")
SEMAPHORE_CLEAR: Final = Script.load("semaphore_clear", *_SEMAPHORE, "semaphore_clear")


def primers(
    script: Script, keys: Sequence[str]
) -> tuple[tuple[Script, Sequence[str], Sequence[Any]], ...]:
    """The no-op runs, ``(script, keys, args)``, that go with ``script``'s EVAL fallback in the same
    round trip (see `fencedlease._async.scripts.run_script`), so the scripts that follow it are
    cached before they are needed: for `ACQUIRE` (on its ``keys``), an empty `RENEW_MANY` batch
    (renews nothing) and a `RELEASE` of the same keys by an owner token nobody holds (touches
    nothing). None for the others."""
    if script is not ACQUIRE:
        return ()
    return ((RENEW_MANY, (), ()), (RELEASE, keys, (new_owner_token(),)))


def eval_reply(replies: list[Any]) -> Any:
    """The EVAL's reply from a fallback pipeline's replies (the first); its error raised. The
    no-op runs' replies are not looked at."""
    reply = replies[0]
    if isinstance(reply, BaseException):
        raise reply
    return reply


class AckedCall(NamedTuple):
    """A script call and the ``WAIT replicas timeout_ms`` sent with it on the connection of the
    node that runs it (``replica_acks``); the fields in the order of
    `waited` after its ``client`` and ``source``."""

    script: Script
    keys: Sequence[str]
    args: Sequence[object]
    replicas: int
    timeout_ms: int

    def command(self, source: bool) -> tuple[object, ...]:
        """The script's command: EVALSHA, or EVAL of its source when ``source``."""
        head = ("EVAL", self.script.source) if source else ("EVALSHA", self.script.sha)
        return (*head, len(self.keys), *self.keys, *self.args)


def waited(
    client: Any,
    source: bool,
    script: Script,
    keys: Sequence[str],
    args: Sequence[Any],
    replicas: int,
    timeout_ms: int,
) -> Any:
    """A pipeline of either face (not run yet: queueing is no I/O) of ``script`` (EVALSHA, or
    EVAL of its source when ``source``) and ``WAIT replicas timeout_ms``."""
    pipe = client.pipeline(transaction=False)
    if source:
        pipe.eval(script.source, len(keys), *keys, *args)
    else:
        pipe.evalsha(script.sha, len(keys), *keys, *args)
    pipe.wait(replicas, timeout_ms)
    return pipe


def acked_replies(replies: list[Any]) -> tuple[Any, int]:
    """The script's reply and the ``WAIT`` count from the replies of a pipeline of `waited`
    (`fencedlease._async.scripts.run_acked`); the script's error raised. A ``WAIT`` that
    answered an error after the script ran (``UNBLOCKED``: a failover turned the primary into a
    replica while it waited) counts no replica: what the script wrote is not known to be on one.
    """
    script_reply, acks = replies
    if isinstance(script_reply, BaseException):
        raise script_reply
    if isinstance(acks, BaseException):
        return script_reply, 0
    if isinstance(acks, bool) or not isinstance(acks, int):
        raise redis.ResponseError(f"WAIT answered {type(acks).__name__}, not an integer")
    return script_reply, acks
