use super::*;
use crate::record::execute;

/// A campaign that has seen one run of `name` (a catalogue world) under
/// seed `seed`, its only corpus world.
fn seen(name: &str, seed: u64, levers: Vec<Lever>) -> (Campaign, Scenario, RunOutcome) {
    let world = idem_scenarios::load::load(name)
        .expect("in the catalogue")
        .scenario;
    let outcome = execute(&world, seed, Design::Correct).expect("runs");
    let mut campaign = Campaign::new(seed, Levers(levers));
    campaign.runs = WARMUP_RUNS;
    let candidate = Candidate {
        world: world.clone(),
        seed,
        lever: Lever::Fresh,
        branch: None,
    };
    campaign.absorb(&candidate, Some(&outcome), Vec::new());
    (campaign, world, outcome)
}

/// A child runs under its parent's seed and is its parent up to its
/// new faults: the same events at the same times, so it branches from
/// the parent's state at that moment. Then it differs.
#[test]
fn a_child_is_its_parent_until_its_fault() {
    let (mut campaign, parent, outcome) = seen("backup-button", 3, vec![Lever::Break]);
    let no_fresh = |_: u64| None;
    let children = campaign.batch(16, &no_fresh);
    let mut branched = 0;
    for child in children.iter().filter(|c| c.lever == Lever::Break) {
        assert_eq!(child.seed, 3);
        let added = &child.world.faults[parent.faults.len()..];
        assert!(!added.is_empty());
        let at_ms = added
            .iter()
            .filter_map(|f| match f.when {
                When::At { at_ms } => Some(at_ms),
                When::After { .. } => None,
            })
            .min()
            .expect("a break is timed");
        let ran = execute(&child.world, child.seed, Design::Correct).expect("runs");
        let before = |o: &RunOutcome| {
            o.trace
                .events
                .iter()
                .filter(|e| {
                    e.t_ms < at_ms && !matches!(e.body, idem_sim::trace::TraceBody::Fault { .. })
                })
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(before(&ran), before(&outcome), "up to {at_ms} ms");
        branched += usize::from(ran.trace.hash() != outcome.trace.hash());
    }
    assert!(branched > 0, "some child went another way");
}

/// Every break lands on what its act involved: the acting host, its
/// attempt's provider, or the very store call behind it; and a
/// parent's (act, break) pairs are tried once each.
#[test]
fn a_break_is_pinned_on_its_act() {
    let (mut campaign, parent, _) = seen("backup-button", 5, vec![Lever::Break]);
    let reached = campaign.corpus[0].reached.clone();
    let mut tried = 0;
    for act in &reached {
        for kind in Break::ALL.into_iter().filter(|k| k.applies(act)) {
            let mut world = parent.clone();
            assert!(campaign.apply(kind, &mut world, act), "{kind:?} at {act:?}");
            let text = format!("{:?}", &world.faults[parent.faults.len()..]);
            let on_act = text.contains(&act.actor)
                || act.provider.as_deref().is_some_and(|p| text.contains(p))
                || act.call.is_some_and(|(op, nth)| {
                    text.contains(&format!("{op:?}")) && text.contains(&format!("nth: {nth}"))
                        || text.contains(&format!("nth: {}", nth + 1))
                });
            assert!(on_act, "{kind:?}: {text} for {act:?}");
            tried += 1;
        }
    }
    assert!(tried > 10, "{tried} pairs");
    let mut world = parent.clone();
    let mut made = 0;
    while campaign.break_next(0, &mut world) {
        made += 1;
        assert!(made <= tried, "each pair once");
    }
    assert_eq!(made, tried);
}
