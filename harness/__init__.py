"""What the tests and the benchmarks share, owned by neither: third-party peers in network namespaces (ptp4l, pmc,
ptpd2, chronyd, tshark), the appliance's own commands run as processes, bare NTP and SNMP clients, and the pure
statistics and verdicts the benchmarks print and the unit tests check.

Not part of the product: the wheel ships ``appliance`` only (``pyproject.toml``), and nothing in ``appliance``
imports this package.  ``tests`` and ``bench`` import it; it imports neither (``tests/unit/test_layering.py``).
A missing peer skips a test locally and fails it under CI (``missing.py``); the benchmarks check their tools
themselves.
"""
