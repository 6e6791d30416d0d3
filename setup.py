"""Build the optional native paths (the NTP fast path, the unicast PTP Sync sender); the appliance falls back to
its Python paths if they cannot be built.  The NTP fast path answers NTS requests itself when OpenSSL 3's libcrypto
and its headers are there (probed by compiling and linking a few lines; APPLIANCE_FASTPATH_NTS=0 builds it without);
without them it leaves NTS requests to the Python server."""

import os
import subprocess
import sysconfig

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
LIBCRYPTO_PROBE = b"""#include <openssl/evp.h>
int main(void) { return EVP_CIPHER_fetch(NULL, "AES-128-ECB", NULL) == NULL; }
"""


def has_libcrypto() -> bool:
    if os.environ.get("APPLIANCE_FASTPATH_NTS", "1") == "0":
        return False
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    try:
        probe = subprocess.run(cc + ["-x", "c", "-", "-o", os.devnull, "-lcrypto"], input=LIBCRYPTO_PROBE,
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def ntp_fast_path() -> Extension:
    sources = ["appliance/edge/ntp/_fastpath.c"]
    if not has_libcrypto():
        return Extension("appliance.edge.ntp._fastpath", sources, extra_compile_args=FLAGS, optional=True)
    return Extension("appliance.edge.ntp._fastpath", sources + ["appliance/edge/ntp/_nts.c"],
                     extra_compile_args=FLAGS, define_macros=[("FASTPATH_NTS", "1")], libraries=["crypto"],
                     depends=["appliance/edge/ntp/_nts.h"], optional=True)


setup(ext_modules=[ntp_fast_path(),
                   Extension("appliance.edge.ptp._syncsend", ["appliance/edge/ptp/_syncsend.c"],
                             extra_compile_args=FLAGS, optional=True)])
