"""The facts every layer of emmy reads, below the IR: errors, paths, device identities, the
dtype and pointwise tables, regimes, a launch plan's records, a compile's options, the
problem-key codec and the version. Nothing here imports another layer of emmy."""
