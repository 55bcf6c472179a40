"""Real servers for tests and the harness: an embedded Redis, PostgreSQL, Toxiproxy, and the network
namespaces and nftables rules that cut them apart (`netns`, `partitions`).

Shipped publicly, like trio's test helpers, so users can run the same checks on their machines.
"""
