//! Seed ranges and shards: which seeds a run, or one machine's part of a
//! run, takes.

use std::str::FromStr;

/// The most seeds one range may name.
pub const SEEDS_MAX: u64 = 1_000_000;

/// A seed range, end excluded: `A..B`, `A..=B`, or one seed `N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeds {
    pub start: u64,
    pub end: u64,
}

impl FromStr for Seeds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let number = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("{t:?} is not a seed (a whole number)"))
        };
        let (start, end) = if let Some((a, b)) = s.split_once("..=") {
            let b = number(b)?;
            (
                number(a)?,
                b.checked_add(1)
                    .ok_or("the range ends past the last seed")?,
            )
        } else if let Some((a, b)) = s.split_once("..") {
            (number(a)?, number(b)?)
        } else {
            let n = number(s)?;
            (n, n.checked_add(1).ok_or("the seed is past the last seed")?)
        };
        if start >= end {
            return Err(format!("the range {s} holds no seeds"));
        }
        if end - start > SEEDS_MAX {
            return Err(format!("at most {SEEDS_MAX} seeds per sweep"));
        }
        Ok(Seeds { start, end })
    }
}

impl Seeds {
    /// How many seeds the range holds.
    pub fn len(self) -> u64 {
        self.end - self.start
    }

    /// Whether the range holds no seed (a parsed range never does).
    pub fn is_empty(self) -> bool {
        self.start >= self.end
    }

    /// The seeds of `shard`, in order.
    pub fn shard(self, shard: Shard) -> Vec<u64> {
        (self.start..self.end)
            .enumerate()
            .filter(|(index, _)| shard.takes(*index as u64))
            .map(|(_, seed)| seed)
            .collect()
    }

    /// `A..B`, as the reports write a range.
    pub fn text(self) -> String {
        format!("{}..{}", self.start, self.end)
    }
}

/// One machine's part of a run: the seeds whose index in the range is
/// congruent to `index` modulo `count` (`--shard i/n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// The whole run.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether the seed at `position` in the range is this shard's.
    pub fn takes(self, position: u64) -> bool {
        position % self.count == self.index
    }

    /// The `n`-th seed of this shard in the endless range from `start`.
    pub fn nth_seed(self, start: u64, n: u64) -> Option<u64> {
        n.checked_mul(self.count)?
            .checked_add(self.index)?
            .checked_add(start)
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or("a shard is written i/n, like 0/4")?;
        let index: u64 = i
            .trim()
            .parse()
            .map_err(|_| format!("{i:?} is not a shard index"))?;
        let count: u64 = n
            .trim()
            .parse()
            .map_err(|_| format!("{n:?} is not a shard count"))?;
        if count == 0 || index >= count {
            return Err(format!(
                "shard {s}: the index must be below the count (0/{n} to {}/{n})",
                count.max(1) - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_shards_parse() {
        assert_eq!("3..6".parse(), Ok(Seeds { start: 3, end: 6 }));
        assert_eq!("3..=6".parse(), Ok(Seeds { start: 3, end: 7 }));
        assert_eq!("9".parse(), Ok(Seeds { start: 9, end: 10 }));
        assert!("6..3".parse::<Seeds>().is_err());
        assert!("a..3".parse::<Seeds>().is_err());
        let seeds = Seeds { start: 10, end: 20 };
        assert_eq!(seeds.shard("1/4".parse().expect("valid")), vec![11, 15, 19]);
        assert!("4/4".parse::<Shard>().is_err());
        assert!("0/0".parse::<Shard>().is_err());
    }

    #[test]
    fn an_endless_shard_takes_every_nth_seed() {
        let shard = Shard { index: 1, count: 3 };
        let seeds: Vec<u64> = (0..4).filter_map(|n| shard.nth_seed(100, n)).collect();
        assert_eq!(seeds, vec![101, 104, 107, 110]);
        assert_eq!(Shard::WHOLE.nth_seed(u64::MAX, 1), None);
    }
}
