"""What gymflow ships as data: workspace tasks in Harbor's format (`workspace/`) and the
benchmarks over them (`benchmarks/`), found through the registry's search roots."""
