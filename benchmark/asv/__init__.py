"""asv (airspeed velocity) benchmarks of fedrepro; how to run and record them: README.md here."""
