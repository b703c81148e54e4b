"""epbench's harness: arms, sessions, the interleaved runner, the idle gate,
verification, the host fingerprint, results I/O and the CLI."""
