"""What gymflow ships: its environments and benchmarks (data beside code)."""
