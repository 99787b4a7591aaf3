# Kept equal to pyproject.toml's version: test/sdk/install.test.ts installs the package and compares them.
__version__ = "0.1.0"
