"""Build the native data plane: the NTP server (appliance/edge/ntp/_fastpath.c with _auth.c and _nts.c), the PTP
event sender (appliance/edge/ptp/_syncsend.c), and the pieces they share with Python (appliance/protocol/native:
served time, the token bucket, the lateness histogram, exposed as appliance.protocol.dataplane).  They are the only implementation of what the appliance serves,
so they are not optional: building needs a C compiler, Python's headers and OpenSSL 3's libcrypto with its headers
(on Debian: build-essential, python3-dev and libssl-dev).  A missing one stops the install with a message naming
the package, rather than an appliance that cannot serve.
"""

import os
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup

HIDDEN = ["-fvisibility=hidden"]  # an extension's own functions are its own: only PyInit_* is exported
FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
# APPLIANCE_CFLAGS / APPLIANCE_LDFLAGS: extra flags, e.g. the sanitizers' (tests/unit/test_native_sanitized.py).
EXTRA_CFLAGS = os.environ.get("APPLIANCE_CFLAGS", "").split()
EXTRA_LDFLAGS = os.environ.get("APPLIANCE_LDFLAGS", "").split()
PROBE = b"""#include <Python.h>
#include <openssl/evp.h>
int main(void) { return EVP_CIPHER_fetch(NULL, "AES-128-ECB", NULL) == NULL; }
"""
NEEDS = "the native data plane needs a C compiler, Python's headers and OpenSSL 3's libcrypto headers"


def check_toolchain() -> None:
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    include = sysconfig.get_paths()["include"]
    try:
        probe = subprocess.run(cc + ["-I", include, "-x", "c", "-", "-o", os.devnull, "-lcrypto"], input=PROBE,
                               capture_output=True, timeout=120)
    except FileNotFoundError:
        sys.exit(f"error: no C compiler ({cc[0]}): {NEEDS}; on Debian: apt-get install build-essential")
    except subprocess.TimeoutExpired:
        sys.exit(f"error: the C compiler did not finish a probe in 120 s: {NEEDS}")
    if probe.returncode == 0:
        return
    err = probe.stderr.decode(errors="replace")
    if "Python.h" in err:
        sys.exit(f"error: Python.h not found: {NEEDS}; on Debian: apt-get install python3-dev")
    if "openssl" in err or "crypto" in err:
        sys.exit(f"error: OpenSSL 3's libcrypto or its headers not found: {NEEDS}; on Debian: apt-get install "
                 f"libssl-dev")
    sys.exit(f"error: the C compiler cannot build a probe of the data plane's needs ({NEEDS}):\n{err}")


if any(a in sys.argv for a in ("build_ext", "build", "bdist_wheel", "develop", "install", "editable_wheel")):
    check_toolchain()

NATIVE = "appliance/protocol/native"
HEADERS = [f"{NATIVE}/clockmap.h", f"{NATIVE}/bucket.h", f"{NATIVE}/lateness.h", "appliance/edge/kstamp.h"]
EDGE = "appliance/edge"  # kstamp.h: the kernel's timestamps, read one way
SHARED = Extension("appliance.protocol.dataplane", [f"{NATIVE}/dataplane.c"], include_dirs=[NATIVE],
                   extra_compile_args=FLAGS + EXTRA_CFLAGS, extra_link_args=EXTRA_LDFLAGS, depends=HEADERS)
NTP = Extension("appliance.edge.ntp._fastpath",
                [f"appliance/edge/ntp/{name}.c" for name in ("_fastpath", "_decide", "_auth", "_nts")],
                include_dirs=[NATIVE, EDGE], extra_compile_args=FLAGS + HIDDEN + EXTRA_CFLAGS, extra_link_args=EXTRA_LDFLAGS,
                libraries=["crypto"], depends=["appliance/edge/ntp/_nts.h", "appliance/edge/ntp/_auth.h", "appliance/edge/ntp/_fastpath.h",
                                               *HEADERS])
PTP = Extension("appliance.edge.ptp._syncsend",
                [f"appliance/edge/ptp/{name}.c" for name in ("_syncsend", "_sender", "_delayreq", "_ptpauth")],
                include_dirs=[NATIVE, EDGE], extra_compile_args=FLAGS + HIDDEN + EXTRA_CFLAGS, extra_link_args=EXTRA_LDFLAGS,
                libraries=["crypto"], depends=["appliance/edge/ptp/_ptpauth.h", "appliance/edge/ptp/_syncsend.h",
                                               *HEADERS])

setup(ext_modules=[SHARED, NTP, PTP])
