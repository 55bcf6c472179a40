"""backend_from_url / async_backend_from_url and LeaseManager.from_url: which backend each URL
makes, and which URLs are refused."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fencedlease import LeaseManager, RedisBackend, ValidationError
from fencedlease._async.urls import async_backend_from_url
from fencedlease._core.clock import SYSTEM_CLOCK
from fencedlease._core.redact import redact_text, redact_url
from fencedlease._sync.urls import backend_from_url
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import (
    AsyncMemoryBackend,
    AsyncSqliteBackend,
    MemoryBackend,
    SqliteBackend,
)
from fencedlease.testing import FakeClock
from fencedlease_lab.servers.redis import RedisEndpoint, RedisUnavailable, redis_endpoint


def test_memory_url_makes_a_new_memory_backend_on_the_clock() -> None:
    """memory:// gives a fresh MemoryBackend reading the given clock."""
    clock = FakeClock()
    backend = backend_from_url("memory://", prefix="p", clock=clock)
    other = backend_from_url("memory://", prefix="p", clock=clock)
    assert isinstance(backend, MemoryBackend)
    assert isinstance(other, MemoryBackend)
    backend.acquire("k", "o", 10)
    assert other.inspect("k") is None
    clock.advance(10)
    assert backend.inspect("k") is None


def test_sqlite_url_with_three_slashes_is_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///leases.db is leases.db in the working directory."""
    monkeypatch.chdir(tmp_path)
    backend = backend_from_url("sqlite:///sub%20dir.db", prefix="p", clock=SYSTEM_CLOCK)
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.prefix) == ("sub dir.db", "p")
    backend.close()
    assert (tmp_path / "sub dir.db").exists()


def test_sqlite_url_with_four_slashes_is_absolute(tmp_path: Path) -> None:
    """sqlite:////abs/path.db is the absolute path /abs/path.db; busy_timeout_ms from the query."""
    url = f"sqlite:///{tmp_path}/leases.db?busy_timeout_ms=250"
    assert url.startswith("sqlite:////")
    backend = backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK)
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.busy_timeout_ms) == (f"{tmp_path}/leases.db", 250)
    assert os.path.isabs(backend.path)
    backend.close()


def test_sqlite_memory_url_is_private() -> None:
    """sqlite:///:memory: opens a private in-memory database; busy_timeout_ms as a keyword."""
    backend = backend_from_url(
        "sqlite:///:memory:", prefix="p", clock=SYSTEM_CLOCK, busy_timeout_ms=10
    )
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.busy_timeout_ms) == (":memory:", 10)
    assert backend.acquire("k", "o", 1_000).fencing_token == 1


def test_redis_url_makes_an_owning_redis_backend() -> None:
    """redis://, rediss:// and unix:// go to redis-py; no connection is made until a command."""
    for url in ("redis://localhost:1/0", "rediss://localhost:1", "unix:///tmp/none.sock?db=2"):
        backend = backend_from_url(url, prefix="app", clock=SYSTEM_CLOCK, socket_timeout=1)
        assert isinstance(backend, RedisBackend)
        assert backend.prefix == "app"
        backend.close()


@pytest.mark.parametrize(
    ("url", "kwargs", "argument"),
    [
        ("http://x", {}, "url"),
        ("localhost:6379", {}, "url"),
        ("", {}, "url"),
        ("memory://name", {}, "url"),
        ("memory://?x=1", {}, "url"),
        ("memory://", {"busy_timeout_ms": 1}, "busy_timeout_ms"),
        ("sqlite://", {}, "url"),
        ("sqlite:///", {}, "url"),
        ("sqlite://host/x.db", {}, "url"),
        ("sqlite:///x.db?mode=ro", {}, "mode"),
        ("sqlite:///x.db?busy_timeout_ms=soon", {}, "busy_timeout_ms"),
        ("sqlite:///x.db?busy_timeout_ms=5", {"busy_timeout_ms": 5}, "busy_timeout_ms"),
        ("sqlite:///x.db", {"timeout": 5}, "timeout"),
        ("sqlite:///x.db", {"busy_timeout_ms": -5}, "busy_timeout_ms"),
    ],
)
def test_bad_urls_and_options_are_named(
    url: str,
    kwargs: dict[str, object],
    argument: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unknown scheme, a malformed URL or an option the scheme does not take raises
    ValidationError naming it, from both faces."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError) as info:
        backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK, **kwargs)
    assert info.value.argument == argument
    with pytest.raises(ValidationError) as info:
        async_backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK, **kwargs)
    assert info.value.argument == argument


