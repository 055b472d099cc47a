"""emmy: PyTorch models to CUDA kernels, with every choice recalled from recorded knowledge."""

from emmy.base.version import __version__

__all__ = ["__version__", "compile"]


def compile(module, *example_inputs, **options):  # noqa: A001 - mirrors torch.compile
    """`emmy.compile(module, *example_inputs)`: see emmy.api.compile (imports torch)."""
    # the Python API imports torch: `import emmy`, which every emmy module and emmy-opt
    # runs first, must not
    from emmy.api import compile as compile_module

    return compile_module(module, *example_inputs, **options)
