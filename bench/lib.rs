//! Benchmarks live in bench/benches/.
