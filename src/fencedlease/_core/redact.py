"""Secrets out of text: [`redact_url`][fencedlease.redact_url] and
[`redact_text`][fencedlease.redact_text], one redaction for every message, log line and report that
shows a URL or a DSN (or an error of another library that may echo one).

What counts as a secret: the password of a URL's userinfo (the whole userinfo when it has no
``:``), and the value of every query option or libpq ``key=value`` DSN field whose name holds
``pass``, ``pwd``, ``secret``, ``token`` or ``auth``, in any of libpq's quoting forms.

The rule every message, exception and log line about a URL follows: no piece of a secret of
`PIECE` (3) characters or more is left in it. [`redact_text`][fencedlease.redact_text] replaces
the secret wherever it occurs whole, then every run of text made of such pieces (another library's
message may quote a password cut at a ``/`` or a ``#``: redis-py's "Port could not be cast to
integer value as '...'"), so a host name or a port that equals the password is hidden as well.
`url_error` builds the library's [`ValidationError`][fencedlease.ValidationError] about a URL by
that rule, and `ambiguous_url` names the URLs no parser can read the same way twice.
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from fencedlease._core.errors import ValidationError

__all__ = [
    "PIECE",
    "REDACTED",
    "ambiguous_url",
    "redact_secrets",
    "redact_text",
    "redact_url",
    "url_error",
]

#: What stands in a secret's place.
REDACTED = "***"
#: The length of the shortest piece of a secret that no redacted text holds.
PIECE = 3

# The names of query options and key=value DSN fields whose value is a secret (``password``,
# ``sslpassword``, ``passwd``, ``pwd``, ``secret``, ``token``, ``auth``...), then the ``=``.
_SECRET_FIELD = re.compile(
    r"(?i)(?<![a-z0-9_])([a-z_]*(?:pass|pwd|secret|token|auth)[a-z0-9_]*)(\s*)=(\s*)"
)


def _field_value_end(text: str, start: int, in_query: bool) -> int:
    """Where the value of a secret field starting at ``start`` ends (exclusive).

    In a URL query the value runs to the next ``&`` or ``#``. Otherwise it is a libpq
    ``key = value`` field: a value in single (or double) quotes runs to the closing quote, a
    backslash escaping the next character (``'s3cr3t \\' word'``); an unquoted one runs to the
    next whitespace, a backslash escaping the next character too (libpq's conninfo syntax). An
    unclosed quote runs to the end.
    """
    if in_query:
        ends = [i for i in (text.find("&", start), text.find("#", start)) if i >= 0]
        return min(ends, default=len(text))
    i, n = start, len(text)
    quote_char = text[i] if i < n and text[i] in "'\"" else ""
    if quote_char:
        i += 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if quote_char and c == quote_char:
            return i + 1
        if not quote_char and c.isspace():
            return i
        i += 1
    return n


def _secret_fields(text: str) -> list[tuple[int, int, str]]:
    """The secret fields of ``text``: ``(value_start, value_end, redacted)`` for each, where
    ``redacted`` is the field with ``***`` for its value (the spaces around ``=`` kept)."""
    fields = []
    query = text.find("?", text.find("://") + 1) if "://" in text else -1
    pos = 0
    while (found := _SECRET_FIELD.search(text, pos)) is not None:
        start = found.end()
        before = text[found.start() - 1] if found.start() > 0 else ""
        in_query = 0 <= query < found.start() and before in "?&;"
        end = _field_value_end(text, start, in_query)
        shown = f"{found.group(1)}{found.group(2)}={found.group(3)}{REDACTED}"
        fields.append((found.start(), end, shown))
        pos = max(end, found.end())
    return fields


def _redact_fields(text: str) -> str:
    parts, pos = [], 0
    for start, end, shown in _secret_fields(text):
        parts += [text[pos:start], shown]
        pos = end
    return "".join(parts) + text[pos:]


def _unescape(value: str) -> str:
    """A libpq field value as libpq reads it: the quotes dropped, backslash escapes undone."""
    if value[:1] in ("'", '"'):
        value = value[1:-1] if len(value) > 1 and value[-1] == value[0] else value[1:]
    return re.sub(r"\\(.)", r"\1", value, flags=re.S)


def redact_url(url: object) -> str:
    """``url`` as text with its secrets replaced by ``***``: the password of the userinfo
    (``redis://user:***@host/0``), the whole userinfo when it has no ``:`` (a lone word before
    ``@`` may be a password: ``redis://***@host``), and the value of a ``password=``
    (``sslpassword=``, ``secret=``, ``token=``...) query option (up to the next ``&``) or
    libpq key=value DSN field in any of libpq's forms: spaces around ``=``, a value in single
    quotes with backslash escapes (``password = 'a \\' b'``), an unquoted one up to the next
    whitespace (``password=ab;cd``).

    Never raises, and parses nothing it could fail on: when the text after ``://`` (or, with no
    ``://``, from the start) holds an ``@`` beyond the authority (a password with a ``/`` or an
    ``@`` in it, a malformed URL), everything up to the last ``@`` is replaced. Anything not a
    str is shown by its ``repr``. Shapes: ``str -> str``; a URL without secrets comes back
    unchanged.
    """
    text = url if isinstance(url, str) else repr(url)
    text = _redact_fields(text)
    at = text.rfind("@")
    if at < 0:
        return text
    sep = text.find("://")
    if sep < 0 or sep > at:
        return f"{REDACTED}{text[at:]}"
    start = sep + 3
    if text.startswith("/", start):
        return text  # no authority (sqlite:///a@b.db): an @ in a path is not a userinfo
    end = min((i for i in (text.find(c, start) for c in "/?#") if i >= 0), default=len(text))
    userinfo_end = text.rfind("@", start, end)
    if userinfo_end != at:  # none in the authority, or another later: ambiguous, hide it all
        return f"{text[:start]}{REDACTED}{text[at:]}"
    user, colon, _ = text[start:userinfo_end].partition(":")
    shown = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{text[:start]}{shown}{text[userinfo_end:]}"


def redact_text(text: object, url: object) -> str:
    """``text`` (an error message, a log line) with ``url`` and the secrets in it replaced as
    [`redact_url`][fencedlease.redact_url] does, wherever they occur: raw, percent-decoded (``+`` as
    a space too), percent-encoded, quoted as by ``repr``, or as libpq reads a quoted DSN value;
    then every run of text made of pieces of 3 characters or more of those secrets (a password
    cut short, or a host or port equal to it) is replaced by ``***`` too. For messages of other
    libraries that may echo the URL or its password. Never raises: a ``text`` that is not a str
    is shown by its ``repr``."""
    if not isinstance(text, str):
        text = repr(text)
    if not isinstance(url, str) or not url:
        return text
    text = text.replace(url, redact_url(url))
    return _redact_fields(redact_secrets(text, _secrets(url)))


def redact_secrets(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``***`` in every form of
    [`redact_text`][fencedlease.redact_text], then every run of pieces of `PIECE` characters or
    more of the secret as written or read (decoded, unescaped; not of the encodings computed
    here: a ``%2F`` of the message's own is no piece of a password ``a/b``). Shapes:
    ``(str, list[str]) -> str``; empty secrets are ignored."""
    plains: set[str] = set()
    for secret in secrets:
        plains.update((secret, unquote(secret), unquote_plus(secret), _unescape(secret)))
    plains.update([repr(plain)[1:-1] for plain in plains])
    forms = set(plains)
    for plain in plains:
        forms.add(quote(plain, safe="", errors="surrogatepass"))
        forms.add(quote_plus(plain, safe="", errors="surrogatepass"))
    for form in sorted(forms, key=len, reverse=True):  # longest first: no partial leftovers
        if form:
            text = text.replace(form, REDACTED)
    pieces = {plain[i : i + PIECE] for plain in plains for i in range(len(plain) - PIECE + 1)}
    pieces.discard(REDACTED)  # what stands in a secret's place is no piece of it
    return _mask_pieces(text, pieces)


def _mask_pieces(text: str, pieces: set[str]) -> str:
    """``text`` with every run of overlapping ``pieces`` (all of one length) as ``***``; again
    until none is left, since a ``***`` put in may make a new one with its neighbours."""
    while pieces:
        hidden = [False] * len(text)
        for i in range(len(text) - PIECE + 1):
            if text[i : i + PIECE] in pieces:
                hidden[i : i + PIECE] = [True] * PIECE
        if not any(hidden):
            return text
        parts, i = [], 0
        while i < len(text):
            if not hidden[i]:
                parts.append(text[i])
                i += 1
                continue
            while i < len(text) and hidden[i]:
                i += 1
            parts.append(REDACTED)
        masked = "".join(parts)
        if masked == text:
            return text
        text = masked
    return text


def _secrets(url: str) -> list[str]:
    """The secret strings of ``url``: the userinfo's password (or the whole userinfo when it has
    no ``:``) and the values of secret query and DSN fields (as written; quoted ones also
    unquoted)."""
    found = []
    for start, end, shown in _secret_fields(url):
        value = url[start + len(shown) - len(REDACTED) : end]
        found += [value, _unescape(value)]
    at = url.rfind("@")
    if at >= 0:
        sep = url.find("://")
        userinfo = url[sep + 3 if 0 <= sep < at else 0 : at]
        if not userinfo.startswith("/"):  # sqlite:///a@b.db: a path, no userinfo
            user, colon, password = userinfo.partition(":")
            found.append(password if colon else user)
    return [secret for secret in found if secret]


def ambiguous_url(url: str) -> bool:
    """Whether ``url`` has an ``@`` after the first ``/``, ``?`` or ``#`` that follows its
    ``://``: a password holding a raw ``/``, ``?`` or ``#`` (``redis://:pa/ss@host``), which
    redis-py reads as a host and a port made of the password's first part, or an ``@`` in a path
    or a query (``unix:///tmp/a@b.sock``). The two cannot be told apart; either one
    percent-encoded (``%2F``, ``%3F``, ``%23``, ``%40``) is read as meant."""
    rest = url.partition("://")[2]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return "@" in rest[end:]


def url_error(
    url: str, message: str, argument: str = "url", detail: object = None
) -> ValidationError:
    """The [`ValidationError`][fencedlease.ValidationError] about ``url``, naming ``argument``:
    ``message; got '<url>'`` (then ``: detail``, another library's message), the URL shown by
    [`redact_url`][fencedlease.redact_url] and the whole text by
    [`redact_text`][fencedlease.redact_text]. Raise it outside any ``except`` block, so that no
    exception holding the URL is chained to it."""
    text = f"{message}; got {redact_url(url)!r}"
    if detail is not None:
        text += f": {detail}"
    return ValidationError(argument, redact_text(text, url))