def test_bad_prefix_is_named() -> None:
    """An empty prefix raises ValidationError naming prefix."""
    with pytest.raises(ValidationError) as info:
        backend_from_url("memory://", prefix="", clock=SYSTEM_CLOCK)
    assert info.value.argument == "prefix"


def test_async_urls_make_the_async_twins(tmp_path: Path) -> None:
    """The asyncio face makes AsyncMemoryBackend, AsyncSqliteBackend and an async Redis backend."""
    from fencedlease._async.redis_backend import AsyncRedisBackend

    clock = FakeClock()
    memory = async_backend_from_url("memory://", prefix="p", clock=clock)
    sqlite = async_backend_from_url(f"sqlite:///{tmp_path}/a.db", prefix="p", clock=clock)
    redis_backend = async_backend_from_url("redis://localhost:1", prefix="p", clock=clock)
    assert isinstance(memory, AsyncMemoryBackend)
    assert isinstance(sqlite, AsyncSqliteBackend)
    assert isinstance(redis_backend, AsyncRedisBackend)

    async def main() -> None:
        assert (await memory.acquire("k", "o", 5)).fencing_token == 1
        assert (await sqlite.acquire("k", "o", 5)).fencing_token == 1
        await sqlite.close()
        await redis_backend.close()

    asyncio.run(main())


def test_manager_from_memory_url() -> None:
    """LeaseManager.from_url("memory://") works end to end on the manager's clock."""
    clock = FakeClock()
    with LeaseManager.from_url("memory://", clock=clock) as leases:
        assert isinstance(leases.backend, MemoryBackend)
        first = leases.acquire("job", ttl_ms=100).lease
        assert first is not None
        assert first.fencing_token == 1
        clock.advance(100)
        second = leases.acquire("job", ttl_ms=100).lease
        assert second is not None
        assert second.fencing_token == 2


def test_manager_from_redis_url_keeps_its_prefix() -> None:
    """LeaseManager.from_url still builds a RedisBackend with the prefix for redis:// URLs."""
    with LeaseManager.from_url("redis://localhost:1/0", prefix="app") as leases:
        assert isinstance(leases.backend, RedisBackend)
        assert leases.backend.prefix == "app"


