"""Build the optional native paths (the NTP fast path, the unicast PTP Sync sender); the appliance falls back to
its Python paths if they cannot be built."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(ext_modules=[Extension("appliance.edge.ntp._fastpath", ["appliance/edge/ntp/_fastpath.c"],
                             extra_compile_args=FLAGS, optional=True),
                   Extension("appliance.edge.ptp._syncsend", ["appliance/edge/ptp/_syncsend.c"],
                             extra_compile_args=FLAGS, optional=True)])
