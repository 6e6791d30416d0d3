"""The composition root and the runtime: what builds the appliance from its settings and runs it.

``build.py`` wires the engines, the reference drivers and the router; ``platforms.py`` gives it the simulated world or
a real receiver's clocks; ``outputs.py``, ``inputs.py`` and ``surfaces.py`` make the parts the settings ask for;
``runtime.py`` owns and runs them; ``main.py`` is ``appliance run``.
"""
