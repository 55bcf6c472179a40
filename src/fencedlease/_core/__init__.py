"""The rules with no I/O, shared by both faces and every backend: lease state, acquire
attempts and renewal decisions, the renewal schedule, what a semaphore decides, validation, owner
tokens and fencing rules (and the in-memory fenced resource, the reference for every store),
events, errors, clocks, redaction, the ``FENCEDLEASE_*`` variables, what a backend URL names, the
Redis ACL rule set, the daemon thread pool of the library's blocking calls, what a health check
reports, and the backend contract.

Nothing here imports redis, asyncio or any other module of the library (the import-linter
contract ``core-imports-no-io`` in pyproject.toml): what talks to a server lives in
`fencedlease._redis`, the faces and the backends.
"""
