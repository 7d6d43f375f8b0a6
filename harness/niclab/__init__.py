"""niclab: reproducible benchmarks of network cards and drivers."""

__version__ = "0.1.0"
