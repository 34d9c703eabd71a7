//! Confidence intervals for failure rates: the Wilson score interval of
//! one proportion, and Newcombe's hybrid score interval of the difference
//! of two (method 10 of Newcombe, "Interval estimation for the difference
//! between independent proportions", Statistics in Medicine 17, 1998).
//!
//! Why these and not the textbook `p ± z·sqrt(p(1-p)/n)`: a fuzz range
//! puts a few dozen worlds on each side of a feature, and a naive design
//! fails in none or all of some groups. The Wald interval collapses to a
//! point at 0 or 1 and overshoots [0, 1] near them; Wilson's stays inside
//! and keeps its coverage, and Newcombe's difference is built from the two
//! Wilson intervals, so that it inherits both properties.

use serde::Serialize;

/// The standard normal quantile of 0.975: a two-sided 95% interval.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// A closed interval of probabilities (or of their difference).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// `successes` out of `trials`, its estimate and its 95% Wilson interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Proportion {
    pub successes: u64,
    pub trials: u64,
    /// `successes / trials`.
    pub estimate: f64,
    pub interval: Interval,
}

impl Proportion {
    /// `None` when there are no trials: no rate can be estimated.
    pub fn new(successes: u64, trials: u64) -> Option<Self> {
        assert!(
            successes <= trials,
            "{successes} successes out of {trials} trials"
        );
        (trials > 0).then(|| Self {
            successes,
            trials,
            estimate: successes as f64 / trials as f64,
            interval: wilson(successes, trials, Z_95),
        })
    }
}

/// The Wilson score interval of `successes` out of `trials` (at least
/// one) at normal quantile `z`, clamped to [0, 1] (the bounds at 0 and
/// `trials` successes are 0 and 1 up to rounding).
pub fn wilson(successes: u64, trials: u64, z: f64) -> Interval {
    assert!(trials > 0, "a Wilson interval needs at least one trial");
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = z * z;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half_width = z / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Interval {
        low: (centre - half_width).clamp(0.0, 1.0),
        high: (centre + half_width).clamp(0.0, 1.0),
    }
}

/// The difference `a - b` of two independent proportions and its
/// interval by Newcombe's hybrid score method: each side's distance to
/// its own Wilson bound, combined in quadrature.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Difference {
    pub estimate: f64,
    pub interval: Interval,
}

impl Difference {
    pub fn between(a: &Proportion, b: &Proportion) -> Self {
        let estimate = a.estimate - b.estimate;
        let below = (a.estimate - a.interval.low).hypot(b.interval.high - b.estimate);
        let above = (a.interval.high - a.estimate).hypot(b.estimate - b.interval.low);
        Self {
            estimate,
            interval: Interval {
                low: (estimate - below).max(-1.0),
                high: (estimate + above).min(1.0),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() < 5e-5,
            "{actual} is not {expected} to four places"
        );
    }

    fn check_wilson(successes: u64, trials: u64, low: f64, high: f64) {
        let interval = wilson(successes, trials, Z_95);
        close(interval.low, low);
        close(interval.high, high);
    }

    /// Newcombe's single-proportion examples (Statistics in Medicine 17,
    /// 857-872, 1998, Table I, method 3) and the boundary cases.
    #[test]
    fn wilson_matches_the_published_values() {
        check_wilson(81, 263, 0.2553, 0.3662);
        check_wilson(15, 148, 0.0624, 0.1605);
        check_wilson(0, 20, 0.0, 0.1611);
        check_wilson(1, 29, 0.0061, 0.1718);
        check_wilson(0, 10, 0.0, 0.2775);
        check_wilson(5, 10, 0.2366, 0.7634);
        check_wilson(10, 10, 0.7225, 1.0);
    }

    fn check_difference(a: (u64, u64), b: (u64, u64), low: f64, high: f64) {
        let a = Proportion::new(a.0, a.1).expect("trials");
        let b = Proportion::new(b.0, b.1).expect("trials");
        let difference = Difference::between(&a, &b);
        close(difference.estimate, a.estimate - b.estimate);
        close(difference.interval.low, low);
        close(difference.interval.high, high);
    }

    /// Newcombe's difference examples (Statistics in Medicine 17, 873-890,
    /// 1998, Table II, method 10).
    #[test]
    fn the_difference_matches_the_published_values() {
        check_difference((56, 70), (48, 80), 0.0524, 0.3339);
        check_difference((9, 10), (3, 10), 0.1705, 0.8090);
        check_difference((5, 56), (0, 29), -0.0381, 0.1926);
        check_difference((0, 10), (0, 20), -0.1611, 0.2775);
    }

    #[test]
    fn no_trials_no_proportion() {
        assert_eq!(Proportion::new(0, 0), None);
        let half = Proportion::new(3, 6).expect("trials");
        assert_eq!(half.estimate, 0.5);
        assert!(half.interval.low < 0.5 && half.interval.high > 0.5);
    }
}
