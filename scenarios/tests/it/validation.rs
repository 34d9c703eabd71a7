//! Validation errors, data-driven: each malformed snippet and the exact
//! position and message fragment of its first error, through one `check`.

use idem_scenarios::{ScenarioError, scenario_from_str};

/// A valid base that most cases extend: one client, one click.
const BASE: &str = r#"[[clients]]
name = "alice"
actions = [{ action = "click", key = "k1" }]
"#;

/// Parses `text` as `case.toml` and asserts that its first error is at
/// `position` ("line:col") and contains `fragment`; also that every error
/// renders as `case.toml:line:col: message`.
#[track_caller]
fn check(text: &str, position: &str, fragment: &str) {
    let errors = match scenario_from_str("case", "case.toml", text) {
        Ok(_) => {
            panic!("expected an error at {position} ({fragment}), but the file is valid:\n{text}")
        }
        Err(errors) => errors,
    };
    for error in errors.all() {
        assert!(
            error.to_string().starts_with("case.toml:"),
            "every error names the file: {error}"
        );
        assert!(
            error.position().is_some(),
            "every error has a position: {error}"
        );
    }
    let first = errors.first();
    let (line, col) = first.position().expect("checked above");
    assert_eq!(
        format!("{line}:{col}"),
        position,
        "position of {first} in:\n{text}\nall errors:\n{errors}"
    );
    assert!(
        first.message().contains(fragment),
        "message {:?} lacks {fragment:?}; all errors:\n{errors}",
        first.message()
    );
    assert_eq!(
        first.to_string(),
        format!("case.toml:{position}: {}", first.message())
    );
}

#[test]
fn a_small_file_is_enough() {
    let scenario = scenario_from_str("case", "case.toml", BASE).expect("valid");
    assert_eq!(scenario.topology, idem_sim::scenario::Topology::default());
    assert_eq!(scenario.timing, idem_sim::scenario::Timing::default());
    assert_eq!(scenario.clients[0].owner, "alice");
}

#[test]
fn syntax_and_types() {
    check("[timing\n", "1:8", "unclosed table");
    check(
        "description = 'x'\ndescription = 'y'\n",
        "2:1",
        "duplicate key",
    );
    check("[timing]\ntick_ms = \"fast\"\n", "2:11", "expected u64");
    check("[timing]\ntick_ms = -1\n", "2:11", "expected u64");
    check("[timing]\ntick = 1\n", "2:1", "unknown field `tick`");
    check("colour = 'blue'\n", "1:1", "unknown field `colour`");
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', speed = 3 }]\n",
        "3:43",
        "unknown field `speed`",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'dance', key = 'k' }]\n",
        "3:23",
        "unknown variant `dance`",
    );
    check("[[clients]]\nactions = []\n", "1:1", "missing field `name`");
    check(
        "expect_windows = ['double_click']\n",
        "1:19",
        "unknown variant `double_click`",
    );
    check(
        "[[faults]]\nfault = 'meteor'\n",
        "2:9",
        "unknown variant `meteor`",
    );
    check(
        "[[faults]]\nfault = 'store_lose_ack'\nop = 'drop_table'\n",
        "3:6",
        "unknown variant `drop_table`",
    );
    check(
        &format!("{BASE}[policy]\nkind = 'hedged'\nhedge_after_ms = 1.5\n"),
        "6:18",
        "expected u64",
    );
}

#[test]
fn timing_ranges() {
    check(
        &format!("{BASE}[timing]\ntick_ms = 0\n"),
        "5:11",
        "`tick_ms` must be at least 1",
    );
    check(
        &format!("{BASE}[timing]\nsettle_ms = 2000000\n"),
        "5:13",
        "SETTLE_MS_MAX",
    );
    check(
        &format!("{BASE}[timing]\nlatency_ms_min = 9\nlatency_ms_max = 3\n"),
        "5:18",
        "latency_ms_min (9) is above latency_ms_max (3)",
    );
    check(
        &format!("{BASE}[timing]\nlatency_ms_min = 9\n"),
        "5:18",
        "above latency_ms_max (5)",
    );
}

#[test]
fn topology_policy_and_timeouts() {
    check(
        &format!("{BASE}[topology]\napi_replicas = 1\n"),
        "5:16",
        "`api_replicas` must be at least 2",
    );
    check(
        &format!("{BASE}[topology]\napi_replicas = 9\n"),
        "5:16",
        "API_REPLICAS_MAX",
    );
    check(
        &format!("{BASE}[topology]\nworkers = 99\n"),
        "5:11",
        "WORKERS_MAX",
    );
    check(
        &format!("{BASE}[worker]\nattempts_max = 0\n"),
        "5:16",
        "`attempts_max` must be at least 1",
    );
    check(
        &format!("{BASE}[reconciler]\nunknown_max_ms = 0\n"),
        "5:18",
        "`unknown_max_ms` must be at least 1",
    );
    check(
        &format!("{BASE}[policy]\nkind = 'hedged'\n"),
        "5:8",
        "needs `hedge_after_ms`",
    );
    check(
        &format!("{BASE}[policy]\nkind = 'strict'\nhedge_after_ms = 5\n"),
        "6:18",
        "only to kind = \"hedged\"",
    );
}

