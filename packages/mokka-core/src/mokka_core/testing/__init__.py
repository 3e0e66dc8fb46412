"""Test helpers shared by every Mokka package: consumer tools, temporary roots, daemon runners."""
