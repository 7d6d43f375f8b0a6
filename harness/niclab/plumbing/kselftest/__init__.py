"""The kernel's own NIC driver selftests, fetched and installed per kernel (niclab.model.selftests).

debian: a suite's signed package index and its `linux-source` package;
install: `make install` of tools/testing/selftests, the installed tree read
and packed, an installed tree a scenario names checked first;
bundle: one SelftestBundle per source version, cached.
"""
