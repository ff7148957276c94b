//! redis-benchmark against hotkv (the debug binary, as the suite builds it): pipelined load
//! from 50 clients must complete every test with no error reply.

use std::time::Duration;

use hotkv_test_support::tools::redis_benchmark;

use crate::server;

#[test]
fn redis_benchmark_runs_without_errors() {
    let srv = server();
    let out = redis_benchmark(
        srv.port(),
        &["-t", "ping,set,get,incr,mset", "-P", "16", "-c", "50", "-n", "20000", "-q"],
        Duration::from_secs(240),
    );
    assert!(out.status.success(), "redis-benchmark exited with {}:\n{}\n{}", out.status, out.stdout, out.stderr);
    // -q rewrites a progress line with \r; the final figures end each test's line.
    let lines: Vec<&str> = out.stdout.split(['\r', '\n']).map(str::trim).filter(|l| !l.is_empty()).collect();
    let errors: Vec<&str> =
        lines.iter().copied().chain(out.stderr.lines()).filter(|l| l.to_ascii_lowercase().contains("error")).collect();
    assert!(errors.is_empty(), "redis-benchmark reported errors: {errors:?}");
    for test in ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET (10 keys)"] {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second")),
            "no result for {test}:\n{}",
            out.stdout
        );
    }
}