# -- secrets: a password in a URL is shown as *** everywhere -------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:s3cret@127.0.0.1:6379/0", "redis://user:***@127.0.0.1:6379/0"),
        ("redis://:s3cret@h", "redis://:***@h"),
        ("redis://s3cret@h/0", "redis://***@h/0"),
        ("rediss://u:s3c@ret@h:6380/1", "rediss://u:***@h:6380/1"),
        ("unix://u:s3cret@/tmp/redis.sock?db=1", "unix://u:***@/tmp/redis.sock?db=1"),
        ("rdis://u:s3cret@h/", "rdis://u:***@h/"),
        ("redis:/u:s3cret@h/", "***@h/"),
        ("u:s3cret@host", "***@host"),
        ("redis://u:s3c/ret@h/0", "redis://***@h/0"),
        ("redis://u:s3cret@[::1/", "redis://u:***@[::1/"),
        ("redis://h/0?password=s3cret&db=1", "redis://h/0?password=***&db=1"),
        ("host=h password=s3cret dbname=d", "host=h password=*** dbname=d"),
        ("postgresql://u:s3%40cret@h/db", "postgresql://u:***@h/db"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("sqlite:///a@b.db", "sqlite:///a@b.db"),
        ("memory://", "memory://"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    """The userinfo's password (a lone userinfo word, a password= field) becomes ***, also in
    URLs that do not parse; a URL without secrets is unchanged."""
    assert redact_url(url) == shown


def test_redact_text_scrubs_the_url_and_its_password_anywhere() -> None:
    """A message that echoes the URL or the bare (or percent-decoded) password loses them."""
    url = "redis://user:s3%21cret@h:6379/0"
    message = f"cannot use {url}: AUTH s3!cret refused (s3%21cret)"
    assert redact_text(message, url) == (
        "cannot use redis://user:***@h:6379/0: AUTH *** refused (***)"
    )


FROM_URL: list[Callable[..., object]] = [LeaseManager.from_url, AsyncLeaseManager.from_url]


def _chain(exc: BaseException | None) -> str:
    """Every message of an exception and its causes/contexts, as a traceback would show."""
    texts = []
    while exc is not None:
        texts.append(f"{type(exc).__name__}: {exc} {exc.args!r}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(texts)


@pytest.mark.parametrize(
    ("url", "kwargs", "argument"),
    [
        ("rdis://user:s3cret@127.0.0.1:6379/0", {}, "url"),
        ("redis//user:s3cret@127.0.0.1:6379/0", {}, "url"),
        ("redis://user:s3cret@127.0.0.1:abc/0", {}, "url"),
        ("redis://user:s3cret@127.0.0.1:99999/0", {}, "url"),
        ("redis://user:s3cret@127.0.0.1:\u0967\u0968/0", {}, "url"),
        ("redis://user:s3cret@[::1/0", {}, "url"),
        ("redis://user:s3cret@127.0.0.1:6379/0?db=x", {}, "db"),
        ("redis://user:s3cret@127.0.0.1:6379/0?colour=red", {}, "colour"),
        ("redis://user:s3cret@127.0.0.1:6379/0?ssl_cert_reqs=none", {}, "ssl_cert_reqs"),
        ("rediss://user:s3cret@127.0.0.1:6379/0?ssl_cert_reqs=bogus", {}, "url"),
        ("redis://user:s3cret@127.0.0.1:6379/0", {"colour": "red"}, "colour"),
        ("memory://user:s3cret@h", {}, "url"),
        ("memory://user:s3cret@[", {}, "url"),
        ("redis://user:s3cret@[::1", {"colour": "red"}, "url"),
        ("sqlite://user:s3cret@h/x.db", {}, "url"),
    ],
)
def test_bad_urls_never_show_the_password(
    url: str, kwargs: dict[str, object], argument: str
) -> None:
    """A mistyped scheme, a bad port or option: ValidationError naming it, on both faces, with
    the password in neither the message nor any exception chained to it."""
    for face in FROM_URL:
        with pytest.raises(ValidationError) as info:
            face(url, **kwargs)
        assert info.value.argument == argument
        assert "s3cret" not in _chain(info.value)
        assert "***" in str(info.value)


def test_ssl_cert_reqs_none_is_accepted_on_rediss() -> None:
    """rediss://...?ssl_cert_reqs=none is redis-py's documented way to skip verification: it is
    taken (no I/O yet), on both faces."""
    url = "rediss://127.0.0.1:6379/0?ssl_cert_reqs=none"
    backend = backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK)
    assert isinstance(backend, RedisBackend)
    backend.close()
    async_backend = async_backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK)
    asyncio.run(async_backend.close())


@pytest.mark.parametrize(
    ("url", "argument"),
    [
        ("sqlite:///a\x00b.db", "url"),
        ("sqlite:///a%00b.db", "url"),
        ("sqlite:///a%ffb.db", "url"),
        ("sqlite:///x.db?busy_timeout_ms=\u0967\u0968", "busy_timeout_ms"),
        ("sqlite:///x.db?busy_timeout_ms=\u00b2", "busy_timeout_ms"),
        ("sqlite:///x.db?busy_timeout_ms=99999999999999999999", "busy_timeout_ms"),
    ],
)
def test_sqlite_urls_with_nul_or_non_ascii_digits_are_refused(
    url: str, argument: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NUL (raw or %00) or undecodable path, and digits other than ASCII ones (which
    str.isdigit admits), raise ValidationError naming the part, on both faces; no file is made."""
    monkeypatch.chdir(tmp_path)
    for face in FROM_URL:
        with pytest.raises(ValidationError) as info:
            face(url)
        assert info.value.argument == argument
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("url", "kwargs", "argument"),
    [
        ("redis://127.0.0.1:1/0", {"socket_timeout": "x"}, "socket_timeout"),
        ("redis://127.0.0.1:1/0", {"socket_timeout": -1}, "socket_timeout"),
        ("redis://127.0.0.1:1/0", {"socket_timeout": 0}, "socket_timeout"),
        ("redis://127.0.0.1:1/0", {"socket_timeout": True}, "socket_timeout"),
        ("redis://127.0.0.1:1/0?socket_timeout=nan", {}, "socket_timeout"),
        ("redis://127.0.0.1:1/0?socket_connect_timeout=inf", {}, "socket_connect_timeout"),
        ("redis://127.0.0.1:1/0", {"health_check_interval": "x"}, "health_check_interval"),
        ("redis://127.0.0.1:1/0", {"encoding": "no-such-codec"}, "encoding"),
        ("redis://127.0.0.1:1/0", {"encoding_errors": "no-such-handler"}, "encoding_errors"),
    ],
)
def test_redis_option_values_refused_before_the_first_command(
    url: str, kwargs: dict[str, object], argument: str
) -> None:
    """Values redis-py stores and only trips on when it connects (then as TypeError, ValueError
    or LookupError) are refused by from_url, naming the option, on both faces."""
    for face in FROM_URL:
        with pytest.raises(ValidationError) as info:
            face(url, **kwargs)
        assert info.value.argument == argument


def test_redis_option_values_in_range_are_taken() -> None:
    """A positive timeout, a health-check interval of 0 and a known encoding pass."""
    for face in FROM_URL:
        face(
            "redis://127.0.0.1:1/0?socket_timeout=1.5",
            health_check_interval=0,
            encoding="latin-1",
        )


@settings(max_examples=300, deadline=None)
@given(
    password=st.text(st.characters(blacklist_categories=["Cs"]), min_size=4, max_size=12),
    scheme=st.sampled_from(["redis", "rediss", "unix", "rdis", "postgresql"]),
    tail=st.sampled_from(["/0", ":6379/0", "", "?db=1", "/tmp/s.sock"]),
)
def test_redact_url_hides_any_password(password: str, scheme: str, tail: str) -> None:
    """Whatever the password holds (``@``, ``/``, ``:``, ``?``, ``#``, spaces, non-ASCII), it is
    not in ``redact_url`` of a URL that carries it, and the host is still shown."""
    url = f"{scheme}://user:{password}@host.example{tail}"
    assume(password not in f"{scheme}://user:@host.example{tail}")
    shown = redact_url(url)
    assert password not in shown
    assert "***" in shown
    assert shown.endswith(f"@host.example{tail}")


@given(st.text(st.characters(blacklist_categories=()), max_size=40))
def test_redact_url_never_raises(text: str) -> None:
    """Any text at all (lone surrogates, NUL, brackets) gives a string back."""
    assert isinstance(redact_url(text), str)
    assert isinstance(redact_text(text, text), str)


def test_a_redis_endpoint_prints_without_its_password() -> None:
    """RedisEndpoint (FENCEDLEASE_URL, what scripts print as "Redis at ..."): display_url
    and repr show *** for the password; url keeps it for connecting."""
    endpoint = RedisEndpoint("redis://user:s3cret@db.example:6379/0", "external")
    assert endpoint.display_url == "redis://user:***@db.example:6379/0"
    assert "s3cret" not in repr(endpoint)
    assert endpoint.url == "redis://user:s3cret@db.example:6379/0"


def test_the_redis_endpoint_takes_the_url_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis_endpoint takes FENCEDLEASE_URL, else the deprecated FENCEDLEASE_REDIS_URL with a
    DeprecationWarning; a URL of no single Redis server (a service's memory://) is refused, with
    its password shown as ***, instead of being handed to the tests as a Redis."""
    url = "redis://user:s3cret@db.example:6379/0"
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.setenv("FENCEDLEASE_REDIS_URL", url)
    warns = pytest.warns(DeprecationWarning, match="set FENCEDLEASE_URL instead")
    with warns, redis_endpoint() as endpoint:
        assert (endpoint.url, endpoint.kind) == (url, "external")
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL")
    for other in ("memory://", "redis+cluster://user:s3cret@db.example:7000"):
        monkeypatch.setenv("FENCEDLEASE_URL", other)
        with pytest.raises(RedisUnavailable) as raised, redis_endpoint():
            pass
        assert str(raised.value) == (
            f"FENCEDLEASE_URL names no single Redis server ({redact_url(other)!r}): give a"
            " redis://, rediss:// or unix:// URL, or unset it to start a redis-server"
        )
        assert "s3cret" not in str(raised.value)


# -- secrets in every form a URL or a libpq DSN can carry them ------------------------------------

#: Passwords of any printable character: spaces, both quotes, backslashes, ; @ / % & = # + and
#: non-ASCII letters.
PASSWORDS = st.text(
    st.one_of(
        st.characters(min_codepoint=32, max_codepoint=126),
        st.sampled_from(["é", "€", "\u00a0", "日"]),
    ),
    min_size=1,
    max_size=16,
)
DSN_EQUALS = st.sampled_from(["=", " = ", "= ", " =", "  =\t"])


def _libpq_quoted(password: str) -> str:
    """``password`` as a single-quoted libpq value (backslash and quote escaped)."""
    return "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("host=db password = hunter2 user=x", "host=db password = *** user=x"),
        ("host=db password='s3cr3t word' user=x", "host=db password=*** user=x"),
        ("host=db password='it\\'s a \\\\ secret' user=x", "host=db password=*** user=x"),
        ("host=db password=ab;cd user=x", "host=db password=*** user=x"),
        ("host=db password=ab\\ cd user=x", "host=db password=*** user=x"),
        ("host=db sslpassword = 'k p' sslmode=on", "host=db sslpassword = *** sslmode=on"),
        ('host=db PASSWORD="hunter2 x" user=x', "host=db PASSWORD=*** user=x"),
        ("host=db password='unclosed user=x", "host=db password=***"),
        ("redis://h/0?password=a;b c&db=1", "redis://h/0?password=***&db=1"),
        ("postgresql:///db?host=/tmp&password=hunter2%26x", "postgresql:///db?host=/tmp&password=***"),
    ],
)  # fmt: skip
def test_redact_url_knows_every_libpq_dsn_form(dsn: str, shown: str) -> None:
    """libpq's key = value syntax: spaces around =, single quotes with backslash escapes, an
    unquoted value up to the next whitespace (a ; and an escaped space are part of it)."""
    assert redact_url(dsn) == shown


@settings(max_examples=300, deadline=None)
@given(password=PASSWORDS, equals=DSN_EQUALS, quoted=st.booleans())
def test_a_dsn_password_is_always_redacted_exactly(
    password: str, equals: str, quoted: bool
) -> None:
    """Any password in a libpq DSN, quoted or (when libpq allows) not: exactly its value is
    replaced, the other fields kept."""
    bare_ok = not any(c.isspace() for c in password) and password[0] not in "'\""
    value = password.replace("\\", "\\\\") if bare_ok and not quoted else _libpq_quoted(password)
    dsn = f"host=db port=5432 password{equals}{value} user=x dbname=d"
    assert redact_url(dsn) == f"host=db port=5432 password{equals}*** user=x dbname=d"


@settings(max_examples=300, deadline=None)
@given(
    password=PASSWORDS,
    scheme=st.sampled_from(["redis", "rediss", "postgresql"]),
    encode=st.sampled_from([quote, quote_plus]),
)
def test_a_url_password_is_always_redacted_exactly(
    password: str, scheme: str, encode: Callable[..., str]
) -> None:
    """Any password, percent-encoded in the userinfo or in a ?password= query option: exactly
    it is replaced."""
    secret = encode(password, safe="")
    assert (
        redact_url(f"{scheme}://user:{secret}@host.example:6379/0")
        == f"{scheme}://user:***@host.example:6379/0"
    )
    assert (
        redact_url(f"{scheme}://host.example/0?db=1&password={secret}&ssl_cert_reqs=none")
        == f"{scheme}://host.example/0?db=1&password=***&ssl_cert_reqs=none"
    )


@settings(max_examples=300, deadline=None)
@given(password=PASSWORDS, form=st.sampled_from(["userinfo", "query", "dsn"]))
def test_redact_text_never_shows_a_password(password: str, form: str) -> None:
    """A message that echoes the URL (or DSN), the password raw, percent-encoded or quoted:
    none of them is left in redact_text's output."""
    assume("*" not in password)  # "***" itself would hold it
    if form == "userinfo":
        url = f"redis://user:{quote(password, safe='')}@host.example:6379/0"
    elif form == "query":
        url = f"redis://host.example:6379/0?password={quote(password, safe='')}"
    else:
        url = f"host=db password={_libpq_quoted(password)} user=x"
    message = (
        f"cannot connect to {url}: auth {password} refused"
        f" ({quote(password, safe='')}, {_libpq_quoted(password)})"
    )
    shown = redact_text(message, url)
    assert password not in shown
    assert quote(password, safe="") not in shown


@pytest.mark.parametrize(
    ("query", "argument"),
    [
        ("socket_read_size=-1", "socket_read_size"),
        ("socket_read_size=0", "socket_read_size"),
        ("db=-1", "db"),
    ],
)
def test_integer_url_options_out_of_bounds_are_refused(query: str, argument: str) -> None:
    """An integer option redis-py would only trip on later (recv with a negative size, SELECT of
    a negative database) is a ValidationError naming it at from_url, on both faces, with nothing
    sent."""
    for make in (backend_from_url, async_backend_from_url):
        with pytest.raises(ValidationError) as info:
            make(f"redis://127.0.0.1:1/0?{query}", prefix="p", clock=SYSTEM_CLOCK)
        assert info.value.argument == argument
