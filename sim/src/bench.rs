//! The reference a simulator benchmark is measured against: a turmoil
//! world with as many hosts as a scenario's, doing nothing but stepping
//! for as long. The ratio of a scenario's cost to this one's is the
//! engine's cost in the simulator, independent of the machine.

use std::time::Duration;

/// Steps an idle world of `hosts` hosts for `sim_ms` simulated
/// milliseconds in `tick_ms` steps; returns the number of steps.
pub fn idle_world(hosts: u32, sim_ms: u64, tick_ms: u64) -> u64 {
    let tick_ms = tick_ms.max(1);
    let mut sim = turmoil::Builder::new()
        .rng_seed(0)
        .tick_duration(Duration::from_millis(tick_ms))
        .simulation_duration(Duration::from_millis(sim_ms + 60_000))
        .build();
    for index in 0..hosts.saturating_sub(1) {
        sim.host(format!("idle-{index}").as_str(), move || async move {
            loop {
                tokio::time::sleep(Duration::from_millis(tick_ms)).await;
            }
        });
    }
    sim.client("idle-client", async move {
        tokio::time::sleep(Duration::from_millis(sim_ms)).await;
        Ok(())
    });
    let mut steps = 0;
    while !sim.step().expect("an idle world cannot fail") {
        steps += 1;
    }
    steps
}
