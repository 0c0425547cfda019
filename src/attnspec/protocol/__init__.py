"""The target protocol: what a target is and declares (targets.py: ``Target``, its capabilities, the
built-in adapters by name), what a layer is built from and reports (layers.py: ``LayerSpec``,
``Layer``, ``LayerKind``), the neighbouring conventions and mods it may declare (declared.py), and the
layouts of its parameters and inputs (layouts.py, memory_layouts.py).  It imports neither the kit nor
the runner: a user's declaration needs nothing else."""
