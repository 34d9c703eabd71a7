//! The PostgreSQL section of `idem bench` on a tiny budget, so that the bench cannot rot: every
//! path (the minimal service's too) measured at two client counts, the
//! report well-formed, and every answer and row checked (no duplicate row,
//! every repeat got its job).

use idem_real::pgbench::{self, BenchPath, PgBenchArgs, PgBenchReport};

#[test]
fn the_postgres_bench_measures_every_path_and_checks_every_answer() {
    let report = pgbench::run(&PgBenchArgs {
        clients: vec![1, 3],
        seconds_per_point: 1,
        seed: 7,
        pgbench: None,
        pool_ping: false,
    })
    .expect("the bench runs");
    assert!(report.passed(), "{}", report.table());
    assert_eq!(report.checks.duplicate_rows, 0);
    let paths: Vec<(BenchPath, u32)> = report.points.iter().map(|p| (p.path, p.clients)).collect();
    assert_eq!(
        paths,
        [
            (BenchPath::Http, 1),
            (BenchPath::Minimal, 1),
            (BenchPath::Store, 1),
            (BenchPath::Pgbench, 1),
            (BenchPath::Http, 3),
            (BenchPath::Minimal, 3),
            (BenchPath::Store, 3),
            (BenchPath::Pgbench, 3),
        ]
    );
    for point in &report.points {
        assert!(point.requests > 0, "{point:?}");
        assert!(point.requests_per_s > 0.0, "{point:?}");
        assert!(
            point.p50_ms > 0.0 && point.p50_ms <= point.p99_ms,
            "{point:?}"
        );
        assert_eq!(point.errors, 0, "{point:?}");
        // The two services' own threads were read, the others have none.
        let served = matches!(point.path, BenchPath::Http | BenchPath::Minimal);
        assert_eq!(
            point.server_cpu_ms_per_create.is_some(),
            served,
            "{point:?}"
        );
        if let Some(cpu_ms) = point.server_cpu_ms_per_create {
            assert!(cpu_ms > 0.0 && cpu_ms.is_finite(), "{point:?}");
        }
    }
    // Every request the three checked paths answered was checked, and the
    // mix had all three kinds in it.
    let idem_requests: u64 = report
        .points
        .iter()
        .filter(|p| p.path != BenchPath::Pgbench)
        .map(|p| p.requests)
        .sum();
    let checks = &report.checks;
    assert_eq!(checks.requests_checked, idem_requests);
    assert_eq!(
        checks.keys_created + checks.repeats_same_body + checks.repeats_other_body,
        idem_requests
    );
    assert!(
        checks.keys_created > 0 && checks.repeats_same_body > 0 && checks.repeats_other_body > 0
    );
    let ratio_clients: Vec<u32> = report
        .pg_vs_pgbench_throughput_ratio
        .iter()
        .map(|r| r.clients)
        .collect();
    assert_eq!(ratio_clients, [1, 3]);
    for ratio in &report.pg_vs_pgbench_throughput_ratio {
        assert!(
            ratio.http > 0.0 && ratio.minimal > 0.0 && ratio.store > 0.0,
            "{ratio:?}"
        );
    }
    let minimal_clients: Vec<u32> = report.server_vs_minimal.iter().map(|r| r.clients).collect();
    assert_eq!(minimal_clients, [1, 3]);
    for ratio in &report.server_vs_minimal {
        assert!(ratio.http_vs_minimal_throughput_ratio > 0.0, "{ratio:?}");
        assert!(
            ratio
                .server_cpu_vs_minimal_ratio
                .is_some_and(|r| r > 0.0 && r.is_finite()),
            "{ratio:?}"
        );
    }
    let json = serde_json::to_string(&report).expect("the report serializes");
    // Rates are floats, which a JSON round trip may move by an ulp: the
    // rest reads back exactly.
    let back: PgBenchReport = serde_json::from_str(&json).expect("and reads back");
    assert_eq!(back.checks, report.checks);
    assert_eq!(back.points.len(), report.points.len());
    for (read, written) in back.points.iter().zip(&report.points) {
        assert_eq!(
            (read.path, read.clients, read.requests, read.errors),
            (
                written.path,
                written.clients,
                written.requests,
                written.errors
            )
        );
    }
    assert!(json.contains("\"pg_vs_pgbench_throughput_ratio\""));
    assert!(json.contains("\"server_cpu_vs_minimal_ratio\""));
    assert!(json.contains("\"http_vs_minimal_throughput_ratio\""));
}

#[test]
fn the_postgres_bench_refuses_bad_budgets() {
    for args in [
        PgBenchArgs {
            clients: vec![],
            ..PgBenchArgs::default()
        },
        PgBenchArgs {
            clients: vec![0],
            ..PgBenchArgs::default()
        },
        PgBenchArgs {
            seconds_per_point: 0,
            ..PgBenchArgs::default()
        },
    ] {
        let err = pgbench::run(&args).expect_err("refused");
        assert!(matches!(err, pgbench::PgBenchError::Usage(_)), "{err}");
    }
}
