"""Plans: an experiment's train step compiled for a TPU topology from this
CPU, its memory per chip against the chip's, and its step time bounded.

`transformer.tools.plan` is the command; `planner.plan` does the work:
the experiment's own task (built `shapes_only`: no data read), optimizer
and shardings over the devices of `topology.devices`, abstract state and
batch, XLA's TPU compiler (libtpu, no TPU needed), then `roofline` and
`hlo` read what it compiled. `search` tries meshes, remat and
micro-batches.
"""
