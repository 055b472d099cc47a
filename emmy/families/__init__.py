"""The family registry: one module per family declares everything the compiler knows of
it (its `.emmy` kernel, the graph ops it implements and how their sites' keys are built,
its reference, its check shapes, its kind); `emmy.families.registry` lists them. See
docs/adding-a-family.md."""
