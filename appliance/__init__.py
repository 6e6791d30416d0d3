"""Grandmaster time-server appliance.

Conventions used throughout the package:

* Instants are ``int`` nanoseconds on a named axis: ``tai_ns`` (TAI since 1970-01-01, the PTP epoch),
  ``raw_ns`` (the local oscillator's reading), ``posix_ns`` (UTC without leap seconds, as the host clock
  counts) and, in simulation only, ``true_ns``.  Durations are ``int`` ns; frequencies are ``float`` ppb.
* Core modules never read a clock, open a socket or start a thread: every input carries its time.  The
  modules allowed to do I/O are listed in ``tests/unit/test_layering.py``.
"""

__version__ = "0.1.0"
