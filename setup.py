"""Build the optional native NTP fast path; the appliance falls back to its Python path if it cannot be built."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("appliance.edge.ntp._fastpath", ["appliance/edge/ntp/_fastpath.c"],
                             extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers"],
                             optional=True)])