#[test]
fn providers() {
    check(
        &format!("{BASE}[[providers]]\nname = 'primary'\nerror_per_mille = 1001\n"),
        "6:19",
        "`error_per_mille` must be at most 1000",
    );
    check(
        &format!("{BASE}[[providers]]\nname = 'primary'\n[[providers]]\nname = 'primary'\n"),
        "7:8",
        "provider \"primary\" is already defined",
    );
    check(
        &format!("{BASE}[[providers]]\nname = 'Big Provider'\n"),
        "5:8",
        "a-z, 0-9",
    );
    check(
        &format!("providers = []\n{BASE}"),
        "1:13",
        "at least one provider",
    );
    check(
        &format!("{BASE}[[providers]]\nname = 'primary'\ncontract = 'poetry'\n"),
        "6:12",
        "unknown variant `poetry`",
    );
}

#[test]
fn clients_and_actions() {
    check(
        "description = 'nobody'\n",
        "1:1",
        "at least one [[clients]] entry",
    );
    check(
        "[[clients]]\nname = 'a'\n[[clients]]\nname = 'a'\n",
        "4:8",
        "client \"a\" is already defined",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', provider = 'nope' }]\n",
        "3:54",
        "unknown provider \"nope\"",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', fallbacks = ['primary'] }]\n",
        "3:56",
        "already in this request",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'backup', key = 'k' }]\n",
        "3:39",
        "never clicks with key \"k\"",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k' }, { action = 'get', key = 'other' }]\n",
        "3:69",
        "never clicks with key \"other\"",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'probe', key = 'k', of = 'ghost' }]\n",
        "3:48",
        "unknown client \"ghost\"",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k' }]\n[[clients]]\nname = 'b'\nactions = [{ action = 'probe', key = 'x', of = 'a' }]\n",
        "6:38",
        "client \"a\" never clicks with key \"x\"",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'probe', key = 'k' }]\n",
        "3:23",
        "a probe needs `of`",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k' }, { action = 'get', key = 'k', retries = 2 }]\n",
        "3:84",
        "`retries` does not apply to a get action",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', retries = 99 }]\n",
        "3:53",
        "RETRIES_MAX",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = '' }]\n",
        "3:38",
        "1 to 255 visible ASCII",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', params = 'x' }]\n",
        "3:52",
        "`params` must be a table",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', params = { at = 1979-05-27 } }]\n",
        "3:52",
        "date-time",
    );
    check(
        "[[clients]]\nname = 'a'\nrequest_timeout_ms = 0\n",
        "3:22",
        "`request_timeout_ms` must be at least 1",
    );
}

#[test]
fn jitter() {
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', at_ms = 10, jitter_ms = [-20, 20] }]\n",
        "3:67",
        "the jitter can move this click to -10 ms, before the run starts",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', jitter_ms = [20, -20] }]\n",
        "3:55",
        "runs backwards",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', jitter_ms = -5 }]\n",
        "3:55",
        "must not be negative",
    );
    check(
        "[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', jitter_ms = [1, 2, 3] }]\n",
        "3:55",
        "exactly two numbers",
    );
    check(
        "[timing]\nsettle_ms = 1000\n[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k', at_ms = 900, jitter_ms = 100 }]\n",
        "5:68",
        "at or after settle_ms (1000)",
    );
}

