"""What the console says when it cannot listen: the address and port, the cause in words, and what to do."""

from __future__ import annotations

import errno

import pytest

from appliance.web.server import listen_problem


@pytest.mark.parametrize("code, says, retry", [
    (errno.EADDRINUSE, "TCP port 8443 is already in use by another program (`ss -ltnp 'sport = :8443'` shows "
                       "which): stop it, or choose another port with web.port", True),
    (errno.EACCES, "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE; or set web.port above "
                   "1023)", False),
    (errno.EADDRNOTAVAIL, "192.0.2.1 is not an address of this host (web.listen)", True),
    (errno.EINVAL, "Invalid argument", False),
])
def test_each_cause_is_said_in_words_with_what_to_do(code: int, says: str, retry: bool) -> None:
    strerror = "Invalid argument" if code == errno.EINVAL else "(the cause is said in words instead)"
    problem = listen_problem("192.0.2.1", 8443, OSError(code, strerror))
    assert str(problem) == f"cannot serve on 192.0.2.1 port 8443: {says}"
    assert problem.retry is retry
