"""A kernel declaration as a site of the IR: its lowering for one problem key (`lower.py`,
`lower_chain.py` for the elementwise chains of its key, `lower_intrinsics.py` for its
tensor-core and asynchronous-copy statements) and its fork space, the configs a
site allows (`fork_space.py`)."""
