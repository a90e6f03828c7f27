//! Rounds: every daemon in both configurations, in alternating order, and the rows they measure.

use std::time::Instant;

use crate::stats::Measured;
use crate::{DaemonSpec, Shape};

/// Measurements of one table row: per daemon, one per successful round.
pub struct Row {
    /// Rows are sorted by group (the workload's place in the run), then configuration.
    pub group: usize,
    pub label: &'static str,
    pub config: usize,
    pub runs: Vec<Vec<Measured>>,
}

/// The rows measured so far, and the failed runs.
#[derive(Default)]
pub struct Results {
    pub rows: Vec<Row>,
    pub errors: Vec<String>,
}

/// Each daemon of `specs` in configurations 0 and 1 (driven as `shape(config, max_queues)`),
/// `rounds` times, in alternating order: `run(spec, config, shape)` measures one run of `what`
/// (a group number and a name for the log); its rows go in group `what.0`.
pub fn alternate(
    specs: &[DaemonSpec],
    rounds: usize,
    shape: impl Fn(usize, usize) -> Shape,
    what: (usize, &str),
    mut run: impl FnMut(&DaemonSpec, usize, Shape) -> Result<Vec<(&'static str, Measured)>, String>,
    results: &mut Results,
) {
    let (group, name) = what;
    for config in 0..2 {
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..specs.len()).collect()
            } else {
                (0..specs.len()).rev().collect()
            };
            for i in order {
                let spec = &specs[i];
                let shape = shape(config, spec.max_queues);
                let t = Instant::now();
                match run(spec, config, shape) {
                    Ok(measured) => {
                        let rows = &mut results.rows;
                        for (label, m) in measured {
                            let pos = rows
                                .iter()
                                .position(|r| r.label == label && r.config == config)
                                .unwrap_or_else(|| {
                                    rows.push(Row {
                                        group,
                                        label,
                                        config,
                                        runs: vec![Vec::new(); specs.len()],
                                    });
                                    rows.len() - 1
                                });
                            rows[pos].runs[i].push(m);
                        }
                        eprintln!(
                            "{name} {} round {}/{rounds} {} {}: {:.1} s",
                            shape.label(),
                            round + 1,
                            spec.cmd.name(),
                            spec.tag,
                            t.elapsed().as_secs_f64()
                        );
                    }
                    Err(e) => {
                        let msg = format!(
                            "{name} {} round {} `{}`: {e}",
                            shape.label(),
                            round + 1,
                            spec.cmd.command_line()
                        );
                        eprintln!("ERROR {msg}");
                        results.errors.push(msg);
                    }
                }
            }
        }
    }
}
