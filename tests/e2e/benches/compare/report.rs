//! The tables: each figure's runs, their means and ratios.

use super::*;

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The runs' range, "lo–hi" (one value when they agree).
fn range(v: &[f64], unit: &str) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if (hi - lo).abs() < 1e-9 {
        format!("{lo:.2}{unit}")
    } else {
        format!("{lo:.2}–{hi:.2}{unit}")
    }
}

/// One table row: the mean of ours and of upstream, their runs' range,
/// and upstream ÷ ours (above 1: ours is faster or smaller).
pub(crate) fn row(what: &str, ours: &[f64], upstream: &[f64], unit: &str) {
    let (o, u) = (mean(ours.iter().copied()), mean(upstream.iter().copied()));
    println!(
        "| {what} | {} | {} | {:.2} |",
        range(ours, unit),
        range(upstream, unit),
        if o > 0.0 { u / o } else { f64::NAN }
    );
}

/// One figure of a run.
pub(crate) type Measure = dyn Fn(&RunResult) -> f64;

/// A row of the minimal-client table: each side's range and the minimal
/// client's mean ÷ each side's.
pub(crate) fn floor_row(
    what: &str,
    min: &[RunResult],
    ours: &[RunResult],
    up: &[RunResult],
    unit: &str,
    g: &Measure,
) {
    let vals = |v: &[RunResult]| v.iter().map(g).collect::<Vec<f64>>();
    let (m, o, u) = (vals(min), vals(ours), vals(up));
    let ratio = |a: &[f64], b: &[f64]| mean(a.iter().copied()) / mean(b.iter().copied());
    println!(
        "| {what} | {} | {} | {} | {:.2} | {:.2} |",
        range(&m, unit),
        range(&o, unit),
        range(&u, unit),
        ratio(&m, &o),
        ratio(&m, &u)
    );
}
