//! Scenarios × seeds × designs: the work of a sweep (one design), a
//! mutants matrix and a design review's suite, numbered in one of two
//! orders so that a [`super::Runner`] can hand it out and give the results
//! back in that order.

use idem_core::design::Design;

use idem_scenarios::load::Loaded;

/// Which axis is outermost when the cells are numbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Design, then scenario, then seed: a sweep, a review's suite.
    DesignScenarioSeed,
    /// Seed, then design, then scenario: the mutants search, which stops a
    /// design at its first failure and so wants every design's early seeds
    /// first.
    SeedDesignScenario,
}

/// The runs of a sweep, a matrix or a suite.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub scenarios: &'a [Loaded],
    /// The seeds, in order (a shard's when the run is sharded).
    pub seeds: &'a [u64],
    pub designs: &'a [Design],
    pub order: Order,
}

/// One run of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixRun {
    /// Indices into the matrix's designs, scenarios and seeds.
    pub design: usize,
    pub scenario: usize,
    pub seed_index: usize,
    pub seed: u64,
    /// The run's place among its design's runs, in the matrix's order.
    pub position: usize,
}

impl Matrix<'_> {
    /// How many runs the matrix holds.
    pub fn len(&self) -> usize {
        self.per_design() * self.designs.len()
    }

    /// Whether the matrix holds no run.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many runs each design has.
    pub fn per_design(&self) -> usize {
        self.seeds.len() * self.scenarios.len()
    }

    /// The run numbered `index` (below [`Matrix::len`]).
    pub fn cell(&self, index: usize) -> MatrixRun {
        let (scenarios, seeds) = (self.scenarios.len(), self.seeds.len());
        let (design, scenario, seed_index, position) = match self.order {
            Order::DesignScenarioSeed => {
                let (design, rest) = (index / self.per_design(), index % self.per_design());
                (design, rest / seeds, rest % seeds, rest)
            }
            Order::SeedDesignScenario => {
                let round = self.designs.len() * scenarios;
                let (seed_index, rest) = (index / round, index % round);
                let (design, scenario) = (rest / scenarios, rest % scenarios);
                (
                    design,
                    scenario,
                    seed_index,
                    seed_index * scenarios + scenario,
                )
            }
        };
        MatrixRun {
            design,
            scenario,
            seed_index,
            seed: self.seeds[seed_index],
            position,
        }
    }

    /// The scenario and design of `cell`.
    pub fn at(&self, cell: MatrixRun) -> (&Loaded, Design) {
        (&self.scenarios[cell.scenario], self.designs[cell.design])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenarios(n: usize) -> Vec<Loaded> {
        let one = idem_scenarios::load::load("double-click").expect("a catalogue scenario");
        vec![one; n]
    }

    #[test]
    fn both_orders_number_every_cell_once() {
        let (scenarios, seeds) = (scenarios(3), [5, 6, 7, 8]);
        let designs = [Design::Correct, Design::CheckThenInsert];
        for order in [Order::DesignScenarioSeed, Order::SeedDesignScenario] {
            let matrix = Matrix {
                scenarios: &scenarios,
                seeds: &seeds,
                designs: &designs,
                order,
            };
            assert_eq!(matrix.len(), 24);
            let mut cells: Vec<(usize, usize, usize)> = (0..matrix.len())
                .map(|i| matrix.cell(i))
                .map(|c| (c.design, c.position, c.scenario * 10 + c.seed_index))
                .collect();
            cells.sort_unstable();
            cells.dedup();
            assert_eq!(cells.len(), 24, "{order:?}");
        }
    }

    #[test]
    fn orders_put_their_outer_axis_first() {
        let (scenarios, seeds) = (scenarios(2), [0, 1, 2]);
        let designs = [Design::Correct, Design::CheckThenInsert];
        let matrix = |order| Matrix {
            scenarios: &scenarios,
            seeds: &seeds,
            designs: &designs,
            order,
        };
        // Design-major: design 0's six runs, scenario by scenario.
        let c = matrix(Order::DesignScenarioSeed).cell(4);
        assert_eq!((c.design, c.scenario, c.seed, c.position), (0, 1, 1, 4));
        // Seed-major: every design and scenario under seed 0 first.
        let c = matrix(Order::SeedDesignScenario).cell(5);
        assert_eq!((c.design, c.scenario, c.seed, c.position), (0, 1, 1, 3));
        let c = matrix(Order::SeedDesignScenario).cell(3);
        assert_eq!((c.design, c.scenario, c.seed, c.position), (1, 1, 0, 1));
    }
}
