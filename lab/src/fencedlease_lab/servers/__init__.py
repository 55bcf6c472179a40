"""Real servers for tests and the harness: an embedded Redis, PostgreSQL, Toxiproxy.

Shipped publicly, like trio's test helpers, so users can run the same checks on their machines.
"""
