"""No piece of a URL's password (3 characters or more) in any message, exception chain or log
line of the entry points that take a URL: ``from_url`` and ``from_env`` on both faces (every URL
form), ``check_health``, and the CLI commands. No Redis is needed: nothing listens where the URLs
point, or the URL is refused before any I/O."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease import BackendError, LeaseManager, RedisBackend, ValidationError
from fencedlease.aio import AsyncLeaseManager
from fencedlease.cli.commands import main

#: Where the URLs point: port 1 refuses at once.
TEMPLATES = [
    "redis://user:{pw}@127.0.0.1:1/0",
    "redis://:{pw}@127.0.0.1:1/0",
    "rediss://:{pw}@127.0.0.1:1/0",
    "redis://:{pw}@127.0.0.1:1/0?db=x",
    "unix://:{pw}@/nonexistent-dir/redis.sock",
    "redis+sentinel://:{pw}@127.0.0.1:1/service",
    "redis+cluster://:{pw}@127.0.0.1:1",
]
#: The characters a URL gives a meaning to, and a few that are not ASCII.
SPECIAL = "/#?@:% +&=[]é€日"
PASSWORDS = st.text(
    st.one_of(st.characters(min_codepoint=33, max_codepoint=126), st.sampled_from(SPECIAL)),
    min_size=3,
    max_size=16,
)


def _sync_from_url(url: str) -> None:
    LeaseManager.from_url(url).close()


def _aio_from_url(url: str) -> None:
    async def make() -> None:
        await AsyncLeaseManager.from_url(url).close()

    asyncio.run(make())


def _sync_from_env(url: str) -> None:
    LeaseManager.from_env({"FENCEDLEASE_URL": url}).close()


def _aio_from_env(url: str) -> None:
    async def make() -> None:
        await (await AsyncLeaseManager.from_env({"FENCEDLEASE_URL": url})).close()

    asyncio.run(make())


ENTRY_POINTS: dict[str, Callable[[str], None]] = {
    "LeaseManager.from_url": _sync_from_url,
    "AsyncLeaseManager.from_url": _aio_from_url,
    "LeaseManager.from_env": _sync_from_env,
    "AsyncLeaseManager.from_env": _aio_from_env,
}


def chain_texts(exc: BaseException) -> list[str]:
    """The ``str`` and ``repr`` of ``exc`` and of every exception chained to it."""
    texts: list[str] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is not None:
            texts += [repr(current), str(current)]
            pending += [current.__cause__, current.__context__]
    return texts


def pieces(password: str) -> set[str]:
    """Every 3-character piece of ``password``."""
    return {password[i : i + 3] for i in range(len(password) - 2)}


@contextmanager
def captured_logs() -> Iterator[list[str]]:
    """Every log record of any logger while inside, formatted."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler, root = Keep(logging.DEBUG), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def shown(entry: Callable[[str], None], url: str) -> str:
    """All the text ``entry(url)`` lets out: the error's ``str``, ``repr`` and chain, and the
    log lines. Only the library's typed errors may escape."""
    with captured_logs() as lines:
        try:
            entry(url)
        except (ValidationError, BackendError) as exc:
            return "\n".join([*chain_texts(exc), *lines])
    return "\n".join(lines)


@cache
def fixed_text(entry_name: str) -> str:
    """What ``entry_name`` shows whatever the password: its messages for passwords of two
    characters (too short to have a piece), one for each special character."""
    entry = ENTRY_POINTS[entry_name]
    texts = [template.format(pw="") for template in TEMPLATES]
    for c in ["a", *SPECIAL]:
        texts += [shown(entry, template.format(pw=f"x{c}")) for template in TEMPLATES]
    return "\n".join(texts)


@settings(max_examples=60, deadline=None)
@given(
    password=PASSWORDS,
    template=st.sampled_from(TEMPLATES),
    entry_name=st.sampled_from(sorted(ENTRY_POINTS)),
)
def test_no_entry_point_shows_a_piece_of_the_password(
    password: str, template: str, entry_name: str
) -> None:
    """Whatever the password holds, no 3-character piece of it is in the error's str, repr or
    chain, nor in a log line, but for the pieces every password's message shows (its fixed text)."""
    text = shown(ENTRY_POINTS[entry_name], template.format(pw=password))
    public = fixed_text(entry_name)
    assert sorted(p for p in pieces(password) if p in text and p not in public) == []


