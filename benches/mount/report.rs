//! The table: one row per case, the tensormount figure (median of the runs) next to its baseline,
//! with the spread of the runs and the ratio.

use std::fmt::Write as _;

use crate::measure::stats;
use crate::{GIB, MIB, Res};

#[derive(Clone, Copy, PartialEq)]
pub enum Unit {
    GBps,
    Iops,
    Secs,
    Ms,
    MiB,
}

#[derive(Clone)]
pub enum Cell {
    Vals(Vec<f64>),
    Text(String),
    Failed(String),
    None,
}

impl Cell {
    pub fn from(r: Res<Vec<f64>>) -> Cell {
        match r {
            Ok(v) => Cell::Vals(v),
            Err(e) => Cell::Failed(e),
        }
    }

    pub fn median(&self) -> Option<f64> {
        match self {
            Cell::Vals(v) => stats(v).map(|s| s.0),
            _ => None,
        }
    }
}

pub struct Row {
    pub id: &'static str,
    pub case: String,
    pub unit: Unit,
    pub tm: Cell,
    pub base: Cell,
    /// What the baseline is, shown after its figure.
    pub base_what: &'static str,
}

pub fn fmt_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::GBps => format!("{v:.2} GB/s"),
        Unit::Iops => format!("{:.1}k IOPS", v / 1000.0),
        Unit::Secs if v < 1.0 => format!("{:.0} ms", v * 1000.0),
        Unit::Secs => format!("{v:.2} s"),
        Unit::Ms => format!("{:.2} ms", v * 1000.0),
        Unit::MiB => format!("{:.1} MiB", v / MIB as f64),
    }
}

pub fn fmt_cell(unit: Unit, c: &Cell) -> String {
    match c {
        Cell::Vals(v) => match stats(v) {
            Some((m, _, _)) => fmt_value(unit, m),
            None => "-".into(),
        },
        Cell::Text(t) => t.clone(),
        Cell::Failed(e) => format!("FAILED: {e}"),
        Cell::None => "-".into(),
    }
}

/// Spread of the tensormount runs: n and (max - min) / median.
pub fn fmt_spread(c: &Cell) -> String {
    match c {
        Cell::Vals(v) => match stats(v) {
            Some((m, lo, hi)) if v.len() > 1 && m > 0.0 => {
                format!("{} ±{:.0}%", v.len(), (hi - lo) / m * 50.0)
            }
            Some(_) => format!("{}", v.len()),
            None => "0".into(),
        },
        _ => String::new(),
    }
}

pub fn fmt_ratio(r: &Row) -> String {
    match (r.tm.median(), r.base.median()) {
        (Some(t), Some(b)) if t > 0.0 && b > 0.0 => {
            let ratio = match r.unit {
                Unit::GBps | Unit::Iops => t / b,
                // Times: baseline / tensormount, so > 1 still means tensormount is faster.
                Unit::Secs | Unit::Ms => b / t,
                Unit::MiB => return String::new(),
            };
            format!("{ratio:.2}")
        }
        _ => String::new(),
    }
}

pub fn print_table(title: &str, rows: &[Row]) {
    let head = [
        "#",
        "case",
        "tensormount",
        "runs ±half-range",
        "baseline",
        "ratio",
    ];
    let body: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let base = match (&r.base, r.base_what) {
                (Cell::None, _) => "-".into(),
                (c, "") => fmt_cell(r.unit, c),
                (c, what) => format!("{} ({what})", fmt_cell(r.unit, c)),
            };
            [
                r.id.to_string(),
                r.case.clone(),
                fmt_cell(r.unit, &r.tm),
                fmt_spread(&r.tm),
                base,
                fmt_ratio(r),
            ]
        })
        .collect();
    let mut w = head.map(str::len);
    for b in &body {
        for (i, c) in b.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String; 6]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            // Text columns left-aligned, figures right-aligned.
            if i == 1 || i == 4 {
                let _ = write!(s, "| {c}{} ", " ".repeat(pad));
            } else {
                let _ = write!(s, "| {}{c} ", " ".repeat(pad));
            }
        }
        s.push('|');
        s
    };
    println!("\n{title}");
    println!("{}", line(&head.map(String::from)));
    let sep: Vec<String> = w.iter().map(|n| "-".repeat(n + 2)).collect();
    println!("|{}|", sep.join("|"));
    for b in &body {
        println!("{}", line(b));
    }
}

pub fn fmt_size(b: u64) -> String {
    if b >= GIB && b.is_multiple_of(GIB) {
        format!("{} GiB", b / GIB)
    } else if b >= GIB {
        format!("{:.2} GiB", b as f64 / GIB as f64)
    } else if b >= MIB {
        format!("{:.0} MiB", b as f64 / MIB as f64)
    } else {
        format!("{b} B")
    }
}
