"""Harnesses for the suite and the benchmarks, built on `tether up`'s machinery: a real
nats-server locked by the generated configuration (`locked_nats`), a world of principals
in two tenants made through the real services (`authz`), and hosts in network namespaces
for partition tests (`netlab`). Never used by `tether up` itself."""
