"""Test helpers shipped with the package, so outside backends can run them too."""