#[test]
fn faults() {
    let hold = |a: &str, b: &str| {
        format!("{BASE}[[faults]]\nfault = 'hold'\na = '{a}'\nb = '{b}'\nduration_ms = 10\n")
    };
    check(
        &hold("client-alice", "api-3"),
        "7:5",
        "unknown host \"api-3\"",
    );
    check(
        &hold("client-bob", "api-1"),
        "6:5",
        "unknown host \"client-bob\"",
    );
    check(&hold("api-1", "api-1"), "7:5", "two different hosts");
    check(
        &format!(
            "{BASE}[topology]\nreconciler = false\n[[faults]]\nfault = 'crash'\nhost = 'reconciler'\n"
        ),
        "8:8",
        "the reconciler is off",
    );
    check(
        &format!("{BASE}[[faults]]\nfault = 'crash'\nhost = 'client-alice'\n"),
        "6:8",
        "clients cannot crash",
    );
    check(
        &format!("{BASE}[[faults]]\nfault = 'hold'\na = 'store'\nb = 'api-1'\n"),
        "5:9",
        "a hold fault needs `duration_ms`",
    );
    check(
        &format!(
            "{BASE}[[faults]]\nfault = 'provider_error'\nprovider = 'primary'\nerror_per_mille = 2000\nduration_ms = 5\n"
        ),
        "7:19",
        "`error_per_mille` must be at most 1000",
    );
    check(
        &format!(
            "{BASE}[[faults]]\nfault = 'provider_hang'\nprovider = 'tertiary'\nduration_ms = 5\n"
        ),
        "6:12",
        "unknown provider \"tertiary\"",
    );
    check(
        &format!("{BASE}[[faults]]\nfault = 'store_lose_ack'\nop = 'complete'\nnth = 0\n"),
        "7:7",
        "`nth` must be at least 1",
    );
    check(
        &format!("{BASE}[[faults]]\nfault = 'store_lose_ack'\nop = 'complete'\nhost = 'store'\n"),
        "7:8",
        "`host` does not apply to a store_lose_ack fault",
    );
    check(
        &format!(
            "{BASE}[[faults]]\nfault = 'store_lose_ack'\nop = 'complete'\nat_ms = 5\nafter = {{ kind = 'job_created' }}\n"
        ),
        "8:9",
        "either `at_ms` or `after`",
    );
    check(
        &format!(
            "{BASE}[[faults]]\nfault = 'store_lose_ack'\nop = 'complete'\nafter = {{ kind = 'job_created', nth = 0 }}\n"
        ),
        "7:39",
        "`nth` must be at least 1",
    );
    check(
        &format!("{BASE}[[faults]]\nfault = 'store_lose_ack'\nop = 'complete'\nat_ms = 200000\n"),
        "7:9",
        "the fault would never fire",
    );
    check(
        &format!(
            "{BASE}[[faults]]\nfault = 'link_latency'\na = 'store'\nb = 'api-*'\nlatency_ms_max = 0\nduration_ms = 5\n[timing]\nlatency_ms_min = 2\n"
        ),
        "8:18",
        "below the timing's latency_ms_min (2)",
    );
}

#[test]
fn limits_and_repeats() {
    let many_faults: String = (0..33)
        .map(|_| "[[faults]]\nfault = 'hold'\na = 'client-alice'\nb = 'api-*'\nduration_ms = 5\n")
        .collect();
    // 33 holds on both replicas are 66 faults: the 33rd table passes 64.
    check(&format!("{BASE}{many_faults}"), "164:1", "FAULTS_MAX");
    let many_clients: String = (0..65)
        .map(|i| format!("[[clients]]\nname = 'c{i}'\n"))
        .collect();
    check(&many_clients, "129:1", "CLIENTS_MAX");
    let actions: Vec<String> = (0..65)
        .map(|_| "{ action = 'click', key = 'k' }".to_owned())
        .collect();
    let text = format!(
        "[[clients]]\nname = 'a'\nactions = [\n{}\n]\n",
        actions.join(",\n")
    );
    check(&text, "68:1", "ACTIONS_PER_CLIENT_MAX");
    check(
        "expect_windows = ['mismatch', 'mismatch']\n[[clients]]\nname = 'a'\n",
        "1:31",
        "already expected",
    );
}

#[test]
fn every_error_is_reported_in_file_order() {
    let text = "[timing]\ntick_ms = 0\n[[clients]]\nname = 'a'\nactions = [{ action = 'get', key = 'x' }]\n[topology]\napi_replicas = 1\n";
    let errors = scenario_from_str("case", "case.toml", text).expect_err("invalid");
    let positions: Vec<Option<(usize, usize)>> =
        errors.all().iter().map(ScenarioError::position).collect();
    assert_eq!(
        positions,
        vec![Some((2, 11)), Some((5, 36)), Some((7, 16))],
        "{errors}"
    );
}

/// Every kind of the simulator's fault vocabulary is a `fault = ...` the
/// format accepts under its `name()`: a table naming only the kind is
/// refused for its first field, not for its name.
#[test]
fn every_fault_kind_is_a_name_the_format_accepts() {
    use idem_sim::scenario::FaultKind;
    for &kind in FaultKind::ALL {
        let name = kind.name();
        let first = kind.fields()[0];
        check(
            &format!("{BASE}[[faults]]\nfault = '{name}'\n"),
            "5:9",
            &format!("a {name} fault needs `{first}`"),
        );
    }
}

/// A field of another kind is refused, and the error lists the kind's own
/// fields in their order.
#[test]
fn a_fault_takes_only_its_kinds_fields() {
    use idem_sim::scenario::FaultKind;
    for &kind in FaultKind::ALL {
        let name = kind.name();
        let foreign = if kind.fields().contains(&"model") {
            "jump_ms = 1"
        } else {
            "model = 'x'"
        };
        let key = foreign.split(' ').next().expect("a key");
        check(
            &format!("{BASE}[[faults]]\n{foreign}\nfault = '{name}'\n"),
            // At the foreign field's value, on the line before `fault`.
            &format!("5:{}", key.len() + 4),
            &format!(
                "`{key}` does not apply to a {name} fault (it takes: {})",
                kind.fields().join(", ")
            ),
        );
    }
}