@pytest.mark.parametrize("entry_name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("c", ["/", "#", "?"])
def test_a_raw_slash_hash_or_question_mark_in_the_password_is_refused(
    entry_name: str, c: str
) -> None:
    """A password with a raw ``/``, ``#`` or ``?`` (redis-py would read its first part as a host
    and a port): ValidationError naming the URL (its variable for from_env), the password hidden
    whole, in the error and in the chain."""
    url = f"redis://user:abc{c}def9876@127.0.0.1:6390/0"
    with pytest.raises(ValidationError) as info:
        ENTRY_POINTS[entry_name](url)
    prefix = "FENCEDLEASE_URL: " if "from_env" in entry_name else ""
    assert info.value.argument == ("FENCEDLEASE_URL" if prefix else "url")
    assert str(info.value) == (
        f"{prefix}url has an '@' after a '/', '?' or '#': percent-encode a '/', '?' or '#' in"
        " the password (%2F, %3F, %23) or an '@' in the path or the query (%40);"
        " got 'redis://***@127.0.0.1:6390/0'"
    )
    assert info.value.__cause__ is None
    assert [t for t in chain_texts(info.value) if "abc" in t or "9876" in t] == []


def test_the_password_percent_encoded_is_taken() -> None:
    """The same password percent-encoded is read as meant: the client's password holds the
    ``/``."""
    with LeaseManager.from_url(f"redis://:{quote('abc/def9876', safe='')}@127.0.0.1:1/0") as m:
        assert isinstance(m.backend, RedisBackend)
        assert m.backend.client.connection_pool.connection_kwargs["password"] == "abc/def9876"


def test_a_password_equal_to_the_host_is_hidden_in_the_host_too() -> None:
    """A refused option of a URL whose password is its host name: the host is shown as ``***``
    as well, and redis-py's message (which names no secret) stays in ``__cause__``."""
    with pytest.raises(ValidationError) as info:
        LeaseManager.from_url("redis://:localhost@localhost:1/0?db=x")
    assert info.value.argument == "db"
    assert str(info.value) == (
        "not a usable Redis URL with these options; got 'redis://:***@***:1/0?db=x':"
        " Invalid value for 'db' in connection URL."
    )
    assert str(info.value.__cause__) == "Invalid value for 'db' in connection URL."


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: a connect to it is refused, and no one else takes it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def _health(face: str, url: str) -> None:
    if face == "sync":
        with LeaseManager.from_url(url) as manager:
            manager.check_health(60_000)  # a refusal answers at once; no bound trips under load
        return

    async def check() -> None:
        async with AsyncLeaseManager.from_url(url) as manager:
            await manager.check_health(
                60_000
            )  # a refusal answers at once; no bound trips under load

    asyncio.run(check())


@pytest.mark.parametrize("face", ["sync", "aio"])
def test_check_health_hides_a_host_or_port_equal_to_the_password(
    face: str, closed_port: int
) -> None:
    """check_health of a server that refuses: BackendError whose message shows the host and the
    port that equal the password as ``***``, with no exception chained that names them."""
    # asyncio's connect names the address again: "Connect call failed" (its "cal" is a piece)
    refused = {
        "sync": ("Connection refused.", "Connection refused."),
        "aio": (
            f"Connect ***l failed ('127.0.0.1', {closed_port}).",
            "Connect call failed ('127.0.0.1', ***).",
        ),
    }[face]
    for url, message in [
        (
            f"redis://:localhost@localhost:{closed_port}/0",
            f"health check: PING: ConnectionError: Error 111 connecting to ***:{closed_port}."
            f" {refused[0]}",
        ),
        (
            f"redis://:{closed_port}@127.0.0.1:{closed_port}/0",
            "health check: PING: ConnectionError: Error 111 connecting to 127.0.0.1:***."
            f" {refused[1]}",
        ),
    ]:
        with pytest.raises(BackendError) as info:
            _health(face, url)
        assert str(info.value) == message
        assert info.value.sent == "no"
        assert info.value.__cause__ is None


@settings(max_examples=25, deadline=None)
@given(password=PASSWORDS.filter(lambda p: "\x00" not in p), face=st.sampled_from(["sync", "aio"]))
def test_check_health_never_shows_a_socket_path_that_holds_the_password(
    password: str, face: str
) -> None:
    """A unix socket path that holds the password (percent-encoded in the URL): the error of
    check_health and its chain show no 3-character piece of it, but for the fixed text."""
    secret = quote(password, safe="")
    url = f"unix://:{secret}@/nonexistent-dir/{secret}"
    with pytest.raises(BackendError) as info:
        _health(face, url)
    text = "\n".join(chain_texts(info.value))
    public = "health check: PING: ConnectionError: Error 2 connecting to /nonexistent-dir/***."
    public += " No such file or directory. FileNotFoundError [Errno 2] BackendError"
    assert sorted(p for p in pieces(password) if p in text and p not in public) == []


# -- the CLI -------------------------------------------------------------------------------------

CLI_PASSWORDS = ["Zq/9#Kx@w?%ü", "pa ss:wo%rd", "日本語パスワード", "s3cr3t#frag", "a?b=c&d"]
COMMANDS = (
    ["doctor"],
    ["doctor", "--json"],
    ["list"],
    ["inspect", "k"],
    ["release", "k", "--force", "--yes"],
)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_PREFIX", raising=False)


@pytest.mark.parametrize("password", CLI_PASSWORDS)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_no_operator_command_prints_a_piece_of_the_password(
    command: list[str], password: str, closed_port: int
) -> None:
    """doctor, list, inspect and release, with the password raw in the URL (refused, exit 2) or
    percent-encoded (the server refuses): no 3-character piece of it on stdout or stderr."""
    for secret in (password, quote(password, safe="")):
        url = f"redis://user:{secret}@127.0.0.1:{closed_port}/0"
        result = CliRunner().invoke(main, [*command, "--url", url])
        assert result.exit_code in (1, 2), result.output
        output = result.stdout + result.stderr
        assert sorted(p for p in pieces(password) | pieces(secret) if p in output) == []


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_host_equal_to_the_password_is_not_printed(command: list[str], closed_port: int) -> None:
    """The password is the host's name: no command prints the host either."""
    url = f"redis://:localhost@localhost:{closed_port}/0"
    result = CliRunner().invoke(main, [*command, "--url", url])
    assert result.exit_code in (1, 2)
    assert "loc" not in result.stdout + result.stderr
    assert "***" in result.stdout + result.stderr


@pytest.mark.parametrize("password", CLI_PASSWORDS)
def test_check_refuses_a_url_without_printing_a_piece_of_the_password(
    password: str, tmp_path: Path
) -> None:
    """fencedlease check --redis-url with a raw special character in the password: exit 2
    before any process starts, nothing of the password on stdout or stderr."""
    url = f"redis://user:{password}@127.0.0.1:1/0"
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["check", "--redis-url", url, "--out", str(out)])
    assert result.exit_code == 2
    output = result.stdout + result.stderr
    assert sorted(p for p in pieces(password) if p in output) == []


def test_the_pytest_plugin_shows_no_piece_of_the_password(tmp_path: Path) -> None:
    """FENCEDLEASE_REDIS_URL with a raw ``/`` in the password: the plugin's ``lease_manager``
    errors with the library's ValidationError, and pytest's output holds no piece of it."""
    import subprocess

    password = "Zq/9#Kx@w?%ü"
    test = tmp_path / "test_uses_redis.py"
    test.write_text(
        "import pytest\n\n"
        "@pytest.mark.fencedlease_backends('redis')\n"
        "def test_it(lease_manager):\n"
        "    pass\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
        "FENCEDLEASE_REDIS_URL": f"redis://:{password}@127.0.0.1:1/0",
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(test)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    output = run.stdout + run.stderr
    assert "the store's URL is refused: url has an '@' after a '/', '?' or '#'" in output
    assert sorted(p for p in pieces(password) if p in output) == []
